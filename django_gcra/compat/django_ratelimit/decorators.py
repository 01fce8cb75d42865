from functools import wraps

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.utils.module_loading import import_string

from . import ALL, UNSAFE
from .core import is_ratelimited
from .exceptions import Ratelimited

__all__ = ["ratelimit"]


def ratelimit(group=None, key=None, rate=None, method=ALL, block=True):
    """django-ratelimit's decorator: count the request; ``request.limited`` is True when
    this or an enclosing ``@ratelimit`` limited it; with ``block`` raise
    ``RATELIMIT_EXCEPTION_CLASS`` (default ``Ratelimited``). Async views work too: the
    decision runs in a worker thread, never blocking the event loop."""

    def decorator(fn):
        def check(request):
            old_limited = getattr(request, "limited", False)
            ratelimited = is_ratelimited(request=request, group=group, fn=fn, key=key, rate=rate, method=method,
                                         increment=True)
            request.limited = ratelimited or old_limited
            if ratelimited and block:
                cls = getattr(settings, "RATELIMIT_EXCEPTION_CLASS", Ratelimited)
                raise (import_string(cls) if isinstance(cls, str) else cls)()

        if iscoroutinefunction(fn):
            @wraps(fn)
            async def _awrapped(request, *args, **kw):
                await sync_to_async(check)(request)
                return await fn(request, *args, **kw)

            return _awrapped

        @wraps(fn)
        def _wrapped(request, *args, **kw):
            check(request)
            return fn(request, *args, **kw)

        return _wrapped

    return decorator


ratelimit.ALL = ALL
ratelimit.UNSAFE = UNSAFE
