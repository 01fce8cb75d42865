"""``is_ratelimited`` and ``get_usage`` as in django-ratelimit 4.1, decided by django_gcra.

Everything up to the counter (method matching, the group of a view, rates and keys in all
their forms, the ``RATELIMIT_*`` settings) is django-ratelimit's. The counter is a GCRA
limit of rate N/period and burst N in one script call (``django_gcra.decide``):
``increment=True`` spends one unit, ``increment=False`` peeks (cost 0).
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.dummy import DummyCache
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from django_gcra import decide

from . import ALL, UNSAFE
from .buckets import VALUE, bucket_policy, key_id, methods_id, policy_name

__all__ = ["get_usage", "is_ratelimited"]

_PERIODS = {
    "s": 1,
    "m": 60,
    "h": 60 * 60,
    "d": 24 * 60 * 60,
}


def _get_ip(request):
    ip_meta = getattr(settings, "RATELIMIT_IP_META_KEY", None)
    if not ip_meta:
        ip = request.META["REMOTE_ADDR"]
        if not ip:
            raise ImproperlyConfigured(
                "IP address in REMOTE_ADDR is empty. This can happen when using a reverse proxy and connecting "
                "to the app server with Unix sockets. See the documentation for RATELIMIT_IP_META_KEY.")
    elif callable(ip_meta):
        ip = ip_meta(request)
    elif isinstance(ip_meta, str) and "." in ip_meta:
        ip = import_string(ip_meta)(request)
    elif ip_meta in request.META:
        ip = request.META[ip_meta]
    else:
        raise ImproperlyConfigured(f'Could not get IP address from "{ip_meta}"')

    ipv6 = ":" in ip
    mask = getattr(settings, "RATELIMIT_IPV6_MASK", 64) if ipv6 else getattr(settings, "RATELIMIT_IPV4_MASK", 32)
    network = ipaddress.ip_network(f"{ip}/{mask}", strict=False)
    return str(network.network_address)


def user_or_ip(request):
    if request.user.is_authenticated:
        return str(request.user.pk)
    return _get_ip(request)


_SIMPLE_KEYS = {
    "ip": _get_ip,
    "user": lambda r: str(r.user.pk),
    "user_or_ip": user_or_ip,
}


def get_header(request, header):
    key = "HTTP_" + header.replace("-", "_").upper()
    return request.META.get(key, "")


_ACCESSOR_KEYS = {
    "get": lambda r, k: r.GET.get(k, ""),
    "post": lambda r, k: r.POST.get(k, ""),
    "header": get_header,
}


def _method_match(request, method=ALL):
    if method == ALL:
        return True
    if not isinstance(method, (list, tuple)):
        method = [method]
    return request.method in [m.upper() for m in method]


rate_re = re.compile(r"([\d]+)/([\d]*)([smhd])?")


def _split_rate(rate):
    """``"5/m"`` -> ``(5, 60)``; ``"100/10s"``, ``"100/10"`` -> ``(100, 10)``; a tuple as is."""
    if isinstance(rate, tuple):
        return rate
    match = rate_re.match(rate) if isinstance(rate, str) else None
    if match is None:
        raise ImproperlyConfigured(f"Invalid ratelimit rate {rate!r}: expected 'N/period' such as '5/m' or '100/10s'")
    count, multi, period = match.groups()
    count = int(count)
    if not period:
        period = "s"
    seconds = _PERIODS[period.lower()]
    if multi:
        seconds = seconds * int(multi)
    return count, seconds


def _group_of(fn):
    """The group of a view: ``module[.Class].qualname``, as django-ratelimit computes it."""
    parts = []
    if isinstance(fn, functools.partial):
        fn = fn.func
    if fn.__name__ == "bound_func":  # Django < 2.1's method_decorator
        fn = fn.__closure__[0].cell_contents
    if hasattr(fn, "__module__"):
        parts.append(fn.__module__)
    if hasattr(fn, "__self__"):
        parts.append(fn.__self__.__class__.__name__)
    parts.append(fn.__qualname__)
    return ".".join(parts)


def _key_value(group, request, key):
    if not key:
        raise ImproperlyConfigured("Ratelimit key must be specified")
    if callable(key):
        value = key(group, request)
    elif key in _SIMPLE_KEYS:
        value = _SIMPLE_KEYS[key](request)
    elif ":" in key:
        accessor, k = key.split(":", 1)
        if accessor not in _ACCESSOR_KEYS:
            raise ImproperlyConfigured(f"Unknown ratelimit key: {key}")
        value = _ACCESSOR_KEYS[accessor](request, k)
    elif "." in key:
        value = import_string(key)(group, request)
    else:
        raise ImproperlyConfigured(f"Could not understand ratelimit key: {key}")
    if value is None:
        raise ImproperlyConfigured(f"Ratelimit key {key_id(key)!r} gave None for group {group!r}")
    return str(value)


def is_ratelimited(request, group=None, fn=None, key=None, rate=None, method=ALL, increment=False):
    usage = get_usage(request, group, fn, key, rate, method, increment)
    if usage is None:
        return False
    return usage["should_limit"]


def get_usage(request, group=None, fn=None, key=None, rate=None, method=ALL, increment=False):
    """``{"count", "limit", "should_limit", "time_left"}``, or None when not limited at all
    (disabled, another method, no rate, or the store failing with ``RATELIMIT_FAIL_OPEN``)."""
    if group is None and fn is None:
        raise ImproperlyConfigured("get_usage must be called with either `group` or `fn` arguments")
    if not getattr(settings, "RATELIMIT_ENABLE", True):
        return None
    if not _method_match(request, method):
        return None
    if group is None:
        group = _group_of(fn)

    if callable(rate):
        rate = rate(group, request)
    elif isinstance(rate, str) and "." in rate:
        rate = import_string(rate)(group, request)
    if rate is None:
        return None
    limit, period = _split_rate(rate)
    if period <= 0:
        raise ImproperlyConfigured("Ratelimit period must be greater than 0")
    value = _key_value(group, request, key)

    alias = getattr(settings, "RATELIMIT_USE_CACHE", "default")
    cache = caches[alias]  # InvalidCacheBackendError for an alias not in CACHES, as there
    cost = 1 if increment else 0
    if limit <= 0:  # "0/m": nothing is ever admitted, so there is nothing to ask the store
        return {"count": cost, "limit": 0, "should_limit": True, "time_left": period}
    if isinstance(cache, DummyCache):
        return _fresh(limit, period, cost)
    _require_redis(alias, cache)
    fail_open = getattr(settings, "RATELIMIT_FAIL_OPEN", False)
    # A peek spends nothing, so a store failure reads as an empty counter (django-ratelimit's
    # cache.get(key, 0)); only a counted request fails closed.
    on_failure = "open" if fail_open or not increment else "closed"
    name = policy_name(group, limit, period, key_id(key), methods_id(method))
    decision = decide(bucket_policy(name, limit, period, on_failure, alias), {VALUE: value}, cost, request=request)
    return _usage(decision, limit, cost)


def _usage(decision, limit, cost):
    if decision.fallback:
        if decision.unavailable:  # failing closed: django-ratelimit's answer when the cache fails
            return {"count": 0, "limit": 0, "should_limit": True, "time_left": -1}
        if cost:  # failing open
            return None
        return {"count": 0, "limit": limit, "should_limit": False, "time_left": 0}
    in_use = limit - decision.remaining  # units the bucket holds now (after this request if admitted)
    if cost:
        # A denied request is not counted by GCRA; its count is what it would have made,
        # so count > limit exactly when it is limited, as in a fixed window.
        should_limit = not decision.allowed
        count = in_use + (cost if should_limit else 0)
    else:
        # A peek answers "would the next request be limited": no unit is left.
        should_limit = decision.remaining < 1
        count = in_use
    return {"count": count, "limit": limit, "should_limit": should_limit,
            "time_left": math.ceil(decision.reset_after)}


def _fresh(limit, period, cost):
    """A DummyCache stores nothing, so every request meets a full bucket (django-ratelimit
    with a DummyCache never limits either, a zero rate apart)."""
    return {"count": cost, "limit": limit, "should_limit": cost > limit,
            "time_left": math.ceil(cost * period / limit)}


def _require_redis(alias, cache):
    from django_redis.cache import RedisCache

    if not isinstance(cache, RedisCache):
        raise ImproperlyConfigured(
            f"RATELIMIT_USE_CACHE {alias!r} is a {type(cache).__module__}.{type(cache).__qualname__}: "
            "django_gcra decides on Redis, so name a django_redis.cache.RedisCache alias "
            "(or a DummyCache, which never counts).")


is_ratelimited.ALL = ALL
is_ratelimited.UNSAFE = UNSAFE
get_usage.ALL = ALL
get_usage.UNSAFE = UNSAFE
