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
    messages += _check_resilience()
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


# Surfaces (issue 3): headers, denied view, identity, ROUTES, @ratelimit. IDs E020-E029, W020-W029.
@checks.register("django_gcra")
def check_surfaces(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from django.core.exceptions import ImproperlyConfigured

    from .conf import get_config
    from .http import STYLES
    from .middleware import parse_routes

    errors: list[checks.CheckMessage] = []
    if setting("HEADERS") not in STYLES:
        errors.append(checks.Error(f"DJANGO_GCRA['HEADERS'] is {setting('HEADERS')!r}.",
                                   hint=f"Use one of {', '.join(STYLES)}.", id="django_gcra.E020"))
    if setting("DENIED_VIEW"):
        try:
            if not callable(import_string(setting("DENIED_VIEW"))):
                raise ImportError("not callable")
        except ImportError as exc:
            errors.append(checks.Error(f"DJANGO_GCRA['DENIED_VIEW'] {setting('DENIED_VIEW')!r}: {exc}",
                                       hint="Give a dotted path to a callable (request, decision) -> HttpResponse.",
                                       id="django_gcra.E021"))
    prefix = setting("IPV6_PREFIX")
    if isinstance(prefix, bool) or not isinstance(prefix, int) or not 0 <= prefix <= 128:
        errors.append(checks.Error(f"DJANGO_GCRA['IPV6_PREFIX'] is {prefix!r}; use an int from 0 to 128.",
                                   id="django_gcra.E022"))
    hops = setting("TRUSTED_PROXIES")
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
        errors.append(checks.Error(f"DJANGO_GCRA['TRUSTED_PROXIES'] is {hops!r}; use the number of proxy hops "
                                   "in front of Django (0 for none).", id="django_gcra.E023"))
    problems: list[Any] = []
    routes = parse_routes(setting("ROUTES"), problems)
    errors += [checks.Error(p.msg, hint=p.hint, id=p.id) for p in problems]
    try:
        known = set(get_config().policies)
    except ImproperlyConfigured:
        return errors  # the policy errors are reported by check_settings
    for route in routes:
        if route.policy not in known:
            errors.append(checks.Error(f"DJANGO_GCRA['ROUTES'] names unknown policy {route.policy!r}.",
                                       hint="Add it to DJANGO_GCRA['POLICIES'].", id="django_gcra.E025"))
    for name in sorted(_routed_policies() - known):
        errors.append(checks.Error(f"A routed view's ratelimit_policy ({name!r}) is an unknown policy.",
                                   hint="Add it to DJANGO_GCRA['POLICIES'].", id="django_gcra.E026"))
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    ours = "django_gcra.middleware.RateLimitMiddleware"
    if routes and ours not in middleware:
        errors.append(checks.Warning("DJANGO_GCRA['ROUTES'] is set but RateLimitMiddleware is not in MIDDLEWARE.",
                                     hint=f"Add {ours!r} to MIDDLEWARE.", id="django_gcra.W020"))
    auth = "django.contrib.auth.middleware.AuthenticationMiddleware"
    if ours in middleware and auth in middleware and middleware.index(ours) < middleware.index(auth):
        errors.append(checks.Warning("RateLimitMiddleware comes before AuthenticationMiddleware, so the 'user' "
                                     "descriptor is always missing there.",
                                     hint="Move it after AuthenticationMiddleware.", id="django_gcra.W021"))
    return errors


def _routed_policies() -> set[str]:
    """``ratelimit_policy`` of every view in ROOT_URLCONF (@ratelimit views, DRF views)."""
    from django.urls import URLResolver, get_resolver

    def walk(patterns: Any) -> Any:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns)
                continue
            callback = pattern.callback
            for obj in (callback, getattr(callback, "view_class", None), getattr(callback, "cls", None)):
                name = getattr(obj, "ratelimit_policy", None)
                if isinstance(name, str):
                    yield name

    try:
        return set(walk(get_resolver().url_patterns))
    except Exception:  # a broken URLconf is reported by Django's own checks
        return set()

def _check_resilience() -> list[checks.CheckMessage]:
    """Timeouts, breaker and local fallback settings (django_gcra.E040-E049 / W040-W049)."""
    from .backends.settings import problems

    return [(checks.Error if p.is_error else checks.Warning)(p.msg, hint=p.hint, id=p.id) for p in problems()]

def _check_leases() -> list[checks.CheckMessage]:
    value = setting("LEASE_MAX_KEYS")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return [checks.Error(f"DJANGO_GCRA['LEASE_MAX_KEYS'] is {value!r}.",
                             hint="Give the most leased keys a process keeps per policy: a positive int.",
                             id="django_gcra.E053")]
    return []
