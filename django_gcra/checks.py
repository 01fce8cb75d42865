"""System checks; every ID is listed in docs/reference/checks.md."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.utils.module_loading import import_string

from .conf import get_problems, setting


@checks.register("django_gcra")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    for problem in get_problems():
        kind = checks.Error if problem.is_error else checks.Warning
        messages.append(kind(problem.msg, hint=problem.hint, id=problem.id))
    messages += _check_cache()
    messages += _check_descriptors()
    messages += _check_leases()
    return messages


def _check_cache() -> list[checks.CheckMessage]:
    alias = setting("CACHE_ALIAS")
    caches = getattr(settings, "CACHES", {})
    if alias not in caches:
        return [checks.Error(f"DJANGO_GCRA['CACHE_ALIAS'] is {alias!r}, which is not in CACHES.",
                             hint="Name a django-redis cache alias.", id="django_gcra.E006")]
    backend = caches[alias].get("BACKEND", "")
    try:
        from django_redis.cache import RedisCache

        ok = issubclass(import_string(backend), RedisCache)
    except ImportError:
        ok = False
    if not ok:
        return [checks.Error(f"CACHES[{alias!r}] uses {backend!r}, not django-redis.",
                             hint="Set its BACKEND to 'django_redis.cache.RedisCache'.", id="django_gcra.E007")]
    return []


def _check_descriptors() -> list[checks.CheckMessage]:
    from .identity import resolve_custom

    messages: list[checks.CheckMessage] = []
    custom = setting("DESCRIPTORS")
    for name, path in (custom.items() if isinstance(custom, dict) else []):
        try:
            resolve_custom(path)
        except ImportError as exc:
            messages.append(checks.Error(f"DJANGO_GCRA['DESCRIPTORS'][{name!r}]: {exc}",
                                         hint="Give a dotted path to a callable taking the request.",
                                         id="django_gcra.E013"))
    return messages


def _check_leases() -> list[checks.CheckMessage]:
    value = setting("LEASE_MAX_KEYS")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return [checks.Error(f"DJANGO_GCRA['LEASE_MAX_KEYS'] is {value!r}.",
                             hint="Give the most leased keys a process keeps per policy: a positive int.",
                             id="django_gcra.E053")]
    return []
