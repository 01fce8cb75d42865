"""Planning a decision: policy -> the limits in force (tier, overrides, mode) -> keys.

``Planner.plan()`` validates the caller's input and returns what one decision will ask
of which backend. Plans of policies without overrides are memoized (``PlanMemo``), so a
hot key's plan is built once. The engine (``engine.py``) owns one ``Planner``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from .algorithm import ALGORITHMS, CONCURRENCY, GCRA, QUOTA, SLIDING_LOG, SLIDING_WINDOW
from .backends import Backend, LimitSpec
from .conf import Settings, get_settings
from .keys import build_key, escape
from .overrides import Index, OverrideCache, apply_override
from .overrides import find as find_override
from .policy import Concurrency, Limit, PerPolicy, Policy
from .rates import Rate
from .regions.shares import ShareState, scale

__all__ = ["Plan", "PlanMemo", "PlannedLimit", "PlannedSlot", "Planner", "bad_cost", "bad_descriptor", "get_policy",
           "missing_descriptor", "stored_keys"]


def get_policy(policy: str | Policy) -> Policy:
    """The configured policy of that name (a ``Policy`` is returned as it is); ``KeyError``
    names the configured ones."""
    if isinstance(policy, Policy):
        return policy
    policies = get_settings().policies
    try:
        return policies[policy]
    except (KeyError, TypeError):
        known = ", ".join(sorted(policies)) or "none"
        raise KeyError(f"unknown rate-limit policy {policy!r} (configured: {known})") from None


class PlannedLimit:
    """One limit as it applies to one request: its rate, burst and mode in force (a class
    with slots, as ``Plan``: read on every decision of a memoized plan)."""

    __slots__ = ("burst", "limit", "mode", "rate")

    def __init__(self, limit: Limit, rate: Rate, burst: int, mode: str) -> None:
        self.limit, self.rate, self.burst, self.mode = limit, rate, burst, mode  # mode: enforce | shadow

    def __repr__(self) -> str:
        return f"PlannedLimit({self.limit.name!r}, {self.rate}, burst={self.burst}, mode={self.mode!r})"


class PlannedSlot:
    """One concurrency limit as it applies to one request: its max and mode in force."""

    __slots__ = ("limit", "max", "mode")

    def __init__(self, limit: Concurrency, max: int, mode: str) -> None:
        self.limit, self.max, self.mode = limit, max, mode  # mode: enforce | shadow

    def __repr__(self) -> str:
        return f"PlannedSlot({self.limit.name!r}, max={self.max}, mode={self.mode!r})"


class Plan:
    """What one decision will ask of which backend: the rate limits' specs first, then the
    concurrency limits' (``slots``). Plain data, never written once built. A class with
    slots, not a named tuple: a memoized plan is read a dozen times per decision, and
    reading a slot costs a third of reading a named tuple's field."""

    __slots__ = ("backend", "cost", "counted", "descriptors", "limits", "policy", "slots", "specs")

    def __init__(self, policy: Policy, cost: int, limits: tuple[PlannedLimit, ...], specs: tuple[LimitSpec, ...],
                 descriptors: Mapping[str, str], counted: tuple[int, ...] = (),
                 slots: tuple[PlannedSlot, ...] = (), *, backend: Backend) -> None:
        self.policy, self.cost, self.limits, self.specs = policy, cost, limits, specs
        self.descriptors = descriptors
        self.counted = counted  # the limits a client is told about: the enforced ones, else all
        self.slots = slots  # the concurrency limits, after the rate limits in specs
        self.backend = backend  # the backend that decides it (its policy's: Planner.backend_for)

    def __repr__(self) -> str:
        return f"Plan(policy={self.policy.name!r}, cost={self.cost}, specs={self.specs!r})"


class PlanMemo:
    """Plans of policies without overrides, by (policy name, cost, tier, descriptor values).
    Bounded: once full it admits nothing new, since a stream of one-off keys churning it
    costs more (in garbage collection) than resolving them; a full memo is emptied at
    most every ``refill_after`` seconds to let new hot keys in. A hit must be of the same
    Policy object, so a reloaded configuration never meets a stale plan."""

    def __init__(self, size: int = 16384, refill_after: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.size, self.refill_after, self.clock = size, refill_after, clock
        self.plans: dict[tuple[Any, ...], Plan] = {}
        self.next_refill = clock() + refill_after

    def put(self, key: tuple[Any, ...], p: Plan) -> Plan:
        """Memoize ``p`` under ``key``; returns the plan memoized there (another thread's for
        the same policy, if it came first), or ``p`` itself when the memo is full."""
        if len(self.plans) >= self.size:
            now = self.clock()
            if now < self.next_refill:
                return p
            self.clear()
            self.next_refill = now + self.refill_after
        while (kept := self.plans.setdefault(key, p)) is not p and kept.policy is not p.policy:
            self.plans.pop(key, None)  # another Policy object's plan (a policy built per call)
        return kept

    def clear(self) -> None:
        self.plans = {}

    def snapshot(self) -> list[Plan]:
        return list(self.plans.values())


# A sliding limit's key names its algorithm ("~" is never in a limit name), so a limit whose
# algorithm is changed never meets the other algorithm's state under its name.
_new = tuple.__new__
KEY_SUFFIX = {SLIDING_LOG: "~log", SLIDING_WINDOW: "~win", CONCURRENCY: "~conc", QUOTA: "~quota"}

def stored_keys(pol: Policy, values: Mapping[str, str], limits: Sequence[Limit | Concurrency]) -> dict[str, str]:
    """Limit name -> its key for these descriptor values, built as a plan builds it (the
    name, a suffix for any algorithm but GCRA, the hash tag of the shard), for each of
    ``limits`` whose descriptors are all in ``values`` (``django_gcra.reset``)."""
    escaped = {name: escape(value) for name, value in values.items()}
    prefix = get_settings().prefix
    shard = escaped[pol.shard] if pol.shard in escaped else pol.name
    found = {}
    for limit in limits:
        if not all(d in escaped for d in limit.key):
            continue
        code = CONCURRENCY if isinstance(limit, Concurrency) else ALGORITHMS.get(limit.algorithm, GCRA)
        found[limit.name] = build_key(prefix, shard, pol.name, limit.name + KEY_SUFFIX.get(code, ""),
                                      [escaped[d] for d in limit.key])
    return found


def bad_cost(cost: Any) -> Exception:
    """The error of a cost that is not an int >= 0 (``plan`` and ``access`` raise it)."""
    if type(cost) is not int:
        return TypeError(f"cost must be an int, not {type(cost).__name__}")
    return ValueError(f"cost must be >= 0, not {cost}")


def missing_descriptor(pol: Policy, name: str) -> KeyError:
    return KeyError(f"policy {pol.name!r} needs descriptor {name!r}; pass None to skip the limits that use it")


def bad_descriptor(name: str, value: Any) -> TypeError:
    return TypeError(f"descriptor {name!r} must be a str, an int or None, not {type(value).__name__}")


def _values(pol: Policy, memo_key: list[Any]) -> dict[str, str]:
    """The descriptor values of a plan's memo key (its values follow name, cost and tier), Nones left out."""
    return {name: value for name, value in zip(pol.descriptors, memo_key[3:]) if value is not None}


# What a policy's rate limits ask of the store at one tier, without overrides and without
# REGIONS (every limit whole): per limit, the key's limit part and its PlannedLimit, and
# the LimitSpec's numbers after the key; then the counted limits when every limit applies.
# Built once per (policy, tier); a plan is then its keys.
Rows = tuple[tuple[Limit, str, PlannedLimit, tuple[Any, ...]], ...]
Template = tuple[Rows, tuple[int, ...]]


def _counted(planned: Sequence[PlannedLimit | PlannedSlot]) -> tuple[int, ...]:
    """The limits a client is told about: the enforced ones, else all."""
    return tuple([i for i, pl in enumerate(planned) if pl.mode == "enforce"]) or tuple(range(len(planned)))


class Planner:
    """Plans the decisions of one engine, from its ``settings``, its ``overrides`` and its
    regional ``shares``; a plan's backend is ``backend_for(policy)``. Plans of policies
    without overrides are memoized (``memo``), and each policy's rows per tier (``templates``)."""

    def __init__(self, settings: Settings, overrides: OverrideCache, shares: ShareState,
                 backend_for: Callable[[Policy], Backend]) -> None:
        self.settings, self.overrides, self.shares, self.backend_for = settings, overrides, shares, backend_for
        self.memo = PlanMemo()
        self.templates: PerPolicy[Template] = PerPolicy()

    def plan(self, policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1) -> Plan:
        """Resolve the policy's limits for these descriptors; raise on bad input."""
        settings = self.settings
        pol = settings.policies.get(policy) if type(policy) is str else None
        if pol is None:
            pol = get_policy(policy)  # a Policy as it is; else the KeyError that names the configured policies
        if type(cost) is not int or cost < 0:  # bool, a subclass of int, is refused too
            raise bad_cost(cost)
        tier = descriptors.get("tier")
        tier = None if tier is None else str(tier)
        memo_key: list[Any] = [pol.name, cost, tier]
        for name in pol.descriptors:
            try:
                value = descriptors[name]
            except KeyError:
                raise missing_descriptor(pol, name) from None
            if value is not None and type(value) is not str:
                if type(value) is not int:
                    raise bad_descriptor(name, value)
                value = str(value)
            memo_key.append(value)
        if settings.regions is not None:
            shares = self.shares.tick()  # the share table's version
            if shares is not None:
                memo_key.append(shares)
        cache = self.overrides
        index = cache.index if time.monotonic() < cache.next_check else cache.get()  # (get()'s first test)
        if pol.name in index:  # overrides match on values and expire: resolve every time
            return self._resolve(pol, cost, _values(pol, memo_key), tier, index)
        key = tuple(memo_key)
        found = self.memo.plans.get(key)
        if found is None or found.policy is not pol:  # (a hit must be of the same Policy object)
            if pol.concurrency or settings.regions is not None:
                found = self._resolve(pol, cost, _values(pol, memo_key), tier, index)
            else:  # (_resolve's own first test, without overrides: known here)
                found = self._resolve_plain(pol, cost, _values(pol, memo_key), tier)
            found = self.memo.put(key, found)
        return found

    def _template(self, pol: Policy, tier: str | None) -> Template:
        found = self.templates.get(pol, tier)
        if found is not None:
            return found
        rows = []
        for limit in pol.limits:
            rate = self._rate(limit, tier)
            burst = limit.burst_for(rate)
            mode = pol.mode_of(limit)
            if limit.sliding:  # (a quota too: its rate's count is its units per period)
                code = ALGORITHMS[limit.algorithm]
                name, tail = limit.name + KEY_SUFFIX[code], (rate.interval, rate.count, mode == "enforce", code,
                                                             rate.period * 1_000_000, limit.calendar)
            else:
                name, tail = limit.name, (rate.interval, burst, mode == "enforce", GCRA, 0, None)
            rows.append((limit, name, PlannedLimit(limit, rate, burst, mode), tail))
        return self.templates.put(pol, (tuple(rows), _counted([row[2] for row in rows])), tier)


    def _resolve(self, pol: Policy, cost: int, values: dict[str, str], tier: str | None, index: Index) -> Plan:
        if not pol.concurrency and pol.name not in index and self.settings.regions is None:
            return self._resolve_plain(pol, cost, values, tier)
        escaped = {name: escape(value) for name, value in values.items()}
        prefix = self.settings.prefix
        shard = escaped[pol.shard] if pol.shard in escaped else pol.name
        overridden = pol.name in index
        planned, specs = [], []
        for limit in pol.limits:
            try:
                parts = [escaped[d] for d in limit.key]
            except KeyError:
                continue  # a descriptor missing for this request skips the limit (documented)
            rate = self._rate(limit, tier)
            burst = limit.burst_for(rate)
            mode = pol.mode_of(limit)
            if overridden:
                effective = apply_override(index, pol, limit, values, rate, burst, mode)
                if effective is None:
                    continue  # turned off by an override
                rate, burst, mode = effective
            planned.append(PlannedLimit(limit, rate, burst, mode))
            # A region enforces its share of the limit: of the rate and burst, or of a sliding limit's N.
            share = self.shares.share_of(pol, limit, values)
            if limit.sliding:  # N units in any period; a key of its own type (a ZSET, or two counters)
                code = ALGORITHMS[limit.algorithm]
                interval, count = scale(rate.interval, rate.count, share)
                specs.append(LimitSpec(build_key(prefix, shard, pol.name, limit.name + KEY_SUFFIX[code], parts),
                                       interval, count, mode == "enforce", code, rate.period * 1_000_000,
                                       limit.calendar))
            else:
                interval, spec_burst = scale(rate.interval, burst, share)
                specs.append(LimitSpec(build_key(prefix, shard, pol.name, limit.name, parts), interval, spec_burst,
                                       mode == "enforce"))
        slots = []
        for conc in pol.concurrency:
            try:
                parts = [escaped[d] for d in conc.key]
            except KeyError:
                continue  # a descriptor missing for this request skips the limit, as for a rate limit
            most, mode = conc.max, pol.mode_of(conc)
            if overridden:  # an override's burst is a concurrency limit's max
                found = find_override(index, pol.name, conc.name, values, time.time())
                if found is not None:
                    if found.mode == "off":
                        continue
                    most, mode = found.burst or most, found.mode
            slots.append(PlannedSlot(conc, most, mode))
            ttl = round(conc.ttl * 1_000_000)
            specs.append(LimitSpec(build_key(prefix, shard, pol.name, conc.name + KEY_SUFFIX[CONCURRENCY], parts),
                                   ttl, most, mode == "enforce", CONCURRENCY, ttl))
        return Plan(pol, cost, tuple(planned), tuple(specs), MappingProxyType(values), _counted([*planned, *slots]),
                    tuple(slots), backend=self.backend_for(pol))

    def _resolve_plain(self, pol: Policy, cost: int, values: dict[str, str], tier: str | None) -> Plan:
        """``_resolve`` of rate limits only, without overrides or REGIONS: its template's keys."""
        escaped = {name: escape(value) for name, value in values.items()}
        prefix = self.settings.prefix
        shard = escaped[pol.shard] if pol.shard in escaped else pol.name
        rows, counted = self._template(pol, tier)
        planned, specs = [], []
        for limit, name, pl, tail in rows:
            try:
                parts = [escaped[d] for d in limit.key]
            except KeyError:
                continue  # a descriptor missing for this request skips the limit (documented)
            planned.append(pl)
            specs.append(_new(LimitSpec, (build_key(prefix, shard, pol.name, name, parts), *tail)))
        if len(planned) < len(rows):
            counted = _counted(planned)
        return Plan(pol, cost, tuple(planned), tuple(specs), MappingProxyType(values), counted,
                    backend=self.backend_for(pol))


    def _rate(self, limit: Limit, tier: str | None) -> Rate:
        rate = limit.rate_for(tier)
        if rate is None:  # an unknown or missing tier: the default tier
            default = self.settings.default_tier
            rate = limit.rates[default] if default is not None else next(iter(limit.rates.values()))
        return rate
