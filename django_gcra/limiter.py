"""``decide()``: plan -> one backend call -> Decision.

Shadow mode, the failure policy and the decision signal live here and only here; the
middleware, the decorator and the DRF throttles all come through ``decide``/``adecide``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest

from . import conf, leases
from .access import acheck, check
from .algorithm import ALLOWED
from .backends import BackendError, Outcome
from .backends.base import Served
from .conf import get_settings
from .decision import Decision, LimitState, admitted
from .fallback import UNAVAILABLE, on_failure
from .overrides import cache as plane
from .plan import Plan, get_policy, plan
from .policy import Policy
from .rates import Rate
from .settling import SETTLERS
from .signals import decision as decision_signal
from .signals import notable_observers, observers
from .store import backend_for, backend_for_plan
from .validation import max_wait_problem

__all__ = ["adecide", "backend_for", "decide", "get_policy", "plan"]

_new = tuple.__new__
UNAVAILABLE_RETRY_AFTER = 1.0  # seconds a client is asked to wait when failing closed


def decide(policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1, *,
           max_wait: float = 0.0, request: HttpRequest | None = None) -> Decision:
    """Decide whether ``cost`` units may pass ``policy`` for these descriptors.

    ``descriptors`` maps each descriptor the policy's limits use to a value; None
    skips the limits that use it. ``cost=0`` peeks without consuming. ``request`` is
    passed to the ``decision`` signal (audit, metrics); exempt and deny rules read it too
    (its address, the descriptors not passed, the callable rules: ``access.py``).

    ``max_wait`` (seconds; shaping): a request that would be denied but fits within
    ``max_wait`` gets its own future slot in the same script call, and ``decide`` returns
    (allowed, ``waited`` set) only after sleeping until then. Beyond it: denied, nothing
    consumed. Shadow limits, sliding limits and fallback decisions never wait.
    """
    if not (conf.standing or get_settings()).enabled:  # DJANGO_GCRA["ENABLED"] is False
        return disabled(policy, cost, request)
    wait_us = max_wait_us(max_wait) if max_wait else 0
    if plane.ruled and (ruled := check(policy, descriptors, cost, request)) is not None:
        return ruled  # exempt or deny (access.py): no store call
    p = plan(policy, descriptors, cost)
    if not p.specs:
        return _finish(p, None, request)
    try:
        # The memoized plan's backend, while the leases stand (store.backend_for_plan).
        backend = p.backend if p.backend_generation == leases.generation else backend_for_plan(p)
        if wait_us:
            outcome = backend.evaluate(p.specs, cost, wait_us)  # type: ignore[call-arg]
        # A leased key's local path first (the lease's numbers, no Outcome made); else the
        # two-argument call: every store takes it (and it is the hot path).
        elif (outcome := backend.serve(p.specs, cost)) is None:
            outcome = backend.evaluate(p.specs, cost)
    except BackendError as exc:
        return _finish(p, on_failure(p, exc), request, fallback=True)
    if wait_us and outcome.waited > 0:
        time.sleep(outcome.waited / 1e6)
    return _finish(p, outcome, request)


async def adecide(policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1, *,
                  max_wait: float = 0.0, request: HttpRequest | None = None) -> Decision:
    """``decide()`` for async code: never blocks the event loop on the store, and waits
    for a reserved slot with ``asyncio.sleep`` (a cancelled wait still used its slot)."""
    if not (conf.standing or get_settings()).enabled:  # DJANGO_GCRA["ENABLED"] is False
        return disabled(policy, cost, request)
    wait_us = max_wait_us(max_wait) if max_wait else 0
    if plane.ruled and (ruled := await acheck(policy, descriptors, cost, request)) is not None:
        return ruled
    p = plan(policy, descriptors, cost)
    if not p.specs:
        return _finish(p, None, request)
    try:
        # The memoized plan's backend, while the leases stand (store.backend_for_plan).
        backend = p.backend if p.backend_generation == leases.generation else backend_for_plan(p)
        if wait_us:
            outcome = await backend.aevaluate(p.specs, cost, wait_us)
        elif (outcome := backend.serve(p.specs, cost, True)) is None:
            outcome = await backend.aevaluate(p.specs, cost)
    except BackendError as exc:
        return _finish(p, on_failure(p, exc), request, fallback=True)
    if wait_us and outcome.waited > 0:
        await asyncio.sleep(outcome.waited / 1e6)
    return _finish(p, outcome, request)


def disabled(policy: str | Policy, cost: int, request: HttpRequest | None) -> Decision:
    """The decision of ``ENABLED: False``: allowed, ``disabled`` set, without the store, the
    audit trail or the console's counts (only the public ``decision`` signal hears of it).
    An unknown policy and a bad cost are refused as ever."""
    pol = get_policy(policy)
    if type(cost) is not int:
        raise TypeError(f"cost must be an int, not {type(cost).__name__}")
    if cost < 0:
        raise ValueError(f"cost must be >= 0, not {cost}")
    decision = Decision(allowed=True, retry_after=0.0, remaining=0, limit="", policy=pol.name, cost=cost,
                        disabled=True)
    if decision_signal.receivers:
        decision_signal.send(sender=pol.name, decision=decision, request=request)
    return decision


def max_wait_us(max_wait: float) -> int:
    """``max_wait`` seconds as whole microseconds; ValueError unless a finite number >= 0."""
    problem = max_wait_problem(max_wait)
    if problem:
        raise ValueError(f"max_wait {problem}")
    return int(max_wait * 1_000_000)


def _finish(p: Plan, outcome: Outcome | Served | object | None, request: HttpRequest | None,
            fallback: bool = False) -> Decision:
    """The plan's ``Decision`` from what decided it (a store's ``Outcome``, a lease's
    ``Served`` numbers, or the failure policy's answer), offered to the observers and sent."""
    one = True  # one rate limit: the hot path, its Decision built here (no frame more)
    if type(outcome) is tuple:  # served from a lease (LeasingBackend.serve): one limit, admitted now
        least, rested, at = outcome
        enforced = would = ALLOWED
        retry_after, waited, slots = None, 0, None
    elif type(outcome) is Outcome:
        # Every field at once: unpacking reads a named tuple in a third of the time of its fields one by one.
        enforced, would, retry_after, _, at, remaining, reset_after, _, waited, slots = outcome
        if len(remaining) == 1 and not p.slots:
            least, rested = remaining[0], reset_after[0]
        else:
            one = False
            decision = _composite(p, outcome, fallback)
    else:
        one = False
        decision = _to_decision(p, outcome, fallback)
    if not one and decision.allowed and not (decision.shadow or fallback) and type(outcome) is Outcome:
        decision = decision._replace(settlement=[SETTLERS, p, outcome.now])  # (settling.settlement)
    if one:
        pl = p.limits[0]
        limit = pl.limit
        # tuple.__new__ with every field: a named tuple's own __new__ is one more Python frame.
        reset = rested / 1e6
        rate = pl.rate if limit.calendar is None else _quota_rate(limit, pl.rate)
        state = _new(LimitState, (limit.name, rate, pl.burst, least, reset, pl.mode, limit.algorithm))
        allowed = enforced == ALLOWED
        if allowed and would == ALLOWED:
            plain = not (fallback or waited or slots)
            if plain:  # the hot path: Decision.admitted, the checked fast constructor
                decision = admitted(least, limit.name, p.policy.name, p.cost, reset, state, p.descriptors,
                                    [SETTLERS, p, at])
            else:
                decision = Decision(allowed=True, retry_after=0.0, remaining=least, limit=limit.name,
                                    policy=p.policy.name, cost=p.cost, fallback=fallback, reset_after=reset,
                                    limits=(state,), descriptors=p.descriptors, waited=waited / 1e6, slots=slots,
                                    settlement=None if fallback else [SETTLERS, p, at])
        else:
            retry = math.inf if retry_after is None else retry_after / 1e6
            decision = Decision(allowed=allowed, retry_after=0.0 if allowed else retry, remaining=least,
                                limit=limit.name, policy=p.policy.name, cost=p.cost, shadow=allowed,
                                fallback=fallback, reset_after=reset, would_retry_after=retry if allowed else 0.0,
                                limits=(state,), descriptors=p.descriptors, waited=waited / 1e6, slots=slots)
            plain = False
    else:
        plain = decision.allowed and not (decision.shadow or decision.fallback or decision.waited)
    name = p.policy.name
    for observer in observers:  # (positional: a call by keyword costs twice as much)
        observer(name, decision, request)
    # Not a plain admission (outcome_of's first test): the audit trail and the metrics see it too.
    if notable_observers and not plain:
        for observer in notable_observers:
            observer(name, decision, request)
    if decision_signal.receivers:
        decision_signal.send(sender=name, decision=decision, request=request)
    return decision


def _quota_rate(limit: Any, rate: Rate) -> Rate:
    """A quota's rate as its headers show it: its units in the seconds of the current period."""
    return Rate(rate.count, limit.calendar.length())


def _to_decision(p: Plan, outcome: object | None, fallback: bool) -> Decision:
    """The decision without an outcome of the store: unavailable, nothing to check, or failing open."""
    name, cost, descriptors = p.policy.name, p.cost, p.descriptors
    if outcome is UNAVAILABLE:
        return Decision(allowed=False, retry_after=UNAVAILABLE_RETRY_AFTER, remaining=0, limit="", policy=name,
                        cost=cost, fallback=True, unavailable=True, descriptors=descriptors)
    # Remaining is unknown: report 0 and no limit states, so no quota header claims more.
    return Decision(allowed=True, retry_after=0.0, remaining=0, limit="", policy=name, cost=cost,
                    fallback=fallback, descriptors=descriptors)


def _composite(p: Plan, outcome: Outcome, fallback: bool) -> Decision:
    """The decision of several limits (or concurrency limits): the binding one speaks for them."""
    name = p.policy.name
    enforced, would, retry_after, binding, _, remaining, reset_after, _, waited, slots = outcome
    states = []
    for i, pl in enumerate(p.limits):
        limit = pl.limit
        rate = pl.rate if limit.calendar is None else _quota_rate(limit, pl.rate)
        states.append(_new(LimitState, (limit.name, rate, pl.burst, remaining[i], reset_after[i] / 1e6, pl.mode,
                                        limit.algorithm)))
    base = len(states)
    for j, ps in enumerate(p.slots):
        states.append(LimitState(ps.limit.name, Rate(ps.max, max(1, math.ceil(ps.limit.ttl))), ps.max,
                                 remaining[base + j], reset_after[base + j] / 1e6, ps.mode, "concurrency"))
    # Remaining and the binding limit of an allowed decision speak of enforced limits (a
    # shadow limit never lowers what a client is told), unless every limit is in shadow.
    bind = binding
    if bind is None:  # allowed by every limit: the counted one with the least remaining
        bind = -1
        for i in p.counted:
            if bind < 0 or remaining[i] < remaining[bind]:
                bind = i
    least = remaining[bind] if binding is None else min([remaining[i] for i in p.counted])
    allowed = enforced == ALLOWED
    shadow = allowed and would != ALLOWED
    retry = 0.0
    if not allowed or shadow:
        retry = math.inf if retry_after is None else retry_after / 1e6
    capacity = not allowed and bind >= base and p.slots[bind - base].limit.capacity
    state = states[bind]
    return Decision(allowed=allowed, retry_after=0.0 if allowed else retry, remaining=least, limit=state.name,
                    policy=name, cost=p.cost, shadow=shadow, fallback=fallback, reset_after=state.reset_after,
                    would_retry_after=retry if shadow else 0.0, limits=tuple(states), descriptors=p.descriptors,
                    waited=waited / 1e6, capacity=capacity, slots=slots)
