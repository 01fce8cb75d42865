"""``@ratelimit``: limit one view by a configured policy or an inline limit.

    @ratelimit(policy="login", methods=["POST"])
    @ratelimit(key="ip", rate="5/m", burst=5, cost=lambda request: 2, block=False)

Works on sync and async views (async ones use ``adecide``, which never blocks the
event loop) and on class-based views through ``method_decorator``. ``request.ratelimit``
always holds the Decision; with ``block=False`` a denied request still reaches the view.
An inline limit is a one-limit policy named after the view (``view.<module>.<qualname>``
unless ``name=`` is given), so two views never share a counter by accident.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured

from .conf import setting
from .http import adenied_response, apply_quota_headers, denied_response
from .identity import adescriptors_for, descriptor_names, descriptors_for
from .limiter import adecide, decide, get_policy
from .policy import Policy, Problem, parse_policy

__all__ = ["ratelimit"]

@functools.lru_cache(maxsize=1024)
def inline_policy(name: str, key: tuple[str, ...], rate: str, burst: int | None, mode: str,
                  on_failure: str) -> Policy:
    """A one-limit Policy, validated by the settings parser; ImproperlyConfigured if bad."""
    problems: list[Problem] = []
    raw = {"limits": [{"name": "view", "key": list(key), "rate": rate, "burst": burst}],
           "mode": mode, "on_failure": on_failure}
    policy = parse_policy(name, raw, setting("DESCRIPTORS"), problems)
    errors = [p for p in problems if p.is_error]
    if errors or policy is None:
        raise ImproperlyConfigured(f"@ratelimit: {errors[0].msg if errors else 'invalid limit'}")
    return policy


def view_policy_name(view: Callable[..., Any]) -> str:
    """``view.<module>.<qualname>``, made a valid policy name (long ones end in a hash).

    Under ``method_decorator`` the view is a partial of a bound method, whose qualname is
    the defining class's (``View.dispatch`` for every CBV): the instance's class is used.
    """
    owner = getattr(getattr(view, "func", None), "__self__", None)
    if isinstance(view, functools.partial) and owner is not None:
        cls = type(owner)
        raw = f"view.{cls.__module__}.{cls.__qualname__}.{getattr(view, '__name__', '')}"
    else:
        raw = f"view.{getattr(view, '__module__', '')}.{getattr(view, '__qualname__', repr(view))}"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", raw)
    if len(name) > 64:
        name = name[:55] + "-" + hashlib.sha256(raw.encode()).hexdigest()[:8]
    return name


def _cost_of(cost: int | Callable[[Any], int], request: Any) -> int:
    return cost(request) if callable(cost) else cost


def ratelimit(policy: str | None = None, *, key: str | Iterable[str] | None = None, rate: str | None = None,
              burst: int | None = None, cost: int | Callable[[Any], int] = 1, methods: Iterable[str] | None = None,
              block: bool = True, name: str | None = None, mode: str = "enforce",
              on_failure: str = "open") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Limit a view; see the module docstring. Bad arguments raise ImproperlyConfigured now."""
    if (policy is None) == (rate is None):
        raise ImproperlyConfigured("@ratelimit needs either policy='name' or an inline key=, rate= (and burst=).")
    if policy is not None and (key is not None or burst is not None or name is not None):
        raise ImproperlyConfigured("@ratelimit(policy=...) takes its keys and burst from the policy; "
                                   "key=, burst= and name= are for inline limits.")
    if not callable(cost) and (isinstance(cost, bool) or not isinstance(cost, int) or cost < 0):
        raise ImproperlyConfigured(f"@ratelimit cost must be an int >= 0 or a callable, not {cost!r}")
    keys = (key,) if isinstance(key, str) else tuple(key or ("ip",))
    if policy is None:
        inline_policy(name or "inline", keys, rate, burst, mode, on_failure)  # validate now
    if isinstance(methods, str):
        methods = [methods]
    allowed_methods = frozenset(m.upper() for m in methods) if methods is not None else None

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        policy_name = name or view_policy_name(view)

        def resolve() -> Policy:
            if policy is not None:
                return get_policy(policy)
            return inline_policy(policy_name, keys, rate, burst, mode, on_failure)

        if iscoroutinefunction(view):
            @functools.wraps(view)
            async def async_wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
                if allowed_methods is not None and request.method not in allowed_methods:
                    return await view(request, *args, **kwargs)
                pol = resolve()
                descriptors = await adescriptors_for(request, descriptor_names(pol))
                decision = await adecide(pol, descriptors, _cost_of(cost, request), request=request)
                request.ratelimit = decision
                if block and not decision.allowed:
                    return await adenied_response(request, decision)
                return apply_quota_headers(await view(request, *args, **kwargs), decision)

            async_wrapper.ratelimit_policy = policy  # type: ignore[attr-defined]  # for check E026
            return async_wrapper

        @functools.wraps(view)
        def wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
            if allowed_methods is not None and request.method not in allowed_methods:
                return view(request, *args, **kwargs)
            pol = resolve()
            decision = decide(pol, descriptors_for(request, descriptor_names(pol)), _cost_of(cost, request),
                              request=request)
            request.ratelimit = decision
            if block and not decision.allowed:
                return denied_response(request, decision)
            return apply_quota_headers(view(request, *args, **kwargs), decision)

        wrapper.ratelimit_policy = policy  # type: ignore[attr-defined]  # for check E026
        return wrapper

    return decorator
