"""The ``DJANGO_GCRA`` setting, read live.

``setting(name)`` returns one value with its default; ``get_config()`` returns the
parsed policies, cached until ``DJANGO_GCRA`` changes (``override_settings`` works).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .policy import Policy, Problem, parse_policy

__all__ = ["DEFAULTS", "Config", "setting", "get_config", "get_problems"]

DEFAULTS: dict[str, Any] = {
    "CACHE_ALIAS": "default",
    "KEY_PREFIX": "rl",
    "DESCRIPTORS": {},
    "POLICIES": {},
    "ROUTES": [],
    "TRUSTED_PROXIES": 0,
    "DEFAULT_TIER": None,
    # Policy plane (overrides, audit): docs/policy-plane.md
    "OVERRIDE_REFRESH": 1.0,  # seconds between checks of the override version stamp in Redis
    "OVERRIDE_TTL": 30.0,  # seconds after which overrides are reloaded even if the stamp is unreadable
    "AUDIT": {},  # merged over audit.AUDIT_DEFAULTS
    # surfaces (issue 3)
    "HEADERS": "draft-11",  # draft-11 | draft-03 | x-ratelimit | none
    "DENIED_VIEW": None,  # dotted path: (request, decision) -> HttpResponse
    "IPV6_PREFIX": 64,  # IPv6 clients are grouped by this network prefix
    # Resilience (docs/operations.md): the limiter's own Redis timeouts (ms), the circuit
    # breaker per endpoint, and the per-process local fallback.
    "TIMEOUT": 10,
    "CONNECT_TIMEOUT": None,  # None: same as TIMEOUT
    "BREAKER": {"failures": 5, "cooldown": 1.0},
    "FALLBACK_PROCESSES": 1,
    "FALLBACK_LOG_INTERVAL": 10.0,
    "LEASE_MAX_KEYS": 10_000,  # leased keys kept per policy and process (leases.py)
}


def _user_settings() -> Mapping[str, Any]:
    value = getattr(settings, "DJANGO_GCRA", {})
    return value if isinstance(value, Mapping) else {}


def setting(name: str) -> Any:
    """One ``DJANGO_GCRA`` value, or its default."""
    return _user_settings().get(name, DEFAULTS[name])


@dataclass(frozen=True)
class Config:
    prefix: str
    cache_alias: str
    policies: Mapping[str, Policy]


@functools.cache
def _load() -> tuple[Config, tuple[Problem, ...]]:
    problems: list[Problem] = []
    raw = getattr(settings, "DJANGO_GCRA", {})
    if not isinstance(raw, Mapping):
        problems.append(Problem("django_gcra.E001", "DJANGO_GCRA must be a dict."))
        raw = {}
    for unknown in sorted(set(raw) - set(DEFAULTS), key=str):
        problems.append(Problem("django_gcra.W001", f"DJANGO_GCRA has an unknown setting {unknown!r}.",
                                "Check the spelling against the settings reference."))
    prefix = raw.get("KEY_PREFIX", DEFAULTS["KEY_PREFIX"])
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}"):
        problems.append(Problem("django_gcra.E010", f"DJANGO_GCRA['KEY_PREFIX'] {prefix!r} is not valid.",
                                "Use a non-empty string without braces."))
    custom = raw.get("DESCRIPTORS", {})
    if not isinstance(custom, Mapping):
        problems.append(Problem("django_gcra.E001", "DJANGO_GCRA['DESCRIPTORS'] must be a dict."))
        custom = {}
    raw_policies = raw.get("POLICIES", {})
    if not isinstance(raw_policies, Mapping):
        problems.append(Problem("django_gcra.E001", "DJANGO_GCRA['POLICIES'] must be a dict."))
        raw_policies = {}
    policies = {}
    for name, raw_policy in raw_policies.items():
        policy = parse_policy(name, raw_policy, custom, problems)
        if policy is not None:
            policies[name] = policy
    default_tier = raw.get("DEFAULT_TIER")
    for policy in policies.values():
        for limit in policy.limits:
            if limit.tiered and default_tier is not None and default_tier not in limit.rates:
                problems.append(Problem(
                    "django_gcra.E015", f"DEFAULT_TIER {default_tier!r} has no rate in policy {policy.name!r}, "
                    f"limit {limit.name!r} (tiers: {', '.join(map(str, limit.rates))}).",
                    "Give every tiered limit a rate for the default tier."))
    config = Config(str(prefix), raw.get("CACHE_ALIAS", DEFAULTS["CACHE_ALIAS"]), policies)
    return config, tuple(problems)


def get_problems() -> tuple[Problem, ...]:
    return _load()[1]


def get_config() -> Config:
    """The parsed configuration; raises ``ImproperlyConfigured`` if any setting is in error."""
    config, problems = _load()
    if problems and _first_error(problems) is not None:
        error = _first_error(problems)
        raise ImproperlyConfigured(f"{error.msg} ({error.id}; run 'manage.py check' for all problems)")
    return config


def _first_error(problems: tuple[Problem, ...]) -> Problem | None:
    return next((p for p in problems if p.is_error), None)


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DJANGO_GCRA", "CACHES"):
        _load.cache_clear()
