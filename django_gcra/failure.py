"""What a decision answers when the store fails: the policy's ``on_failure``.

- ``open``: allow. ``closed``: deny without a limit having been exceeded (the surfaces
  answer 503, see docs/operations.md). ``local``: a per-process GCRA on the memory
  backend at each limit's ``fallback_rate``, by default its rate divided by
  ``FALLBACK_PROCESSES`` (the number of processes that share the limit); and a
  concurrency limit is a per-process semaphore of its ``max`` (``backends/slots.py``),
  taken with the rates all-or-nothing.

Every fallback decision is counted in ``FailurePolicy.stats`` (per process: see
``fallback.status()``) and logged, at most once per ``FALLBACK_LOG_INTERVAL`` seconds per policy, with the number
of decisions since the previous line; metrics and the audit trail see
``Decision.fallback`` as observers of every decision.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from .algorithm import ALLOWED, DENIED
from .backends import BackendError, LimitSpec, Outcome
from .backends.memory import MemoryBackend
from .backends.slots import SlotBook
from .conf import Settings
from .plan import Plan, PlannedLimit

__all__ = ["UNAVAILABLE", "FailurePolicy", "FallbackStats", "fallback_spec"]

logger = logging.getLogger("django_gcra")

UNAVAILABLE = object()  # on_failure="closed": deny without a limit having been exceeded


class FallbackStats:
    """Per-process counters of fallback decisions, by (policy, on_failure, allowed)."""

    def __init__(self, log_interval: float) -> None:
        self.log_interval = log_interval  # FALLBACK_LOG_INTERVAL
        self._lock = threading.Lock()
        self.decisions: Counter[tuple[str, str, bool]] = Counter()
        self.last_error = ""
        self.last_at = 0.0  # time.time() of the last fallback decision
        self._logged_at: dict[str, float] = {}
        self._unlogged: Counter[str] = Counter()

    def record(self, policy: str, mode: str, allowed: bool, exc: BaseException) -> int | None:
        """Count one decision; return how many to report if a log line is due, else None."""
        now = time.monotonic()
        with self._lock:
            self.decisions[(policy, mode, allowed)] += 1
            self.last_error, self.last_at = f"{type(exc).__name__}: {exc}"[:200], time.time()
            self._unlogged[policy] += 1
            last = self._logged_at.get(policy)
            if last is not None and now - last < self.log_interval:
                return None
            self._logged_at[policy] = now
            return self._unlogged.pop(policy)

    def total(self, policy: str | None = None, allowed: bool | None = None) -> int:
        with self._lock:
            return sum(n for (p, _, a), n in self.decisions.items()
                       if (policy is None or p == policy) and (allowed is None or a == allowed))

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {"decisions": [{"policy": p, "on_failure": m, "allowed": a, "count": n}
                                  for (p, m, a), n in sorted(self.decisions.items())],
                    "last_error": self.last_error, "last_at": self.last_at}

    def reset(self) -> None:
        with self._lock:
            self.decisions.clear()
            self._logged_at.clear()
            self._unlogged.clear()
            self.last_error, self.last_at = "", 0.0


def fallback_spec(spec: LimitSpec, planned: PlannedLimit, processes: int) -> LimitSpec:
    """The local limit of one limit, of the same algorithm: its ``fallback_rate`` (burst,
    or a sliding limit's N: the rate's count), or its own rate and burst (N) shared by
    ``FALLBACK_PROCESSES`` processes (a sliding limit keeps its period)."""
    if planned.limit.fallback_rate is not None:
        rate = planned.limit.fallback_rate
        if spec.algorithm:
            return spec._replace(interval=rate.interval, burst=rate.count, period=rate.period * 1_000_000)
        return LimitSpec(spec.key, rate.interval, rate.count, spec.enforce)
    if spec.algorithm:  # a sliding limit: N / processes in the same period
        return spec._replace(burst=max(1, spec.burst // processes), interval=spec.interval * processes)
    return LimitSpec(spec.key, spec.interval * processes, max(1, spec.burst // processes), spec.enforce)


class FailurePolicy:
    """The failure policy of one engine: its fallback counters, its memory store of
    ``on_failure="local"``, and the local semaphores of its ``slots``."""

    def __init__(self, settings: Settings, slots: SlotBook) -> None:
        self.settings, self.slots = settings, slots
        self.stats = FallbackStats(settings.fallback_log_interval)
        self.local_backend = MemoryBackend()  # the per-process store of on_failure="local"

    def on_failure(self, p: Plan, exc: BackendError) -> Outcome | object | None:
        """The outcome the failure policy gives: None fails open, ``UNAVAILABLE`` fails closed."""
        mode = p.policy.on_failure
        if mode == "open":
            outcome: Outcome | object | None = None
        elif mode == "closed":
            outcome = UNAVAILABLE
        else:
            outcome = self._local(p)
        allowed = outcome is None or (isinstance(outcome, Outcome) and outcome.allowed)
        due = self.stats.record(p.policy.name, mode, allowed, exc)
        if due is not None:
            logger.warning("django_gcra: rate-limit store unavailable, policy %r answered by on_failure=%s "
                           "(%d fallback decision(s) since the last report): %s", p.policy.name, mode, due, exc)
        return outcome

    def _local(self, p: Plan) -> Outcome:
        """on_failure="local": the rates on the memory backend, the slots on per-process semaphores."""
        processes = self.settings.fallback_processes
        rates = [fallback_spec(s, pl, processes) for s, pl in zip(p.specs, p.limits)]
        if not p.slots:
            return self.local_backend.evaluate(rates, p.cost)
        semaphores = self.slots.local
        n = len(p.limits)
        conc = p.specs[n:]
        enforced = [i for i, (s, ps) in enumerate(zip(conc, p.slots)) if ps.mode == "enforce"]
        keys, maxima = tuple(conc[i].key for i in enforced), [p.slots[i].max for i in enforced]
        full = semaphores.try_acquire(keys, maxima) if p.cost > 0 else None
        if full is not None:
            semaphores.stats.add("refused")
            counts = semaphores.counts([s.key for s in conc])
            free = tuple(max(0, ps.max - c) for ps, c in zip(p.slots, counts))
            peek = self.local_backend.evaluate(rates, 0) if rates else None  # what the rates have left (no cost)
            return Outcome(DENIED, DENIED, 1_000_000, n + enforced[full], 0, (peek.remaining if peek else ()) + free,
                           (peek.reset_after if peek else ()) + (0,) * len(conc))
        outcome = self.local_backend.evaluate(rates, p.cost) if rates else None
        slots = semaphores.acquired(keys) if p.cost > 0 else None
        if outcome is not None and not outcome.allowed:
            if slots is not None:
                slots.release()
            slots = None
        counts = semaphores.counts([s.key for s in conc])
        free = tuple(max(0, ps.max - c) for ps, c in zip(p.slots, counts))
        if outcome is None:
            return Outcome(ALLOWED, ALLOWED, None, None, 0, free, (0,) * len(conc), slots=slots)
        return outcome._replace(remaining=outcome.remaining + free, reset_after=outcome.reset_after + (0,) * len(conc),
                                slots=slots)
