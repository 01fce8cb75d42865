"""Shaping: wait for a slot instead of being refused (background work, outbound calls).

    from django_gcra import pace

    with pace("partner-api", {"partner": "acme"}, max_wait=5):
        call_the_partner()            # starts no earlier than the policy allows

    pace("partner-api", {"partner": "acme"}, max_wait=5)   # a plain call waits the same way

    async with apace("partner-api", {"partner": "acme"}, max_wait=5):
        await call_the_partner()      # waits with asyncio.sleep: the loop keeps running
    decision = await apace("partner-api", {"partner": "acme"}, max_wait=5)

Each caller gets its own future slot from one script call (``decide(..., max_wait=...)``),
so concurrent callers leave one interval apart and the rate holds exactly. A caller whose
slot is further away than ``max_wait`` is refused, reserving nothing: ``SlotRefused``
(with the decision, so its ``retry_after``). Also here: the checks of a ``max_wait``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from types import TracebackType
from typing import Any

from .codes import Codes, Problem
from .decision import Decision
from .limiter import adecide, decide
from .policy import Policy
from .validation import max_wait_problem

__all__ = ["DEFAULT_MAX_WAIT", "SlotRefused", "apace", "max_wait_problems", "pace"]

DEFAULT_MAX_WAIT = 5.0  # seconds


class SlotRefused(Exception):
    """No slot within ``max_wait``: refused as ``decide`` without a wait would refuse
    (nothing was consumed). ``decision`` is that denied Decision."""

    def __init__(self, decision: Decision, max_wait: float) -> None:
        self.decision = decision
        self.max_wait = max_wait
        self.retry_after = decision.retry_after
        if decision.impossible:
            why = "its cost exceeds the limit's burst: no wait admits it"
        elif decision.unavailable:
            why = "the store is unavailable and the policy fails closed"
        else:
            why = f"the next slot is {decision.retry_after:.3f} s away, beyond max_wait={max_wait:g} s"
        super().__init__(f"django_gcra: no slot on policy {decision.policy!r} "
                         f"(limit {decision.limit or '-'!r}): {why}")


def _checked(decision: Decision, max_wait: float) -> Decision:
    if not decision.allowed:
        raise SlotRefused(decision, max_wait)
    return decision


class pace:
    """Wait until ``cost`` units may pass ``policy`` (at most ``max_wait`` seconds), then
    return; ``SlotRefused`` if no slot is that close. Use it as a plain call or as
    ``with pace(...) as decision:`` (the wait happens on the call, before the block)."""

    def __init__(self, policy: str | Policy, descriptors: Mapping[str, Any] | None = None, cost: int = 1, *,
                 max_wait: float = DEFAULT_MAX_WAIT) -> None:
        self.decision = _checked(decide(policy, descriptors or {}, cost, max_wait=max_wait), max_wait)

    @property
    def waited(self) -> float:
        return self.decision.waited

    def __enter__(self) -> Decision:
        return self.decision

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


class apace:
    """``pace`` for async code: ``await apace(...)`` returns the Decision once its slot has
    come, and ``async with apace(...) as decision:`` runs the block then. The wait is an
    ``asyncio.sleep``, so the event loop keeps serving other tasks."""

    def __init__(self, policy: str | Policy, descriptors: Mapping[str, Any] | None = None, cost: int = 1, *,
                 max_wait: float = DEFAULT_MAX_WAIT) -> None:
        self.policy, self.descriptors, self.cost, self.max_wait = policy, descriptors or {}, cost, max_wait
        self.decision: Decision | None = None

    async def _wait(self) -> Decision:
        if self.decision is None:
            decision = await adecide(self.policy, self.descriptors, self.cost, max_wait=self.max_wait)
            self.decision = _checked(decision, self.max_wait)
        return self.decision

    def __await__(self) -> Generator[Any, None, Decision]:
        return self._wait().__await__()

    async def __aenter__(self) -> Decision:
        return await self._wait()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        return None


def max_wait_problems(policy: Policy, max_wait: Any, where: str) -> list[Problem]:
    """What is wrong with waiting up to ``max_wait`` seconds on ``policy``: not a finite
    number >= 0 (E100); longer than every enforcing GCRA limit's period times its burst
    (E101: such a queue outlives the limit's own horizon); set on a policy that can never
    wait, every enforcing limit being sliding, or one a concurrency limit (W100)."""
    problem = max_wait_problem(max_wait)
    if problem:
        return [Problem(Codes.BAD_MAX_WAIT, f"{where}: max_wait {problem}.",
                        "Give the seconds a caller may wait for its slot (0: never wait).")]
    enforcing = [lim for lim in policy.limits if policy.mode_of(lim) == "enforce"]
    shaped = [lim for lim in enforcing if lim.algorithm == "gcra"]
    if not max_wait or not (enforcing or policy.concurrency):
        return []
    if any(policy.mode_of(c) == "enforce" for c in policy.concurrency):
        return [Problem(Codes.MAX_WAIT_NEVER_WAITS, f"{where}: max_wait={max_wait!r} has no effect: policy "
                        f"{policy.name!r} has concurrency limits, and a decision holding slots never waits.",
                        "Wait on a policy of rate limits only, or drop max_wait.")]
    if not shaped:
        return [Problem(Codes.MAX_WAIT_NEVER_WAITS, f"{where}: max_wait={max_wait!r} has no effect: policy "
                        f"{policy.name!r} has only sliding limits, and a sliding limit never makes a caller wait.",
                        "Use algorithm 'gcra' for a limit callers should wait on, or drop max_wait.")]
    horizon = max(rate.period * (lim.burst if lim.burst is not None else rate.count)
                  for lim in shaped for rate in lim.rates.values())
    if max_wait > horizon:
        return [Problem(Codes.MAX_WAIT_TOO_LONG, f"{where}: max_wait={max_wait!r} s is longer than the limit's "
                        f"period times its burst ({horizon:g} s) on policy {policy.name!r}.",
                        "A wait that long queues callers beyond the limit's own horizon; lower max_wait.")]
    return []

