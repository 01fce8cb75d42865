"""An in-process backend with the Lua script's semantics (tests, the local fallback)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..algorithm import ALLOWED, GCRA, QUOTA, SLIDING_LOG, composite
from ..metered import settle_gcra, settle_log, settle_quota, settle_window
from .base import Backend, LimitSpec, Outcome


def _now_us() -> int:
    return time.time_ns() // 1000


def _expiry(spec: LimitSpec, state: Any, now: int) -> int:
    """When a written state stops mattering, as the script's PX says: a GCRA TAT; the log's
    newest entry (now) plus the period; the weighted window's start plus two periods; a
    quota's period end."""
    if spec.algorithm == QUOTA:
        bounds = spec.calendar.bounds_for(now)
        return int(bounds[2] if now < bounds[2] else bounds[3])
    if spec.algorithm == GCRA:
        return int(state)
    if spec.algorithm == SLIDING_LOG:
        return now + spec.period
    return int(state[0]) + 2 * spec.period


class MemoryBackend(Backend):
    """The script's algorithms (``algorithm.composite``) over a dict of key -> (expiry,
    state); keys vanish when their state stops mattering, as in Redis."""

    def __init__(self, clock: Callable[[], int] = _now_us, max_keys: int = 100_000) -> None:
        self.clock = clock
        self.max_keys = max_keys
        self._tats: dict[str, tuple[int, Any]] = {}
        self._lock = threading.Lock()

    def evaluate(self, specs: Sequence[LimitSpec], cost: int, max_wait: int = 0) -> Outcome:
        return self._decide(specs, cost, None, max_wait)

    def take(self, specs: Sequence[LimitSpec], most: int, least: int) -> Outcome:
        return self._decide(specs, most, least)

    def _decide(self, specs: Sequence[LimitSpec], cost: int, least: int | None, max_wait: int = 0) -> Outcome:
        with self._lock:
            now = self.clock()
            states = [self._get(spec.key, now) for spec in specs]
            limits = [(s.algorithm, s.calendar.bounds_for(now) if s.algorithm == QUOTA else
                       s.period if s.algorithm else s.interval, s.burst, s.enforce) for s in specs]
            result = composite(states, now, limits, cost, least, max_wait)
            for spec, state in zip(specs, result.writes):
                if state is not None:
                    self._tats[spec.key] = (_expiry(spec, state, now), state)
            if len(self._tats) > self.max_keys:
                self._evict(now)
        granted = None if least is None else result.cost if result.enforced == ALLOWED else 0
        return Outcome(result.enforced, result.would, result.retry_after, result.binding, now,
                       result.remaining, result.reset_after, granted, result.waited)

    def clear(self) -> None:
        """Forget every key (``reset.forget_process_state``)."""
        with self._lock:
            self._tats.clear()

    def settle(self, specs: Sequence[LimitSpec], delta: int, at: int) -> int:
        with self._lock:
            now = self.clock()
            for spec in specs:
                state = self._get(spec.key, now)
                new: Any
                if spec.algorithm == QUOTA:
                    new = settle_quota(state, now, at, spec.calendar.bounds_for(now), spec.burst, delta)
                    if new is None:
                        continue
                elif spec.algorithm == GCRA:
                    new = settle_gcra(state, now, spec.interval, spec.burst, delta)
                elif spec.algorithm == SLIDING_LOG:
                    new = settle_log(state, now, spec.period, spec.burst, delta)
                else:
                    new = settle_window(state, now, spec.period, spec.burst, delta)
                if new is None:
                    self._tats.pop(spec.key, None)
                else:
                    self._tats[spec.key] = (_expiry(spec, new, now), new)
        return now

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        with self._lock:
            now = self.clock()
            states = [self._get(key, now) for key in keys]
        return [state if isinstance(state, int) else None for state in states]

    def read_states(self, specs: Sequence[LimitSpec]) -> list[Any]:
        with self._lock:
            now = self.clock()
            return [self._get(spec.key, now) for spec in specs]

    def _get(self, key: str, now: int) -> Any:
        found = self._tats.get(key)
        if found is None:
            return None
        if found[0] <= now:
            del self._tats[key]
            return None
        return found[1]

    def _evict(self, now: int) -> None:
        # Drop rested keys first; if still too many, keep the half furthest from
        # resting, so what is forgotten is the least recorded consumption.
        self._tats = {k: v for k, v in self._tats.items() if v[0] > now}
        if len(self._tats) > self.max_keys:
            keep = sorted(self._tats.items(), key=lambda kv: kv[1][0])[-self.max_keys // 2:]
            self._tats = dict(keep)
