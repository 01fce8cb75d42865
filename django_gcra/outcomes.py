"""From what decided a plan to its ``Decision``, offered to the observers and sent:
``finish`` (a store's ``Outcome``, a lease's ``Served`` numbers, or the failure policy's
answer), and ``disabled`` (``ENABLED: False``).
"""

from __future__ import annotations

import math
from typing import Any

from django.http import HttpRequest

from .algorithm import ALLOWED
from .backends import Outcome
from .backends.base import Served
from .decision import Decision, LimitState, admitted
from .failure import UNAVAILABLE
from .plan import Plan, get_policy
from .policy import Policy
from .rates import Rate
from .signals import decision as decision_signal
from .signals import notable_observers, observers

__all__ = ["UNAVAILABLE_RETRY_AFTER", "disabled", "finish"]

_new = tuple.__new__
UNAVAILABLE_RETRY_AFTER = 1.0  # seconds a client is asked to wait when failing closed


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


def finish(p: Plan, outcome: Outcome | Served | object | None, request: HttpRequest | None,
           settlers: tuple[Any, Any], fallback: bool = False) -> Decision:
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
        decision = decision._replace(settlement=[settlers, p, outcome.now])  # (settling.Settler)
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
                                    [settlers, p, at])
            else:
                decision = Decision(allowed=True, retry_after=0.0, remaining=least, limit=limit.name,
                                    policy=p.policy.name, cost=p.cost, fallback=fallback, reset_after=reset,
                                    limits=(state,), descriptors=p.descriptors, waited=waited / 1e6, slots=slots,
                                    settlement=None if fallback else [settlers, p, at])
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
