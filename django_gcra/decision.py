"""The Decision value object: everything a surface, the audit trail and metrics need."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from .headers import quota_headers
from .rates import Rate

__all__ = ["OUTCOMES", "Decision", "LimitState", "admitted", "outcome_of"]


class LimitState(NamedTuple):
    """One limit as evaluated for one request (immutable; a tuple, so cheap to build)."""

    name: str
    rate: Rate
    burst: int
    remaining: int
    reset_after: float  # seconds until the key is fully rested (sliding: until one more unit frees)
    mode: str = "enforce"  # enforce | shadow
    algorithm: str = "gcra"  # gcra | sliding_log | sliding_window | concurrency (burst: max; remaining: free slots)


_NO_DESCRIPTORS: Mapping[str, str] = MappingProxyType({})


class Decision(NamedTuple):
    """The answer of ``decide()`` (immutable; a named tuple, so cheap to build on the hot path).

    ``allowed`` is what is enforced. ``shadow`` is True when the limits would have
    denied but shadow mode let the request through; ``would_retry_after`` then holds
    the retry-after an enforced limit would have sent. ``fallback`` is True when the
    store could not be reached and the policy's ``on_failure`` answered instead.
    ``waited`` is the time (seconds) the decision waited for its reserved slot
    (``decide(..., max_wait=...)``); 0.0 when it did not wait.
    ``capacity`` is True when a concurrency limit of ``key: []`` (one for everyone) is
    full: the surfaces answer 503, not 429. An allowed decision of a policy with
    concurrency limits holds their slots until ``release()`` (or ``await arelease()``).
    """

    allowed: bool
    retry_after: float  # seconds, exact; 0 when allowed; inf when never satisfiable
    remaining: int
    limit: str  # the binding limit: the denying one, else the enforced one with least remaining
    policy: str
    cost: int = 1
    shadow: bool = False
    fallback: bool = False
    unavailable: bool = False
    reset_after: float = 0.0  # seconds until the binding limit is fully rested
    would_retry_after: float = 0.0
    limits: tuple[LimitState, ...] = ()
    descriptors: Mapping[str, str] = _NO_DESCRIPTORS
    waited: float = 0.0  # seconds waited for a reserved slot (shaping); 0.0: admitted at once
    capacity: bool = False
    slots: Any = None  # backends.slots.Slots of an allowed decision with concurrency limits
    disabled: bool = False  # DJANGO_GCRA["ENABLED"] is False: allowed, nothing asked of the store
    exempt: bool = False  # an EXEMPT rule matched: allowed, nothing asked of the store
    blocked: bool = False  # a DENY rule matched: refused (403), nothing asked of the store
    # What decision.settle() needs (metered costs; settling.settlement): None, nothing to settle.
    settlement: Any = None

    def release(self) -> None:
        """Free the concurrency slots this decision holds, in the store at once (one round
        trip, within ``TIMEOUT``): idempotent, harmless when there are none. A release that
        fails is counted and logged; the slot's ``ttl`` frees it then."""
        if self.slots is not None:
            self.slots.release()

    async def arelease(self) -> None:
        """``release()`` for async code, on the event loop's own connection."""
        if self.slots is not None:
            await self.slots.arelease()

    def settle(self, actual: int) -> bool:
        """Charge the real cost of an allowed decision made with ``cost=estimate``: move each
        of its rate and quota limits by ``actual - estimate`` in one atomic store call (more
        is owed at once, at most a burst beyond full use; less is refunded, never leaving
        more than a full burst). True when applied; False, doing nothing, on a denied,
        shadow, exempt, disabled or fallback decision, or when the store could not be
        reached (logged and counted). Settles once: a second call raises RuntimeError;
        a negative ``actual`` raises ValueError."""
        check_actual(actual)
        found = self.settlement
        if found is None:
            return False
        _claim(found)
        result: bool = found[0][0](found[1], found[2], actual)
        return result

    async def asettle(self, actual: int) -> bool:
        """``settle()`` for async code (never blocks the event loop on the store)."""
        check_actual(actual)
        found = self.settlement
        if found is None:
            return False
        _claim(found)
        result: bool = await found[0][1](found[1], found[2], actual)
        return result

    @property
    def impossible(self) -> bool:
        """The cost exceeds the binding limit's burst: no wait will ever admit it."""
        return math.isinf(self.retry_after) or math.isinf(self.would_retry_after)

    @property
    def binding(self) -> LimitState | None:
        return next((s for s in self.limits if s.name == self.limit), None)

    def headers(self) -> dict[str, str]:
        """The quota headers for this decision (and ``Retry-After`` when denied)."""
        return quota_headers(self)


def _claim(settlement: list[Any]) -> None:
    """Mark a settlement used: RuntimeError if it was (append is atomic: of two threads
    settling one decision, one wins)."""
    settlement.append(True)
    if len(settlement) > 4:
        raise RuntimeError("this decision is settled already (a decision settles once)")


def check_actual(actual: object) -> None:
    """TypeError unless ``actual`` is an int (bool refused); ValueError when negative."""
    if type(actual) is not int:
        raise TypeError(f"actual must be an int, not {type(actual).__name__}")
    if actual < 0:
        raise ValueError(f"actual must be >= 0, not {actual}")


_new = tuple.__new__


def admitted(remaining: int, limit: str, policy: str, cost: int, reset_after: float, state: LimitState,
             descriptors: Mapping[str, str], settlement: Any) -> Decision:
    """``Decision(allowed=True, retry_after=0.0, remaining=remaining, limit=limit,
    policy=policy, cost=cost, reset_after=reset_after, limits=(state,),
    descriptors=descriptors, settlement=settlement)``: a plain admission of one limit, the
    hot path, built with every field in order (a named tuple's keyword ``__new__`` costs
    about 0.8 us more; tests/test_decide.py proves the two equal, field by field)."""
    return _new(Decision, (True, 0.0, remaining, limit, policy, cost, False, False, False, reset_after, 0.0, (state,),
                           descriptors, 0.0, False, None, False, False, False, settlement))


#: Every outcome label. ``fallback_*`` and ``unavailable`` (on_failure="closed") are
#: the decisions made without the store. ``waited``: allowed after waiting for a reserved
#: slot (shaping, ``max_wait``); a refusal beyond ``max_wait`` is ``denied``.
#: ``exempt``, ``blocked`` and ``disabled``: decided by an EXEMPT or DENY rule or by
#: ``ENABLED: False``, without the store.
OUTCOMES = ("allowed", "waited", "denied", "shadow_denied", "fallback_allowed", "fallback_denied", "unavailable",
            "exempt", "blocked", "disabled")


def outcome_of(decision: Decision) -> str:
    """The outcome label of one decision (metrics, the console's counts, the audit trail)."""
    if decision.allowed and not (decision.shadow or decision.fallback or decision.waited or decision.exempt
                                 or decision.disabled):
        return "allowed"  # the common case first
    if decision.blocked:
        return "blocked"
    if decision.exempt:
        return "exempt"
    if decision.disabled:
        return "disabled"
    if decision.unavailable:
        return "unavailable"
    if decision.fallback:
        return "fallback_allowed" if decision.allowed else "fallback_denied"
    if not decision.allowed:
        return "denied"
    if decision.shadow:
        return "shadow_denied"
    return "waited" if decision.waited > 0 else "allowed"
