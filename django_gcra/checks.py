"""The system checks, registered in one place; every ID is in ``codes.Codes`` and listed
in docs/reference/checks.md.

The settings' own problems come from ``conf.problems()``; the checks here add what needs
the rest of the project: importing the named callables, the URLconf, the middleware
order, and (with ``--database``) the overrides table.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.urls import URLResolver, get_resolver
from django.utils.module_loading import import_string

from . import catalog
from .codes import Codes, Problem
from .conf import get_settings, problems
from .decorators import waiting_view_problems
from .drf_checks import drf_problems
from .override_rules import override_problem

__all__ = ["check_access_rules", "check_overrides", "check_settings"]

MIDDLEWARE = "django_gcra.middleware.RateLimitMiddleware"
AUTH_MIDDLEWARE = "django.contrib.auth.middleware.AuthenticationMiddleware"


def _message(problem: Problem) -> checks.CheckMessage:
    kind = checks.Error if problem.is_error else checks.Warning
    return kind(problem.msg, hint=problem.hint, id=problem.id)


@checks.register("django_gcra")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    found = list(problems())
    if not any(p.is_error for p in found):
        found += (_callables() + _routed_views() + _middleware() + drf_problems() + waiting_view_problems()
                  + _switched_off())
    return [_message(p) for p in found]


def _callables() -> list[Problem]:
    config = get_settings()
    found = []
    for name, path in config.descriptors.items():
        if not _importable(path):
            found.append(Problem(Codes.BAD_DESCRIPTOR_PATH, f"DJANGO_GCRA['DESCRIPTORS'][{name!r}]: {path!r} does "
                                 "not import, or is not callable.",
                                 "Give a dotted path to a callable taking the request."))
    for policy in config.policies.values():
        if policy.budget is not None and policy.budget.home is not None and not _importable(policy.budget.home):
            found.append(Problem(Codes.BAD_HOME, f"DJANGO_GCRA['POLICIES'][{policy.name!r}]['budget']['home']: "
                                 f"{policy.budget.home!r} does not import, or is not callable.",
                                 "Give a dotted path to a callable taking the descriptors and returning a region."))
    sources = [("DJANGO_GCRA", config.access)] + [
        (f"DJANGO_GCRA['POLICIES'][{p.name!r}]", p.access) for p in config.policies.values()]
    for where, rules in sources:
        for kind in ("exempt", "deny"):
            for path in rules.of(kind).callables if rules else ():
                if not _importable(path):
                    label = f"{where}[{kind.upper()!r}]" if where == "DJANGO_GCRA" else f"{where}[{kind!r}]"
                    found.append(Problem(Codes.BAD_ACCESS_CALLABLE, f"{label}: {path!r} does not import, or is not "
                                         "callable.", "Give a dotted path to a callable request -> bool."))
    for index, route in enumerate(config.routes):
        for field, dotted in (("settle", route.settle), ("count_when", route.count_when)):
            if dotted is not None and not _importable(dotted):
                found.append(Problem(Codes.BAD_SETTLE, f"DJANGO_GCRA['ROUTES'][{index}][{field!r}]: {dotted!r} does "
                                     "not import, or is not callable.",
                                     "Give a dotted path to a callable (request, response) -> "
                                     f"{'int' if field == 'settle' else 'bool'}."))
    if config.denied_view and not _importable(config.denied_view):
        found.append(Problem(Codes.BAD_DENIED_VIEW, f"DJANGO_GCRA['DENIED_VIEW'] {config.denied_view!r} does not "
                             "import, or is not callable.",
                             "Give a dotted path to a callable (request, decision) -> HttpResponse."))
    return found


def _switched_off() -> list[Problem]:
    """``ENABLED: False`` outside DEBUG: a deployment with every limit off (read here, not in
    ``conf``: ``DEBUG`` is not a ``DJANGO_GCRA`` setting)."""
    if get_settings().enabled or settings.DEBUG:
        return []
    return [Problem(Codes.LIMITER_DISABLED, "DJANGO_GCRA['ENABLED'] is False while DEBUG is False: every rate and "
                    "concurrency limit is off, and nothing is audited.",
                    "Set ENABLED to True in production; keep False for tests and local development only.")]


def _importable(path: Any) -> bool:
    try:
        return callable(import_string(path))
    except (ImportError, TypeError, ValueError):
        return False


def _routed_views() -> list[Problem]:
    """``ratelimit_policy`` of every view in ROOT_URLCONF (@ratelimit views, DRF views)."""

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
        named = set(walk(get_resolver().url_patterns))
    except Exception:  # a broken URLconf is reported by Django's own checks
        return []
    return [Problem(Codes.VIEW_UNKNOWN_POLICY, f"A routed view's ratelimit_policy ({name!r}) is an unknown policy.",
                    "Add it to DJANGO_GCRA['POLICIES'].") for name in sorted(named - set(get_settings().policies))]


def _middleware() -> list[Problem]:
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    found = []
    if get_settings().routes and MIDDLEWARE not in middleware:
        found.append(Problem(Codes.NO_MIDDLEWARE, "DJANGO_GCRA['ROUTES'] is set but RateLimitMiddleware is not in "
                             "MIDDLEWARE.", f"Add {MIDDLEWARE!r} to MIDDLEWARE."))
    if MIDDLEWARE in middleware and AUTH_MIDDLEWARE in middleware and (
            middleware.index(MIDDLEWARE) < middleware.index(AUTH_MIDDLEWARE)):
        found.append(Problem(Codes.MIDDLEWARE_BEFORE_AUTH, "RateLimitMiddleware comes before "
                             "AuthenticationMiddleware, so the 'user' descriptor is always missing there.",
                             "Move it after AuthenticationMiddleware."))
    return found


@checks.register("django_gcra", checks.Tags.database)
def check_overrides(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Overrides the limiter ignores (``override_rules.override_problem``): naming a policy or
    limit the plane does not define (settings, the URLconf's inline ``@ratelimit`` limits,
    DRF's scopes), or values it cannot run (written without the form's validation)."""
    if not databases or "default" not in databases:
        return []
    from .models import LimitOverride

    try:
        get_settings()
        rows = list(LimitOverride.objects.filter(enabled=True).order_by("pk"))
    except Exception:  # no table yet (before migrate), or settings in error (other checks say so)
        return []
    catalog.discover()  # a URLconf that fails to import is reported by Django's own URL checks
    policies = catalog.policies()
    found = []
    for row in rows:
        problem = override_problem(row, policies)
        if problem is None:
            continue
        if problem.field in ("policy", "limit"):
            message = (f"LimitOverride {row.pk} overrides {row.policy}.{row.limit}, which is not configured; it is "
                       "ignored.")
        else:
            message = f"LimitOverride {row.pk} ({row}) cannot run, so it is ignored: {problem.reason}"
        found.append(_message(Problem(Codes.STALE_OVERRIDE, message,
                                      "Fix the override in the admin, or disable or delete it.")))
    return found


@checks.register("django_gcra", checks.Tags.database)
def check_access_rules(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Enabled ``AccessRule`` rows the limiter cannot apply (an unknown policy or descriptor,
    an ip value that is no address or network): they are ignored."""
    if not databases or "default" not in databases:
        return []
    from .models import AccessRule
    from .policy import is_known_descriptor
    from .rules import parse_network

    try:
        custom = get_settings().descriptors
        rows = list(AccessRule.objects.filter(enabled=True).values_list("pk", "policy", "descriptor", "value"))
    except Exception:  # no table yet (before migrate), or settings in error (other checks say so)
        return []
    catalog.discover()
    known = set(catalog.policies())
    found = []
    for pk, policy, descriptor, value in rows:
        why = None
        if policy and policy not in known:
            why = f"names policy {policy!r}, which is not configured"
        elif not is_known_descriptor(descriptor, custom):
            why = f"names unknown descriptor {descriptor!r}"
        elif descriptor == "ip":
            try:
                parse_network(value)
            except ValueError:
                why = f"has ip {value!r}, which is not an IP address or CIDR network"
        if why is not None:
            found.append(_message(Problem(Codes.STALE_ACCESS_RULE, f"AccessRule {pk} {why}; it is ignored.",
                                          "Fix the rule in the admin, or disable or delete it.")))
    return found
