"""Metered costs: what ``decision.settle(actual)`` does (``Decision.settlement``).

``decide()`` gives an allowed, enforced decision that the store made a settlement: the list
``[settlers, plan, at]`` (``Settler.settlers``: the engine's settle and asettle, the plan:
its keys and limits, and the store's time of the decision), built in one allocation on the hot path;
``Decision.settle`` claims it by appending to it (once: a list's append is atomic) and
calls ``settle`` or ``asettle``. Settling
sends ``actual - estimate`` to the store's settle script (``backends/settle.lua``) in one
atomic call over every rate and quota limit of the decision (concurrency limits hold
slots, not units: they are left out). A leased key is settled on the store itself: the
units a lease served were taken from the store when it was filled, so a refund returns
there, once; the lease's own units are untouched.

A settle never raises for the store: a failure is logged and counted (``Settler.stats``), and
``settle`` returns False.
"""

from __future__ import annotations

import logging
import threading

from .algorithm import CONCURRENCY
from .backends import BackendError, LimitSpec
from .plan import Plan
from .store import Stores

__all__ = ["SettleStats", "Settler"]

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


class Settler:
    """Settles the decisions of one engine on its ``stores``, counting in ``stats``."""

    def __init__(self, stores: Stores) -> None:
        self.stores = stores
        self.stats = SettleStats()
        #: The first item of every settlement of the engine's decisions (the module docstring).
        self.settlers = (self.settle, self.asettle)

    def settle(self, plan: Plan, at: int, actual: int) -> bool:
        """Move the plan's rate and quota limits by ``actual - plan.cost`` (a decision made at
        ``at``, the store's us): True when applied; False, logged and counted, when the store
        could not be reached."""
        policy = plan.policy
        found = _specs(plan, actual)
        if found is not None:
            try:
                self.stores.deciding(policy.cache_alias).settle(*found, at)
            except BackendError as exc:
                return self._failed(policy.name, exc)
        self.stats.add(policy.name, "applied")
        return True

    async def asettle(self, plan: Plan, at: int, actual: int) -> bool:
        """``settle`` for async code."""
        policy = plan.policy
        found = _specs(plan, actual)
        if found is not None:
            try:
                await self.stores.deciding(policy.cache_alias).asettle(*found, at)
            except BackendError as exc:
                return self._failed(policy.name, exc)
        self.stats.add(policy.name, "applied")
        return True

    def _failed(self, name: str, exc: BaseException) -> bool:
        self.stats.add(name, "failed")
        logger.warning("django_gcra: could not settle a decision of policy %r: %s", name, exc)
        return False


def _specs(plan: Plan, actual: int) -> tuple[list[LimitSpec], int] | None:
    """The specs to move and the delta; None when nothing moves (the estimate was right)."""
    delta = actual - plan.cost
    specs = [spec for spec in plan.specs if spec.algorithm != CONCURRENCY]
    if not specs or not delta:  # (nothing moves: no call)
        return None
    return specs, delta
