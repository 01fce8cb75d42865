"""System checks of the policy plane (IDs E030-E039, W030-W039; docs/reference/checks.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core import checks

from .audit import AUDIT_DEFAULTS
from .conf import get_config, setting


def _number(value: Any, minimum: float, strict: bool = True) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value > minimum if strict else value >= minimum


@checks.register("django_gcra")
def check_plane_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    audit = setting("AUDIT")
    if not isinstance(audit, Mapping):
        messages.append(checks.Error("DJANGO_GCRA['AUDIT'] must be a dict.", id="django_gcra.E030"))
        audit = {}
    for key in sorted(set(audit) - set(AUDIT_DEFAULTS), key=str):
        messages.append(checks.Error(f"DJANGO_GCRA['AUDIT'] has an unknown key {key!r}.",
                                     hint=f"Use {', '.join(AUDIT_DEFAULTS)}.", id="django_gcra.E030"))
    valid = {
        "ENABLED": (lambda v: isinstance(v, bool), "True or False"),
        "FLUSH_INTERVAL": (lambda v: _number(v, 0), "a number of seconds > 0"),
        "MAX_BUFFER": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1"),
        "RETENTION_DAYS": (lambda v: _number(v, 0, strict=False), "a number of days >= 0"),
    }
    for key, (ok, expected) in valid.items():
        if key in audit and not ok(audit[key]):
            messages.append(checks.Error(f"DJANGO_GCRA['AUDIT'][{key!r}] is {audit[key]!r}; it must be {expected}.",
                                         id="django_gcra.E030"))
    refresh, ttl = setting("OVERRIDE_REFRESH"), setting("OVERRIDE_TTL")
    for name, value in (("OVERRIDE_REFRESH", refresh), ("OVERRIDE_TTL", ttl)):
        if not _number(value, 0):
            messages.append(checks.Error(f"DJANGO_GCRA[{name!r}] is {value!r}; it must be a number of seconds > 0.",
                                         id="django_gcra.E031"))
    if _number(refresh, 0) and _number(ttl, 0) and ttl < refresh:
        messages.append(checks.Warning(
            f"DJANGO_GCRA['OVERRIDE_TTL'] ({ttl}) is shorter than OVERRIDE_REFRESH ({refresh}): every check of the "
            "version stamp reloads the overrides from the database.",
            hint="Keep OVERRIDE_TTL well above OVERRIDE_REFRESH (defaults: 30 and 1).", id="django_gcra.W031"))
    return messages


@checks.register("django_gcra", checks.Tags.database)
def check_stale_overrides(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Overrides naming a policy or limit that settings no longer define (they are ignored)."""
    if not databases or "default" not in databases:
        return []
    from .models import LimitOverride

    try:
        config = get_config()
        rows = list(LimitOverride.objects.filter(enabled=True).values_list("pk", "policy", "limit"))
    except Exception:  # no table yet (before migrate), or settings in error (other checks say so)
        return []
    known = {(p.name, lim.name) for p in config.policies.values() for lim in p.limits}
    return [checks.Warning(f"LimitOverride {pk} overrides {policy}.{limit}, which is not configured; it is ignored.",
                           hint="Fix the override in the admin, or disable or delete it.", id="django_gcra.W030")
            for pk, policy, limit in rows if (policy, limit) not in known]
