"""System checks of the DRF throttle configuration (``django_gcra.E060``-``E069``, ``W060``-``W069``).

DRF reads a throttle's rate when the throttle is made, at the first request, so a bad
rate or a missing scope is a 500 there; these checks find them at startup. DRF is
optional: it is imported inside ``drf_problems`` only, which returns ``[]`` without it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings

from .codes import Codes, Problem

__all__ = ["drf_problems"]

# Period spellings that mean what DRF reads from their first letter ("10/month" is per minute).
UNIT_NAMES = frozenset({"s", "sec", "secs", "second", "seconds", "m", "min", "mins", "minute", "minutes",
                        "h", "hr", "hrs", "hour", "hours", "d", "day", "days"})
RATES = "REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']"


def drf_problems() -> list[Problem]:
    """Every problem of DEFAULT_THROTTLE_RATES, NUM_PROXIES and the GCRA throttle classes
    reachable from DEFAULT_THROTTLE_CLASSES and from the views of ROOT_URLCONF."""
    try:
        from rest_framework.settings import api_settings
        from rest_framework.throttling import SimpleRateThrottle
    except ImportError:
        return []
    from django.core.exceptions import ImproperlyConfigured

    from .throttling import UNHONOURED, GCRARateThrottle, GCRAScopedRateThrottle

    problems: list[Problem] = []
    rates = api_settings.DEFAULT_THROTTLE_RATES
    if not isinstance(rates, Mapping):
        problems.append(Problem(Codes.DRF_RATES_NOT_A_DICT, f"{RATES} is {type(rates).__name__}, not a dict.",
                                "Map each scope to a rate such as '100/hour'."))
        rates = {}
    for scope, rate in rates.items():
        problems += _rate_problems(f"{RATES}[{scope!r}]", rate)
    problems += _proxy_problems(api_settings.NUM_PROXIES)

    classes, scoped = _reachable(problems)
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, GCRARateThrottle)):
            continue
        label = f"{cls.__module__}.{cls.__qualname__}"
        for name in UNHONOURED:
            if getattr(cls, name) is not getattr(SimpleRateThrottle, name):
                problems.append(Problem(Codes.DRF_UNHONOURED_OVERRIDE,
                                        f"{label} overrides {name!r}, which django_gcra cannot "
                                        "honour: time and throttle state come from Redis.",
                                        f"Remove the {name!r} override (see docs/howto/migrate-from-drf.md)."))
        uses: list[tuple[str | None, Any]] = [(None, None)]  # a rate throttle: made once
        if issubclass(cls, GCRAScopedRateThrottle):  # its rate comes with each view's scope
            uses = [(view, scope) for c, view, scope in scoped if c is cls]
        for view, scope in uses:
            where = label if view is None else f"{label} on {view} (throttle_scope {scope!r})"
            try:
                throttle = cls()
                if view is not None:
                    throttle.scope = scope
                    throttle.rate = throttle.get_rate()
                    throttle.num_requests, throttle.duration = throttle.parse_rate(throttle.rate)
                if throttle.rate is not None:
                    throttle.gcra_policy()
            except ImproperlyConfigured as exc:
                problems.append(Problem(Codes.DRF_THROTTLE_UNMADE,
                                        f"{where}: {exc}", "DRF would raise this at the first "
                                        "request (a 500): add the scope's rate, or fix the class's rate."))
            except Exception as exc:  # a custom get_rate/parse_rate that fails
                problems.append(Problem(Codes.DRF_THROTTLE_UNMADE, f"{where}: {type(exc).__name__}: {exc}"))
    return problems


def _rate_problems(where: str, rate: Any) -> list[Problem]:
    from django.core.exceptions import ImproperlyConfigured

    from .drf_support import parse_drf_rate, throttle_policy

    if rate is None:
        return []  # DRF's "not throttled"
    try:
        num, duration = parse_drf_rate(rate)
        if num and duration is not None:
            throttle_policy("check", num, duration, None, record=False)
    except ImproperlyConfigured as exc:
        return [Problem(Codes.DRF_BAD_RATE, f"{where}: {exc}", "DRF would fail every throttled request (a 500).")]
    problems = []
    period = rate.split("/")[1].strip()
    if period[:1].isalpha() and period.lower() not in UNIT_NAMES:
        problems.append(Problem(Codes.DRF_FIRST_LETTER_PERIOD,
                                f"{where} is {rate!r}: DRF reads only the period's first letter, "
                                f"so this is {num} per {duration} s.",
                                "Spell the period s, sec, min, hour or day (or '10/5m' for a multiple)."))
    if num == 0:
        problems.append(Problem(Codes.DRF_ZERO_RATE, f"{where} is {rate!r}: every request is refused.",
                                "Remove the scope's throttle, or give a positive rate."))
    return problems


def _proxy_problems(num_proxies: Any) -> list[Problem]:
    gcra = getattr(settings, "DJANGO_GCRA", {})
    gcra = gcra if isinstance(gcra, Mapping) else {}
    if num_proxies is None:
        return []
    if "TRUSTED_PROXIES" in gcra:
        if gcra["TRUSTED_PROXIES"] == num_proxies:
            return []
        return [Problem(Codes.DRF_PROXIES_DISAGREE, f"REST_FRAMEWORK['NUM_PROXIES'] is {num_proxies!r} but "
                        f"DJANGO_GCRA['TRUSTED_PROXIES'] is {gcra['TRUSTED_PROXIES']!r}; the GCRA throttles use "
                        "TRUSTED_PROXIES.", "Give both the number of proxies in front of Django.")]
    if num_proxies == 0:
        return []
    return [Problem(Codes.DRF_PROXIES_DISAGREE,
                    f"REST_FRAMEWORK['NUM_PROXIES'] is {num_proxies!r}, which the GCRA throttles "
                    "follow, but DJANGO_GCRA['TRUSTED_PROXIES'] is unset (0), so the middleware, @ratelimit and "
                    "PolicyThrottle key 'ip' by the proxy's address.",
                    f"Set DJANGO_GCRA['TRUSTED_PROXIES'] = {num_proxies!r}.")]


def _reachable(problems: list[Problem]) -> tuple[list[Any], list[tuple[Any, str, Any]]]:
    """The throttle classes of DEFAULT_THROTTLE_CLASSES and of the URLconf's views, and the
    (class, view name, throttle_scope) of every view that has a scope."""
    from django.utils.module_loading import import_string

    classes: list[Any] = []
    raw = getattr(settings, "REST_FRAMEWORK", {}) or {}
    for path in (raw.get("DEFAULT_THROTTLE_CLASSES", ()) if isinstance(raw, Mapping) else ()):
        try:
            classes.append(import_string(path) if isinstance(path, str) else path)
        except ImportError as exc:
            problems.append(Problem(Codes.DRF_BAD_CLASS_PATH,
                                    f"REST_FRAMEWORK['DEFAULT_THROTTLE_CLASSES'] entry {path!r} "
                                    f"cannot be imported: {exc}."))
    scoped = []
    for view in _views():
        for cls in getattr(view, "throttle_classes", None) or ():
            classes.append(cls)
            scope = getattr(view, getattr(cls, "scope_attr", "throttle_scope"), None)
            if scope:
                scoped.append((cls, f"{view.__module__}.{view.__qualname__}", scope))
    unique = list(dict.fromkeys(classes))
    return unique, list(dict.fromkeys(scoped))


def _views() -> Iterator[Any]:
    """The view classes (DRF's ``cls``, Django's ``view_class``) of ROOT_URLCONF."""
    from django.urls import URLResolver, get_resolver

    def walk(patterns: Any) -> Iterator[Any]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns)
                continue
            for view in (getattr(pattern.callback, "cls", None), getattr(pattern.callback, "view_class", None)):
                if isinstance(view, type):
                    yield view

    try:
        yield from list(walk(get_resolver().url_patterns))
    except Exception:  # a broken URLconf is reported by Django's own checks
        return
