"""An in-process backend with the Lua script's semantics (tests, the local fallback)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from ..algorithm import ALLOWED, gcra_composite
from .base import Backend, LimitSpec, Outcome


def _now_us() -> int:
    return time.time_ns() // 1000


class MemoryBackend(Backend):
    """GCRA over a dict of key -> TAT; keys vanish when their TAT passes, as in Redis."""

    def __init__(self, clock: Callable[[], int] = _now_us, max_keys: int = 100_000) -> None:
        self.clock = clock
        self.max_keys = max_keys
        self._tats: dict[str, int] = {}
        self._lock = threading.Lock()

    def evaluate(self, specs: Sequence[LimitSpec], cost: int) -> Outcome:
        return self._decide(specs, cost, None)

    def take(self, specs: Sequence[LimitSpec], most: int, least: int) -> Outcome:
        return self._decide(specs, most, least)

    def _decide(self, specs: Sequence[LimitSpec], cost: int, least: int | None) -> Outcome:
        with self._lock:
            now = self.clock()
            tats = [self._get(spec.key, now) for spec in specs]
            result = gcra_composite(tats, now, [(s.interval, s.burst, s.enforce) for s in specs], cost, least)
            for spec, tat in zip(specs, result.writes):
                if tat is not None:
                    self._tats[spec.key] = tat
            if len(self._tats) > self.max_keys:
                self._evict(now)
        granted = None if least is None else result.cost if result.enforced == ALLOWED else 0
        return Outcome(result.enforced, result.would, result.retry_after, result.binding, now,
                       result.remaining, result.reset_after, granted)

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        with self._lock:
            now = self.clock()
            return [self._get(key, now) for key in keys]

    def _get(self, key: str, now: int) -> int | None:
        tat = self._tats.get(key)
        if tat is not None and tat <= now:
            del self._tats[key]
            return None
        return tat

    def _evict(self, now: int) -> None:
        # Drop rested keys first; if still too many, keep the half furthest from
        # resting, so what is forgotten is the least recorded consumption.
        self._tats = {k: v for k, v in self._tats.items() if v > now}
        if len(self._tats) > self.max_keys:
            keep = sorted(self._tats.items(), key=lambda kv: kv[1])[-self.max_keys // 2:]
            self._tats = dict(keep)
