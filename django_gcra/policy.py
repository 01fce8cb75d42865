"""Policy and Limit value objects, parsed from the ``POLICIES`` setting.

Parsing collects every problem instead of stopping at the first, so the system checks
can report them all; ``conf.get_settings()`` refuses to run with any error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from django.core.exceptions import ImproperlyConfigured

from .algorithm import ALGORITHMS
from .budgets import Budget, parse_budget
from .codes import Codes, Problem
from .periods import NOMINAL_SECONDS, PERIODS, Calendar, zone_problem
from .rates import Rate, parse_rate
from .rules import DENY, EXEMPT, RuleSet, parse_rules
from .validation import is_int, is_number

__all__ = ["BUILTIN_DESCRIPTORS", "Concurrency", "Lease", "Limit", "PerPolicy", "Policy", "Problem", "build_policy",
           "parse_policy"]

BUILTIN_DESCRIPTORS = frozenset({"ip", "user", "method", "route"})
HEADER_PREFIX = "header:"
ON_FAILURE = ("open", "closed", "local")
MODES = ("enforce", "shadow")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
POLICY_KEYS = frozenset({"limits", "concurrency", "on_failure", "mode", "lease", "shard", "budget", "exempt", "deny"})
CONCURRENCY_KEYS = frozenset({"name", "key", "max", "ttl", "mode"})
# A slot's ttl, in seconds: at least 1 (the heartbeat extends held slots every ttl / 3 from a
# background thread, so shorter would race a busy process), at most a day.
MIN_SLOT_TTL, MAX_SLOT_TTL = 1.0, 86400.0
MAX_CONCURRENCY = 100_000  # slots of one key: one ZSET entry each
LIMIT_KEYS = frozenset({"name", "key", "rate", "burst", "fallback_rate", "mode", "algorithm", "quota", "period",
                        "tz"})
QUOTA_KEYS = ("quota", "period", "tz")
ALGORITHM_NAMES = tuple(ALGORITHMS)  # gcra (the default), sliding_log, sliding_window, quota
MAX_QUOTA = 2**40  # units per period: counts stay exact in the script's doubles, twice over (debt)
SLIDING = ("sliding_log", "sliding_window")
# The sliding log holds one ZSET entry per unit in the window: about 35 bytes each up to
# 128 entries (a listpack), about 130 above (a skiplist), so 10,000 is about 1.3 MB a key.
MAX_LOG_LIMIT = 10_000
LEASE_KEYS = frozenset({"size", "ttl", "low_water"})
# The longest a key may stay unrested (interval x burst), in microseconds: TATs are Redis
# time plus this, and must stay exact in the script's doubles (2^53) for centuries.
MAX_SPAN_US = 2**52
MAX_LEASE_TTL = 3600.0


def span_problem(rate: Rate, burst: int) -> str | None:
    """Why ``rate`` with ``burst`` cannot be run exactly, or None."""
    if rate.interval * burst > MAX_SPAN_US:
        return (f"rate {rate} with burst {burst} takes {rate.interval * burst / 1e6 / 86400 / 365:.0f} years to "
                f"refill; the most is {MAX_SPAN_US / 1e6 / 86400 / 365:.0f}")
    return None


def log_problem(rate: Rate) -> str | None:
    """Why a sliding log at ``rate`` would hold an unreasonable number of entries, or None."""
    if rate.count > MAX_LOG_LIMIT:
        return (f"a sliding log of {rate} holds up to {rate.count:,} entries per key (about "
                f"{rate.count * 130 / 1e6:.1f} MB of Redis memory per key, and as many entries written by one "
                f"decision of that cost); the most is {MAX_LOG_LIMIT:,} (about "
                f"{MAX_LOG_LIMIT * 130 / 1e6:.1f} MB)")
    return None


@dataclass(frozen=True)
class Limit:
    name: str
    key: tuple[str, ...]  # descriptor names whose values form the key
    rates: Mapping[str | None, Rate]  # tier -> rate; the None entry is the untiered rate
    burst: int | None  # None: the rate's count
    fallback_rate: Rate | None = None
    mode: str = "enforce"
    algorithm: str = "gcra"  # gcra | sliding_log | sliding_window | quota
    # A calendar quota's periods (algorithm "quota"): its rates are then Rate(units per
    # period, the period's usual length in seconds), one per tier.
    calendar: Calendar | None = None

    @property
    def sliding(self) -> bool:
        """Not GCRA: a sliding limit or a quota (no burst, never leased, never waits)."""
        return self.algorithm != "gcra"

    @property
    def quota(self) -> bool:
        return self.calendar is not None

    @property
    def tiered(self) -> bool:
        return None not in self.rates

    def rate_for(self, tier: str | None) -> Rate | None:
        """The rate for ``tier``, or None when the limit has no rate for it."""
        return self.rates.get(None) or self.rates.get(tier)

    def burst_for(self, rate: Rate) -> int:
        return self.burst if self.burst is not None else rate.count


@dataclass(frozen=True)
class Concurrency:
    """A concurrency limit: at most ``max`` decisions of one key hold a slot at once; a slot
    not released is free again ``ttl`` seconds after its holder last extended it."""

    name: str
    key: tuple[str, ...]  # () protects capacity (one key for everyone): a full limit answers 503
    max: int
    ttl: float
    mode: str = "enforce"

    @property
    def capacity(self) -> bool:
        return not self.key


@dataclass(frozen=True)
class Lease:
    size: int
    ttl: float
    low_water: int = 0  # prefetch a lease in the background at or below this many units; 0: never


@dataclass(frozen=True)
class Policy:
    name: str
    limits: tuple[Limit, ...]
    on_failure: str = "open"
    mode: str = "enforce"
    lease: Lease | None = None
    shard: str | None = None  # descriptor whose value is the hash tag; None: the policy name
    descriptors: frozenset[str] = field(default=frozenset())  # every descriptor the limits use
    cache_alias: str | None = None  # the django-redis alias deciding it; None: CACHE_ALIAS (policies built in code)
    budget: Budget | None = None  # multi-region budget (budgets.py); None: the default, shared with REGIONS
    concurrency: tuple[Concurrency, ...] = ()  # concurrency limits, decided in the same script call
    access: RuleSet | None = None  # the policy's own "exempt" / "deny" rules (rules.py); None: none

    @property
    def every_limit(self) -> tuple[Limit | Concurrency, ...]:
        """The rate limits, then the concurrency limits."""
        return (*self.limits, *self.concurrency)

    def mode_of(self, limit: Limit | Concurrency) -> str:
        """The limit's effective mode as configured: shadow if the policy or the limit is."""
        return "shadow" if self.mode == "shadow" or limit.mode == "shadow" else "enforce"



T = TypeVar("T")


class PerPolicy(Generic[T]):
    """What is built once per ``Policy`` object (and an optional sub-key): one dict lookup by
    ``id``, each entry holding its policy, so an id is never reused while it is there.
    Bounded: past ``MAX`` entries (policies built per call, in code) it starts again empty."""

    MAX = 1000

    def __init__(self) -> None:
        self._found: dict[tuple[int, Any], tuple[Policy, T]] = {}

    def get(self, policy: Policy, sub: Any = None) -> T | None:
        found = self._found.get((id(policy), sub))
        return found[1] if found is not None and found[0] is policy else None

    def put(self, policy: Policy, value: T, sub: Any = None) -> T:
        if len(self._found) >= self.MAX:
            self._found.clear()
        self._found[(id(policy), sub)] = (policy, value)
        return value

    def clear(self) -> None:
        self._found.clear()

def is_known_descriptor(name: str, custom: Mapping[str, Any]) -> bool:
    if name in BUILTIN_DESCRIPTORS or name in custom:
        return True
    return name.startswith(HEADER_PREFIX) and len(name) > len(HEADER_PREFIX)


def parse_policy(name: str, raw: Any, custom: Mapping[str, Any], problems: list[Problem],
                 where: str | None = None) -> Policy | None:
    """Parse one entry of ``POLICIES``, appending to ``problems``; None if unusable.
    ``where`` names the policy in messages (default: its place in the settings)."""
    where = f"DJANGO_GCRA['POLICIES'][{name!r}]" if where is None else where
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        problems.append(Problem(Codes.BAD_NAME, f"Policy name {name!r} is not valid.",
                                "Use 1-64 letters, digits, '_', '.' or '-'."))
        return None
    if not isinstance(raw, Mapping):
        problems.append(Problem(Codes.NOT_A_DICT, f"{where} must be a dict."))
        return None
    _unknown_keys(where, raw, POLICY_KEYS, problems)
    raw_limits = raw.get("limits")
    concurrency = _parse_concurrency(where, raw.get("concurrency"), custom, problems)
    if concurrency is None:
        return None
    if raw_limits is None and concurrency:
        raw_limits = []
    if not isinstance(raw_limits, (list, tuple)) or not (raw_limits or concurrency):
        problems.append(Problem(Codes.NO_LIMITS, f"{where} has no limits.",
                                "Give 'limits' as a non-empty list of limit dicts (or 'concurrency')."))
        return None
    limits = []
    for index, raw_limit in enumerate(raw_limits):
        limit = _parse_limit(f"{where}['limits'][{index}]", raw_limit, custom, problems)
        if limit is not None:
            limits.append(limit)
    names = [limit.name for limit in limits] + [c.name for c in concurrency]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(Problem(Codes.DUPLICATE_LIMIT, f"{where} has more than one limit named {dup!r}."))
    on_failure = _choice(where, raw, "on_failure", ON_FAILURE, "open", problems)
    mode = _choice(where, raw, "mode", MODES, "enforce", problems)
    lease = _parse_lease(where, raw.get("lease"), problems)
    problems += _lease_problems(where, lease, limits, mode)
    if lease is not None and concurrency:
        problems.append(Problem(Codes.CONCURRENCY_LEASE, f"{where} leases a policy with concurrency limits.",
                                "A lease serves decisions from local memory, so they would take no slot: "
                                "remove the lease, or move the concurrency limits to a policy of their own."))
    if concurrency and on_failure == "local" and any(c.capacity for c in concurrency):
        problems.append(Problem(Codes.CONCURRENCY_LOCAL_GLOBAL, f"{where} fails over to on_failure='local' with a "
                                "concurrency limit of key [].", "While the store is down each process admits "
                                "'max' requests of its own (a per-process semaphore), so the service admits "
                                "max x processes in all: lower 'max' or use on_failure 'closed' if that is "
                                "too many."))
    if len(limits) != len(raw_limits):
        return None
    every: list[Limit | Concurrency] = [*limits, *concurrency]
    used = frozenset(d for limit in every for d in limit.key)
    shard = _parse_shard(where, raw, every, problems)
    budget = parse_budget(where, raw.get("budget"), problems)
    access = RuleSet()
    for kind in (EXEMPT, DENY):
        parse_rules(f"{where}[{kind!r}]", raw.get(kind), kind, lambda d: is_known_descriptor(d, custom), problems,
                    access)
    return Policy(name, tuple(limits), on_failure, mode, lease, shard, used, budget=budget,
                  concurrency=tuple(concurrency), access=access or None)


def _parse_concurrency(where: str, raw: Any, custom: Mapping[str, Any],
                       problems: list[Problem]) -> list[Concurrency] | None:
    """The policy's concurrency limits ([] when none); None when any is unusable (E090-E093)."""
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple)) or not raw:
        problems.append(Problem(Codes.BAD_CONCURRENCY, f"{where}['concurrency'] must be a non-empty list of dicts.",
                                'e.g. [{"name": "running", "key": ["tenant"], "max": 2, "ttl": 60}]'))
        return None
    found: list[Concurrency] = []
    for index, item in enumerate(raw):
        label = f"{where}['concurrency'][{index}]"
        if not isinstance(item, Mapping):
            problems.append(Problem(Codes.BAD_CONCURRENCY, f"{label} must be a dict."))
            continue
        _unknown_keys(label, item, CONCURRENCY_KEYS, problems)
        name = item.get("name")
        ok = _name_ok(label, name, problems)
        key = _key_of(label, item.get("key"), custom, Codes.BAD_CONCURRENCY_KEY, problems, empty_ok=True,
                      hint="[] protects capacity (one limit for everyone, 503 when full); "
                           "['tenant'] limits each tenant (429 when full).")
        if key is None:
            ok = False
        elif len(set(key)) != len(key):
            problems.append(Problem(Codes.BAD_CONCURRENCY_KEY, f"{label} names a descriptor twice in 'key'."))
            ok = False
        most = item.get("max")
        if not is_int(most, 1, MAX_CONCURRENCY):
            problems.append(Problem(Codes.BAD_CONCURRENCY_MAX, f"{label} has max {most!r}.",
                                    f"Give the requests one key may have in flight: an int from 1 to "
                                    f"{MAX_CONCURRENCY:,}."))
            ok = False
        ttl = item.get("ttl", 60)
        if not is_number(ttl, MIN_SLOT_TTL, maximum=MAX_SLOT_TTL):
            problems.append(Problem(Codes.BAD_CONCURRENCY_TTL, f"{label} has ttl {ttl!r}.",
                                    f"Give the seconds after which a slot whose holder died is free again: "
                                    f"a number from {MIN_SLOT_TTL:g} to {MAX_SLOT_TTL:g} (held slots are "
                                    "extended while their request runs, so a short ttl is safe)."))
            ok = False
        mode = _choice(label, item, "mode", MODES, "enforce", problems)
        if ok:
            found.append(Concurrency(str(name), key, int(most), float(ttl), mode))  # type: ignore[arg-type]
    return found if len(found) == len(raw) else None


def build_policy(name: str, raw: Any, custom: Mapping[str, Any], where: str) -> Policy:
    """A policy written in code (``@ratelimit``, the DRF throttles): ``ImproperlyConfigured``
    with every error, named after ``where``."""
    problems: list[Problem] = []
    policy = parse_policy(name, raw, custom, problems, where)
    errors = [p.msg for p in problems if p.is_error]
    if errors or policy is None:
        raise ImproperlyConfigured(" ".join(errors) or f"{where} is not valid.")
    return policy


def _name_ok(where: str, name: Any, problems: list[Problem]) -> bool:
    if isinstance(name, str) and _NAME.fullmatch(name):
        return True
    problems.append(Problem(Codes.BAD_NAME, f"{where} has an invalid name {name!r}.",
                            "Use 1-64 letters, digits, '_', '.' or '-'."))
    return False


def _key_of(where: str, key: Any, custom: Mapping[str, Any], code: str, problems: list[Problem], *,
            empty_ok: bool, hint: str | None = None) -> tuple[str, ...] | None:
    """A limit's ``key`` as a tuple of known descriptor names (a lone string is one); None,
    with the problems, when it is not."""
    if isinstance(key, str):
        key = [key]
    if not isinstance(key, (list, tuple)) or not (key or empty_ok) or not all(isinstance(k, str) for k in key):
        a_list = "a list" if empty_ok else "a non-empty list"
        problems.append(Problem(code, f"{where} needs 'key': {a_list} of descriptor names.", hint))
        return None
    unknown = [d for d in key if not is_known_descriptor(d, custom)]
    for descriptor in unknown:
        problems.append(Problem(code, f"{where} uses unknown descriptor {descriptor!r}.", "Use ip, user, method, "
                                "route, header:<Name>, or a name from DJANGO_GCRA['DESCRIPTORS']."))
    return None if unknown else tuple(key)


def _parse_limit(where: str, raw: Any, custom: Mapping[str, Any], problems: list[Problem]) -> Limit | None:
    if not isinstance(raw, Mapping):
        problems.append(Problem(Codes.NOT_A_DICT, f"{where} must be a dict."))
        return None
    _unknown_keys(where, raw, LIMIT_KEYS, problems)
    name = raw.get("name")
    ok = _name_ok(where, name, problems)
    key = _key_of(where, raw.get("key"), custom, Codes.BAD_KEY, problems, empty_ok=False)
    if key is None:
        ok = False
    if raw.get("algorithm") == "quota":
        return _parse_quota(where, raw, str(name), key, ok, problems)
    for extra in QUOTA_KEYS:
        if extra in raw:
            problems.append(Problem(Codes.QUOTA_KEYS_ON_RATE, f"{where} gives {extra!r} to a "
                                    f"{raw.get('algorithm', 'gcra')} limit.", "'quota', 'period' and 'tz' belong to "
                                    "a calendar quota: add \"algorithm\": \"quota\" (and remove 'rate'), or remove "
                                    f"{extra!r}."))
            ok = False
    rates = _parse_rates(where, raw.get("rate"), problems)
    burst = raw.get("burst")
    if burst is not None and not is_int(burst, 1):
        problems.append(Problem(Codes.BAD_BURST, f"{where} has burst {burst!r}; it must be a positive integer."))
        ok = False
    elif rates is not None:
        for rate in rates.values():
            why = span_problem(rate, rate.count if burst is None else burst)
            if why is not None:
                problems.append(Problem(Codes.BAD_BURST, f"{where}: {why}.",
                                        "Use a shorter period or a smaller burst."))
                ok = False
                break
    fallback = None
    if raw.get("fallback_rate") is not None:
        try:
            fallback = parse_rate(raw["fallback_rate"])
        except ValueError as exc:
            problems.append(Problem(Codes.BAD_FALLBACK_RATE, f"{where}['fallback_rate']: {exc}."))
            ok = False
    mode = _choice(where, raw, "mode", MODES, "enforce", problems)
    algorithm = _choice(where, raw, "algorithm", ALGORITHM_NAMES, "gcra", problems)
    if algorithm in SLIDING:
        ok = _sliding_problems(where, algorithm, burst, rates, fallback, problems) and ok
    if not ok or rates is None:
        return None
    return Limit(str(name), key, rates, burst, fallback, mode, algorithm)  # type: ignore[arg-type]


def default_tz() -> str:
    """Django's ``TIME_ZONE`` (UTC when unset): a quota's calendar unless it names ``tz``."""
    from django.conf import settings

    return getattr(settings, "TIME_ZONE", None) or "UTC"


def _parse_quota(where: str, raw: Mapping[str, Any], name: str, key: tuple[str, ...] | None, ok: bool,
                 problems: list[Problem]) -> Limit | None:
    """A calendar quota (E130-E133): quota per period of the calendar of tz."""
    for extra in ("rate", "burst", "fallback_rate"):
        if raw.get(extra) is not None:
            problems.append(Problem(Codes.QUOTA_WITH_RATE, f"{where} is a quota limit with {extra!r}.",
                                    "A calendar quota takes 'quota', 'period' and 'tz' only: move the rate to a "
                                    "limit of its own beside it in the same policy."))
            ok = False
    period = raw.get("period")
    if period not in PERIODS:
        problems.append(Problem(Codes.QUOTA_BAD_PERIOD, f"{where} has period {period!r}.",
                                f"Use one of {', '.join(PERIODS)} (a week starts on Monday)."))
        ok = False
    tz = raw.get("tz")
    tz = default_tz() if tz is None else tz
    why = zone_problem(tz)
    if why is not None:
        problems.append(Problem(Codes.QUOTA_BAD_TZ, f"{where}: {why}.",
                                "Give an IANA zone name such as 'Europe/Paris' or 'UTC' (the default is Django's "
                                "TIME_ZONE); install the tzdata package where the system has no zone database."))
        ok = False
    raw_quota = raw.get("quota")
    items = raw_quota.items() if isinstance(raw_quota, Mapping) and raw_quota else [(None, raw_quota)]
    quotas: dict[str | None, int] = {}
    for tier, value in items:
        if (tier is not None and (not isinstance(tier, str) or not tier)) or not is_int(value, 1, MAX_QUOTA):
            label = f"{where}['quota']" + (f"[{tier!r}]" if tier is not None else "")
            problems.append(Problem(Codes.QUOTA_BAD_VALUE, f"{label} is {value!r}.",
                                    f"Give the units per period: an int from 1 to {MAX_QUOTA:,}, or a dict of "
                                    "tier name to such an int."))
            ok = False
        else:
            quotas[tier] = int(value)  # type: ignore[arg-type]  # is_int above
    mode = _choice(where, raw, "mode", MODES, "enforce", problems)
    if not ok or key is None:
        return None
    seconds = NOMINAL_SECONDS[str(period)]
    rates = {tier: Rate(units, seconds) for tier, units in quotas.items()}
    return Limit(name, key, rates, None, None, mode, "quota", Calendar(str(period), str(tz)))


def _sliding_problems(where: str, algorithm: str, burst: Any, rates: dict[str | None, Rate] | None,
                      fallback: Rate | None, problems: list[Problem]) -> bool:
    """E017/E018 for a sliding limit; True when there are none."""
    ok = True
    if burst is not None:
        problems.append(Problem(Codes.SLIDING_BURST,
                                f"{where} is a {algorithm} limit with a burst; a sliding limit takes no burst.",
                                "A sliding limit admits N units in any rolling period of its rate (N/period) "
                                "and has no burst: remove 'burst', or use algorithm 'gcra'."))
        ok = False
    if algorithm == "sliding_log":
        for rate in [*(rates or {}).values(), *([fallback] if fallback else [])]:
            why = log_problem(rate)
            if why is not None:
                problems.append(Problem(Codes.SLIDING_LOG_TOO_LARGE, f"{where}: {why}.",
                                        "Use algorithm 'sliding_window' (two counters per key, about 80 "
                                        "bytes), or 'gcra', for limits this large."))
                ok = False
                break
    return ok


def _parse_rates(where: str, raw: Any, problems: list[Problem]) -> dict[str | None, Rate] | None:
    items = raw.items() if isinstance(raw, Mapping) else [(None, raw)]
    if isinstance(raw, Mapping) and not raw:
        items = [(None, raw)]
    rates: dict[str | None, Rate] = {}
    for tier, value in items:
        if tier is not None and (not isinstance(tier, str) or not tier):
            problems.append(Problem(Codes.BAD_RATE, f"{where}['rate'] has tier {tier!r}; tier names are non-empty "
                                    "strings (the 'tier' descriptor's values are strings).",
                                    f"Write {str(tier)!r} instead."))
            continue
        try:
            rates[tier] = parse_rate(value)
        except ValueError as exc:
            label = f"{where}['rate']" + (f"[{tier!r}]" if tier is not None else "")
            problems.append(Problem(Codes.BAD_RATE, f"{label}: {exc}."))
    return rates if len(rates) == len(items) else None


def _parse_lease(where: str, raw: Any, problems: list[Problem]) -> Lease | None:
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        _unknown_keys(f"{where}['lease']", raw, LEASE_KEYS, problems)
    size = raw.get("size") if isinstance(raw, Mapping) else None
    ttl = raw.get("ttl", 1.0) if isinstance(raw, Mapping) else None
    if not is_int(size, 2) or not is_number(ttl, 0, strict=True, maximum=MAX_LEASE_TTL):
        problems.append(Problem(Codes.BAD_LEASE, f"{where}['lease'] must be {{'size': int >= 2, 'ttl': seconds > 0 "
                                f"and at most {MAX_LEASE_TTL:g}}}."))
        return None
    low_water = raw.get("low_water", 0)
    if not is_int(low_water, 0, size - 1):  # type: ignore[operator]  # size is an int here
        problems.append(Problem(Codes.BAD_LOW_WATER, f"{where}['lease']['low_water'] is {low_water!r}.",
                                "Give the units left at which to prefetch the next lease: an int from 0 "
                                "(never prefetch) to size - 1."))
        return None
    return Lease(size, float(ttl), low_water)  # type: ignore[arg-type]  # validated above


def _lease_problems(where: str, lease: Lease | None, limits: list[Limit], mode: str = "enforce") -> list[Problem]:
    """E050/E051/W050/W051: what makes a lease wrong or wasteful for these limits."""
    if lease is None:
        return []
    if len(limits) > 1:
        return [Problem(Codes.LEASE_COMPOSITE, f"{where} leases a composite policy.",
                        "A lease takes units of every limit at once: it would hold a large share of the "
                        "small limits, and splitting the checks brings back the quota leak. Lease only "
                        "single-limit policies (such as machine API keys).")]
    problems = []
    for limit in limits:
        if limit.quota:
            return [Problem(Codes.QUOTA_LEASE, f"{where} leases the quota limit {limit.name!r}.",
                            "A lease spends its units in memory, so a period's boundary and a settled cost "
                            "would not reach the store: remove the lease (a quota is counted in the store).")]
        if limit.sliding:
            problems.append(Problem(Codes.LEASE_SLIDING, f"{where} leases the {limit.algorithm} limit "
                                    f"{limit.name!r}.", "A lease records its units when it is taken and spends them "
                                    "up to 'ttl' later, so a rolling window would no longer see when requests "
                                    "were admitted and could pass up to N extra in a period. Remove the lease, or "
                                    "use algorithm 'gcra'."))
            return problems
    if mode == "shadow" or any(limit.mode == "shadow" for limit in limits):
        problems.append(Problem(Codes.LEASE_SHADOW, f"{where} leases a limit in shadow mode; shadow decisions are "
                                "never leased (each one calls the store).", "Remove the lease, or enforce the limit."))
    for limit in limits:
        for tier, rate in limit.rates.items():
            label = f"{where} limit {limit.name!r}" + (f" tier {tier!r}" if tier is not None else "")
            burst = limit.burst_for(rate)
            if lease.size >= burst:
                problems.append(Problem(Codes.LEASE_TOO_BIG, f"{label}: lease size {lease.size} is not below the "
                                        f"burst {burst}.", "One lease would take a whole burst: pick a size well "
                                        "below it (see docs/howto/leases.md)."))
            elif rate.count * lease.ttl < lease.size * rate.period:
                problems.append(Problem(Codes.LEASE_LOW_RATE, f"{label}: rate {rate} earns fewer than {lease.size} "
                                        f"units in the lease ttl of {lease.ttl:g}s, so leases would mostly expire "
                                        "unused (stranded).", "Do not lease low limits; or lower the size."))
    return problems


def _parse_shard(where: str, raw: Mapping[str, Any], limits: list[Limit | Concurrency],
                 problems: list[Problem]) -> str | None:
    common = [d for d in limits[0].key if all(d in limit.key for limit in limits)]
    shard = raw.get("shard")
    if shard is None:
        if not common and any(limit.key for limit in limits):  # (key [] only: one key per limit anyway)
            problems.append(Problem(
                Codes.ONE_SLOT, f"{where}: no descriptor is common to every limit, so all its keys share one "
                "Redis Cluster slot (hash tag: the policy name).",
                "Add a common descriptor (such as 'tenant') to every limit's key, or set 'shard'."))
        return common[0] if common else None
    if shard not in common:
        problems.append(Problem(Codes.BAD_SHARD, f"{where}['shard'] is {shard!r}, which is not in every limit's key.",
                                "The shard descriptor must be part of every limit's key so a key never moves slot."))
    return str(shard)


def _choice(where: str, raw: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str,
            problems: list[Problem]) -> str:
    value = raw.get(name, default)
    if value not in allowed:
        problems.append(Problem(Codes.BAD_CHOICE, f"{where}[{name!r}] is {value!r}; use one of {', '.join(allowed)}."))
        return default
    return str(value)


def _unknown_keys(where: str, raw: Mapping[str, Any], known: frozenset[str], problems: list[Problem]) -> None:
    # A misspelt key ("on_falure") would otherwise fall back to a default silently.
    for key in sorted(set(raw) - known, key=str):
        problems.append(Problem(Codes.UNKNOWN_KEY, f"{where} has an unknown key {key!r}.",
                                f"Known keys: {', '.join(sorted(known))}."))
