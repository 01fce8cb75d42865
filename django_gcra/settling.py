"""Metered costs: what ``decision.settle(actual)`` does (``Decision.settlement``).

``decide()`` gives an allowed, enforced decision that the store made a ``Settlement``: the
plan (its keys and limits), the store's time of the decision and a settled flag. Settling
sends ``actual - estimate`` to the store's settle script (``backends/settle.lua``) in one
atomic call over every rate and quota limit of the decision (concurrency limits hold
slots, not units: they are left out). A leased key is settled on the store itself: the
units a lease served were taken from the store when it was filled, so a refund returns
there, once; the lease's own units are untouched.

A settle never raises for the store: a failure is logged and counted (``stats``), and
``settle`` returns False.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from .algorithm import CONCURRENCY
from .backends import BackendError, LimitSpec
from .decision import check_actual
from .store import store_backend

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["Settlement", "stats"]

logger = logging.getLogger("django_gcra")


class SettleStats:
    """Per-process counts of settles by (policy, outcome): applied (the store moved, or
    the estimate was right), failed (the store could not be reached, or the settle
    function of a surface raised; logged). Read by the metrics."""

    OUTCOMES = ("applied", "failed")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, policy: str, outcome: str) -> None:
        with self._lock:
            self.counts[(policy, outcome)] = self.counts.get((policy, outcome), 0) + 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self.counts)

    def reset(self) -> None:
        with self._lock:
            self.counts = {}


stats = SettleStats()


class Settlement:
    """What settling one decision needs: its plan and the store's time of the decision
    (built per allowed decision: three slots, no work until ``settle``)."""

    __slots__ = ("at", "done", "plan")

    def __init__(self, plan: Plan, at: int) -> None:
        self.plan, self.at, self.done = plan, at, False

    def _specs(self, actual: int) -> tuple[list[LimitSpec], int] | None:
        """The specs to move and the delta; None when there is nothing to do. Marks it settled
        (RuntimeError the second time)."""
        check_actual(actual)
        if self.done:
            raise RuntimeError("this decision is settled already (a decision settles once)")
        self.done = True
        delta = actual - self.plan.cost
        specs = [spec for spec in self.plan.specs if spec.algorithm != CONCURRENCY]
        if not specs or not delta:  # (the estimate was right: nothing moves, no call)
            return None
        return specs, delta

    def settle(self, actual: int) -> bool:
        found = self._specs(actual)
        if found is None:
            stats.add(self.plan.policy.name, "applied")
            return True
        specs, delta = found
        policy = self.plan.policy
        try:
            store_backend(policy.cache_alias).settle(specs, delta, self.at)
        except BackendError as exc:
            return self._failed(exc)
        stats.add(policy.name, "applied")
        return True

    async def asettle(self, actual: int) -> bool:
        found = self._specs(actual)
        if found is None:
            stats.add(self.plan.policy.name, "applied")
            return True
        specs, delta = found
        policy = self.plan.policy
        try:
            await store_backend(policy.cache_alias).asettle(specs, delta, self.at)
        except BackendError as exc:
            return self._failed(exc)
        stats.add(policy.name, "applied")
        return True

    def _failed(self, exc: BaseException) -> bool:
        name = self.plan.policy.name
        stats.add(name, "failed")
        logger.warning("django_gcra: could not settle a decision of policy %r: %s", name, exc)
        return False
