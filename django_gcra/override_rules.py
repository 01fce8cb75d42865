"""Whether a stored limit override can run, and if not why: the one rule applied by the
loader (``overrides``: an override that cannot run is ignored and logged), by the model
(``LimitOverride.full_clean``, so the admin form refuses it), and shown by the admin's
override list and the dashboard ("not in force" and the reason).

Every range is the settings' own (``parse_rate``; ``span_problem``, ``log_problem`` and
``MAX_CONCURRENCY`` of ``policy``, the rules behind E002, E003, E018 and E092): an override
can set nothing ``POLICIES`` could not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from . import catalog
from .policy import MAX_CONCURRENCY, MAX_QUOTA, Concurrency, Limit, Policy, log_problem, span_problem
from .rates import Rate, parse_rate
from .validation import is_int

__all__ = ["OverrideFields", "Unrunnable", "effect_problem", "match_problem", "override_problem"]



class OverrideFields(Protocol):
    """What the rule reads of an override (a ``LimitOverride``, saved or not)."""

    policy: str
    limit: str
    match: Any
    rate: str
    burst: int | None
    quota: int | None


@dataclass(frozen=True)
class Unrunnable:
    """Why an override cannot run: ``reason``, about the form field ``field``."""

    field: str
    reason: str

    def __str__(self) -> str:
        return self.reason


def match_problem(match: Any, policy: Policy) -> str | None:
    """Why ``match`` can never match a request of ``policy``, or None: a dict of the policy's
    descriptor names to string (or integer) values."""
    if not isinstance(match, Mapping):
        return f"The match must map descriptor names to values, e.g. {{\"tenant\": \"acme\"}}, not {match!r}."
    bad = sorted(str(k) for k, v in match.items() if isinstance(v, bool) or not isinstance(v, (str, int)))
    if bad:
        return f"Descriptor values must be strings: {', '.join(bad)}."
    unknown = sorted(set(map(str, match)) - set(policy.descriptors))
    if unknown:
        return (f"Policy {policy.name} does not use descriptor(s) {', '.join(unknown)}; it uses "
                f"{', '.join(sorted(policy.descriptors)) or 'none'}.")
    return None


def effect_problem(limit: Limit | Concurrency, rate: Rate | None, burst: int | None,
                   quota: int | None = None) -> Unrunnable | None:
    """Why this rate, burst and quota cannot be run on ``limit``, or None."""
    if burst is not None and not is_int(burst, 1):
        return Unrunnable("burst", f"The burst must be at least 1, not {burst!r}.")
    is_quota = isinstance(limit, Limit) and limit.quota
    if quota is not None:
        if not is_int(quota, 1, MAX_QUOTA):
            return Unrunnable("quota", f"The quota must be a whole number of units from 1 to {MAX_QUOTA:,}, not "
                                       f"{quota!r}.")
        if not is_quota:
            algorithm = getattr(limit, "algorithm", "concurrency")
            return Unrunnable("quota", f"Limit {limit.name} is a {algorithm} limit, not a calendar quota: it has no "
                                       "quota. Change its rate or burst instead.")
    if is_quota:
        if rate is not None or burst is not None:
            return Unrunnable("rate" if rate is not None else "burst",
                              f"Limit {limit.name} is a calendar quota: it has no rate or burst. Change its quota "
                              "instead.")
        return None
    if isinstance(limit, Concurrency):  # its burst is the max; it has no rate
        if rate is not None:
            return Unrunnable("rate", f"Limit {limit.name} is a concurrency limit: it has no rate. Its max is the "
                                      "burst field.")
        if burst is not None and burst > MAX_CONCURRENCY:
            return Unrunnable("burst", f"Limit {limit.name} is a concurrency limit: its max (the burst field) is "
                                       f"at most {MAX_CONCURRENCY:,}, not {burst:,}.")
        return None
    if limit.sliding:
        if burst is not None:
            return Unrunnable("burst", f"Limit {limit.name} is a {limit.algorithm} limit: it takes no burst. "
                                       "Change its rate (N per period) instead.")
        if limit.algorithm == "sliding_log" and rate is not None:
            why = log_problem(rate)
            if why is not None:
                return Unrunnable("rate", f"{why[0].upper()}{why[1:]}.")
    for configured in ([rate] if rate is not None else list(limit.rates.values())):
        why = span_problem(configured, burst if burst is not None else limit.burst_for(configured))
        if why is not None:
            return Unrunnable("burst" if burst is not None else "rate",
                              f"{why[0].upper()}{why[1:]} (the settings refuse it too: E003). Use a shorter "
                              "period or a smaller burst.")
    return None


def override_problem(row: OverrideFields, policies: Mapping[str, Policy] | None = None) -> Unrunnable | None:
    """Why the override ``row`` cannot run, or None: an unknown policy or limit, a match
    no request can have, a rate or burst the settings would refuse for that limit, or a
    quota out of range or on a limit that is no calendar quota. ``policies``: the plane's
    (default ``catalog.policies()``)."""
    policies = catalog.policies() if policies is None else policies
    policy = policies.get(row.policy)
    if policy is None:
        return Unrunnable("policy", f"Policy {row.policy!r} is not configured (in POLICIES, an inline @ratelimit "
                                    "or a DRF scope).")
    limit = next((lim for lim in policy.every_limit if lim.name == row.limit), None)
    if limit is None:
        names = ", ".join(lim.name for lim in policy.every_limit)
        return Unrunnable("limit", f"Policy {policy.name} has no limit {row.limit!r}; its limits: {names}.")
    why = match_problem(row.match, policy)
    if why is not None:
        return Unrunnable("match", why)
    try:
        rate = parse_rate(row.rate) if row.rate else None
    except ValueError as exc:
        return Unrunnable("rate", str(exc))
    return effect_problem(limit, rate, row.burst, row.quota)
