"""``decide()``: policy -> limits -> keys -> one backend call -> Decision.

Shadow mode, the failure policy and the decision signal live here and only here; the
middleware, the decorator and the DRF throttles all come through ``decide``/``adecide``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from django.core.signals import setting_changed

from . import overrides
from .algorithm import ALLOWED
from .backends import Backend, BackendError, LimitSpec, Outcome
from .backends.clients import endpoint_for, limiter_async_client, limiter_client
from .backends.redis import RedisBackend
from .conf import get_config, setting
from .decision import Decision, LimitState
from .fallback import CLOSED, on_failure
from .keys import build_key, escape
from .leases import leasing_backend
from .policy import Limit, Policy
from .rates import Rate
from .signals import decision as decision_signal
from .signals import observers

__all__ = ["decide", "adecide", "get_policy", "backend_for"]

CLOSED_RETRY_AFTER = 1.0  # seconds a client is asked to wait when failing closed


def get_policy(policy: str | Policy) -> Policy:
    if isinstance(policy, Policy):
        return policy
    try:
        return get_config().policies[policy]
    except (KeyError, TypeError):
        known = ", ".join(sorted(get_config().policies)) or "none"
        raise KeyError(f"unknown rate-limit policy {policy!r} (configured: {known})") from None


@functools.cache
def _backend_for(alias: str) -> Backend:
    # The limiter's own clients (tight timeouts) and a circuit breaker per endpoint.
    return RedisBackend(functools.partial(limiter_client, alias), functools.partial(limiter_async_client, alias),
                        functools.partial(endpoint_for, alias))


def backend_for(policy: Policy) -> Backend:
    """The backend that decides ``policy``: the store of its ``cache_alias`` if it has one
    (the django-ratelimit compat layer's ``RATELIMIT_USE_CACHE``), else of ``CACHE_ALIAS``
    (behind local leases when the policy has a ``lease``)."""
    alias = getattr(policy, "cache_alias", None) or get_config().cache_alias
    return leasing_backend(_backend_for(alias), policy)


def _forget_backends(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DJANGO_GCRA", "CACHES"):
        _backend_for.cache_clear()
        _plans.plans.clear()


setting_changed.connect(_forget_backends)


class _Planned(NamedTuple):
    limit: Limit
    rate: Rate
    burst: int
    mode: str


class Plan(NamedTuple):
    """What one decision will ask of the backend."""

    policy: Policy
    cost: int
    limits: tuple[_Planned, ...]
    specs: tuple[LimitSpec, ...]
    descriptors: Mapping[str, str]


class PlanMemo:
    """Plans of policies without overrides, by (policy name, cost, tier, descriptor values),
    so a hot key's plan is built once. Bounded: once full it admits nothing new, since a
    stream of one-off keys churning it costs more (in garbage collection) than resolving
    them; a full memo is emptied at most every ``refill_after`` seconds to let new hot keys in.
    A hit must be of the same Policy object, so a reloaded configuration never meets a stale plan."""

    def __init__(self, size: int = 4096, refill_after: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.size, self.refill_after, self.clock = size, refill_after, clock
        self.plans: dict[tuple[Any, ...], Plan] = {}
        self.next_refill = clock() + refill_after

    def get(self, key: tuple[Any, ...], pol: Policy) -> Plan | None:
        found = self.plans.get(key)
        return found if found is not None and found.policy is pol else None

    def put(self, key: tuple[Any, ...], p: Plan) -> None:
        if len(self.plans) >= self.size:
            now = self.clock()
            if now < self.next_refill:
                return
            self.plans.clear()
            self.next_refill = now + self.refill_after
        self.plans[key] = p


_plans = PlanMemo()


def plan(policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1) -> Plan:
    """Resolve the policy's limits for these descriptors; raise on bad input."""
    pol = get_policy(policy)
    if type(cost) is not int:  # noqa: E721  (bool, a subclass of int, is refused too)
        raise TypeError(f"cost must be an int, not {type(cost).__name__}")
    if cost < 0:
        raise ValueError(f"cost must be >= 0, not {cost}")
    values: dict[str, str] = {}
    tier = descriptors.get("tier")
    tier = None if tier is None else str(tier)
    memo_key: list[Any] = [pol.name, cost, tier]
    for name in pol.descriptors:
        try:
            value = descriptors[name]
        except KeyError:
            raise KeyError(f"policy {pol.name!r} needs descriptor {name!r}; pass None to skip the limits that "
                           "use it") from None
        if value is not None:
            if type(value) is not str:
                if type(value) is not int:  # noqa: E721
                    raise TypeError(f"descriptor {name!r} must be a str, an int or None, not {type(value).__name__}")
                value = str(value)
            values[name] = value
        memo_key.append(value)
    index = overrides.cache.get()
    if pol.name in index:  # overrides match on values and expire: resolve every time
        return _resolve(pol, cost, values, tier, index)
    key = tuple(memo_key)
    found = _plans.get(key, pol)
    if found is None:
        found = _resolve(pol, cost, values, tier, index)
        _plans.put(key, found)
    return found


def _resolve(pol: Policy, cost: int, values: dict[str, str], tier: str | None, index: overrides.Index) -> Plan:
    escaped = {name: escape(value) for name, value in values.items()}
    prefix = get_config().prefix
    shard = escaped[pol.shard] if pol.shard in escaped else pol.name
    overridden = pol.name in index
    planned, specs = [], []
    for limit in pol.limits:
        try:
            parts = [escaped[d] for d in limit.key]
        except KeyError:
            continue  # a descriptor missing for this request skips the limit (documented)
        rate = _rate(limit, tier)
        burst = limit.burst_for(rate)
        mode = "shadow" if pol.mode == "shadow" or limit.mode == "shadow" else "enforce"
        if overridden:
            effective = overrides.apply_override(index, pol, limit, values, rate, burst, mode)
            if effective is None:
                continue  # turned off by an override
            rate, burst, mode = effective
        planned.append(_Planned(limit, rate, burst, mode))
        specs.append(LimitSpec(build_key(prefix, shard, pol.name, limit.name, parts), rate.interval, burst,
                               mode == "enforce"))
    return Plan(pol, cost, tuple(planned), tuple(specs), MappingProxyType(values))


def _rate(limit: Limit, tier: str | None) -> Rate:
    rate = limit.rate_for(tier)
    if rate is None:  # an unknown or missing tier: the default tier
        default = setting("DEFAULT_TIER")
        rate = limit.rates[default] if default is not None else next(iter(limit.rates.values()))
    return rate


def decide(policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1, *, request: Any = None) -> Decision:
    """Decide whether ``cost`` units may pass ``policy`` for these descriptors.

    ``descriptors`` maps each descriptor the policy's limits use to a value; None
    skips the limits that use it. ``cost=0`` peeks without consuming. ``request`` is
    passed to the ``decision`` signal (audit, metrics) and changes nothing else.
    """
    p = plan(policy, descriptors, cost)
    if not p.specs:
        return _finish(p, None, request)
    try:
        outcome = backend_for(p.policy).evaluate(p.specs, cost)
    except BackendError as exc:
        return _finish(p, on_failure(p, exc), request, fallback=True)
    return _finish(p, outcome, request)


async def adecide(policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1, *,
                  request: Any = None) -> Decision:
    """``decide()`` for async code: never blocks the event loop on the store."""
    p = plan(policy, descriptors, cost)
    if not p.specs:
        return _finish(p, None, request)
    try:
        outcome = await backend_for(p.policy).aevaluate(p.specs, cost)
    except BackendError as exc:
        return _finish(p, on_failure(p, exc), request, fallback=True)
    return _finish(p, outcome, request)


def _finish(p: Plan, outcome: Outcome | object | None, request: Any, fallback: bool = False) -> Decision:
    decision = _to_decision(p, outcome, fallback)
    for observer in observers:
        observer(sender=p.policy.name, decision=decision, request=request)
    if decision_signal.receivers:
        decision_signal.send(sender=p.policy.name, decision=decision, request=request)
    return decision


def _to_decision(p: Plan, outcome: Outcome | object | None, fallback: bool) -> Decision:
    if outcome is CLOSED:
        return Decision(False, CLOSED_RETRY_AFTER, 0, "", p.policy.name, p.cost, fallback=True, unavailable=True,
                        descriptors=p.descriptors)
    if not isinstance(outcome, Outcome):  # nothing to check, or failing open
        # Remaining is unknown: report 0 and no limit states, so no quota header claims more.
        return Decision(True, 0.0, 0, "", p.policy.name, p.cost, fallback=fallback, descriptors=p.descriptors)
    remaining, reset_after = outcome.remaining, outcome.reset_after
    states = tuple([
        LimitState(pl.limit.name, pl.rate, pl.burst, remaining[i], reset_after[i] / 1e6, pl.mode)
        for i, pl in enumerate(p.limits)
    ])
    least = min(remaining)
    bind = remaining.index(least) if outcome.binding is None else outcome.binding
    allowed = outcome.enforced == ALLOWED
    shadow = allowed and outcome.would != ALLOWED
    retry = 0.0
    if not allowed or shadow:
        retry = math.inf if outcome.retry_after is None else outcome.retry_after / 1e6
    return Decision(allowed, 0.0 if allowed else retry, least, states[bind].name, p.policy.name, p.cost, shadow,
                    fallback, False, states[bind].reset_after, retry if shadow else 0.0, states, p.descriptors)
