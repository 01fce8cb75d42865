"""Multi-region budgets as settings: ``REGIONS`` and a policy's ``"budget"``, parsed and
validated (no Django, no Redis). The behaviour lives in ``regions/``; see
docs/howto/multi-region.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .codes import Codes, Problem
from .validation import is_number

__all__ = ["BUDGET_MODES", "REGION_DEFAULTS", "Budget", "RegionSettings", "budget_problems", "parse_budget",
           "parse_regions"]

BUDGET_MODES = ("shared", "fixed", "full", "home")
REGION_DEFAULTS: dict[str, Any] = {
    "local": None,  # this deployment's region (required)
    "caches": None,  # region -> django-redis cache alias (required)
    "rebalance_interval": 5.0,  # seconds: the demand window, and how often gcra_rebalance moves the shares
    "refresh": 1.0,  # seconds between a process's demand flushes and share reads (its local Redis)
    "floor": 0.05,  # the least share of any region
    "smoothing": 0.3,  # weight of the previous share in each move
    "max_step": 0.25,  # the most a share may move in one rebalance
}
MAX_REGION_SECONDS = 3600.0
SHARE_SUM_TOLERANCE = 1e-6
DEFAULT_AWAY = 0.05


@dataclass(frozen=True)
class RegionSettings:
    """``DJANGO_GCRA['REGIONS']``, validated. Times in seconds, shares as fractions."""

    local: str
    caches: Mapping[str, str]  # region -> cache alias, in the configured order
    rebalance_interval: float = 5.0
    refresh: float = 1.0
    floor: float = 0.05
    smoothing: float = 0.3
    max_step: float = 0.25

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.caches)

    @property
    def equal(self) -> float:
        return 1.0 / len(self.caches)


@dataclass(frozen=True)
class Budget:
    """A policy's ``"budget"``: how much of each limit this region enforces."""

    mode: str = "shared"  # shared | fixed | full | home
    shares: Mapping[str, float] | None = field(default=None)  # fixed: region -> share; None: equal
    home: str | None = None  # home: dotted path of (descriptors) -> region name
    away: float = DEFAULT_AWAY  # home: the share enforced outside the key's home region


def parse_budget(where: str, raw: Any, problems: list[Problem]) -> Budget | None:
    """A policy's ``"budget"`` (None when absent: the default, ``shared`` with REGIONS)."""
    if raw is None:
        return None
    if raw in ("shared", "fixed", "full"):
        return Budget(str(raw))
    if isinstance(raw, Mapping) and set(raw) == {"fixed"} and isinstance(raw["fixed"], Mapping):
        shares = raw["fixed"]
        if all(isinstance(k, str) and is_number(v, 0, strict=True, maximum=1) for k, v in shares.items()) and shares:
            return Budget("fixed", {str(k): float(v) for k, v in shares.items()})
        problems.append(Problem(Codes.BAD_FIXED_SHARES, f"{where}['budget']['fixed'] is {shares!r}.",
                                "Give each region's share: a number above 0 and at most 1, summing to 1."))
        return None
    if isinstance(raw, Mapping) and "home" in raw and set(raw) <= {"home", "away"}:
        home, away = raw["home"], raw.get("away", DEFAULT_AWAY)
        if isinstance(home, str) and home and is_number(away, 0, strict=True, maximum=1):
            return Budget("home", home=home, away=float(away))
        problems.append(Problem(Codes.BAD_HOME, f"{where}['budget'] is {raw!r}.",
                                "Give {'home': 'dotted.path' (descriptors -> region), 'away': a share above 0 and "
                                "at most 1 (default 0.05)}."))
        return None
    problems.append(Problem(Codes.BAD_BUDGET, f"{where}['budget'] is {raw!r}.",
                            "Use 'shared', 'fixed', {'fixed': {region: share}}, 'full' or {'home': 'dotted.path'}."))
    return None


def parse_regions(raw: Any, caches: Mapping[str, Any], found: list[Problem]) -> RegionSettings | None:
    """``DJANGO_GCRA['REGIONS']`` (None: not set, or unusable, with a problem appended)."""
    if raw is None:
        return None
    where = "DJANGO_GCRA['REGIONS']"
    if not isinstance(raw, Mapping):
        found.append(Problem(Codes.BAD_REGIONS, f"{where} must be a dict."))
        return None
    for key in sorted(set(raw) - set(REGION_DEFAULTS), key=str):
        found.append(Problem(Codes.BAD_REGIONS, f"{where} has an unknown key {key!r}.",
                             f"Known keys: {', '.join(REGION_DEFAULTS)}."))
    aliases = raw.get("caches")
    if (not isinstance(aliases, Mapping) or not aliases
            or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in aliases.items())):
        found.append(Problem(Codes.BAD_REGIONS, f"{where}['caches'] is {aliases!r}.",
                             "Map each region's name to its django-redis cache alias."))
        return None
    ok = True
    for region, alias in aliases.items():
        backend = caches.get(alias, {}).get("BACKEND", "") if isinstance(caches.get(alias), Mapping) else None
        if backend is None or "django_redis" not in str(backend):
            found.append(Problem(Codes.REGION_UNKNOWN_ALIAS, f"{where}['caches'][{region!r}] is {alias!r}, which is "
                                 "not a django-redis cache in CACHES.", "Name a django-redis cache alias."))
            ok = False
    local = raw.get("local")
    if local not in aliases:
        found.append(Problem(Codes.REGION_LOCAL_UNKNOWN, f"{where}['local'] is {local!r}, not one of the regions "
                             f"({', '.join(aliases)}).", "Set it to this deployment's region."))
        ok = False
    values: dict[str, float] = {}
    for name in ("rebalance_interval", "refresh"):
        value = raw.get(name, REGION_DEFAULTS[name])
        if not is_number(value, 0, strict=True, maximum=MAX_REGION_SECONDS):
            found.append(Problem(Codes.BAD_REBALANCE_INTERVAL, f"{where}[{name!r}] is {value!r}; it must be a finite "
                                 f"number of seconds above 0 and at most {MAX_REGION_SECONDS:g}."))
            ok = False
        else:
            values[name] = float(value)
    if ok and values["refresh"] > values["rebalance_interval"]:
        found.append(Problem(Codes.BAD_REBALANCE_INTERVAL, f"{where}['refresh'] ({values['refresh']:g}) is longer "
                             f"than 'rebalance_interval' ({values['rebalance_interval']:g}): demand would reach the "
                             "rebalancer after its window closed.", "Keep refresh well below rebalance_interval."))
        ok = False
    tuning = {"floor": (0.0, 1.0 / len(aliases)), "smoothing": (0.0, 1.0), "max_step": (0.0, 1.0)}
    for name, (low, high) in tuning.items():
        value = raw.get(name, REGION_DEFAULTS[name])
        strict_high = name != "max_step"
        if (not is_number(value, low, maximum=high) or (strict_high and value >= high)
                or (name == "max_step" and value <= 0)):
            found.append(Problem(Codes.BAD_REGION_TUNING, f"{where}[{name!r}] is {value!r}.",
                                 f"floor: from 0 to below 1 / {len(aliases)} regions; smoothing: from 0 to below 1; "
                                 "max_step: above 0 and at most 1."))
            ok = False
        else:
            values[name] = float(value)
    if not ok:
        return None
    return RegionSettings(str(local), dict(aliases), **values)


def budget_problems(policies: Mapping[str, Any], regions: RegionSettings | None) -> list[Problem]:
    """Budgets that do not fit REGIONS: fixed shares naming unknown regions or not summing
    to 1; any budget without REGIONS (it is ignored)."""
    out = []
    for policy in policies.values():
        budget: Budget | None = policy.budget
        if budget is None:
            continue
        where = f"DJANGO_GCRA['POLICIES'][{policy.name!r}]['budget']"
        if regions is None:
            out.append(Problem(Codes.BUDGET_WITHOUT_REGIONS, f"{where} is set but DJANGO_GCRA['REGIONS'] is not: "
                               "every decision enforces the whole limit.", "Configure REGIONS, or drop the budget."))
            continue
        if budget.shares is not None:
            unknown = sorted(set(budget.shares) - set(regions.names))
            missing = sorted(set(regions.names) - set(budget.shares))
            total = math.fsum(budget.shares.values())
            if unknown or missing or abs(total - 1.0) > SHARE_SUM_TOLERANCE:
                out.append(Problem(Codes.BAD_FIXED_SHARES, f"{where} gives {dict(budget.shares)!r}: shares must "
                                   f"name every region ({', '.join(regions.names)}) and sum to 1 (they sum to "
                                   f"{total:g}).", "Fix the shares, or use 'fixed' for equal ones."))
    return out
