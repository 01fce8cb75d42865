"""A circuit breaker per Redis endpoint, so a dead or slow Redis costs one timeout per
cool-down instead of one per request.

closed -> (``failures`` consecutive failures) -> open -> (``cooldown`` seconds) ->
half-open: exactly one probe call goes to the network; its success closes the circuit,
its failure opens it for another cool-down. While open (and while the probe is in
flight) every other call is refused at once: no network time at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .base import BackendError

__all__ = ["Breakers", "CircuitBreaker", "CircuitOpen"]

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


class CircuitOpen(BackendError):
    """Refused without a network call: the endpoint's circuit is open."""


@dataclass
class BreakerStats:
    opened: int = 0  # times the circuit opened
    refused: int = 0  # calls refused without touching the network
    failures: int = 0  # failed calls (all time)


class CircuitBreaker:
    """Thread-safe; shared by the sync and async paths of one process."""

    def __init__(self, endpoint: str, failures: int = 5, cooldown: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.threshold = failures
        self.cooldown = cooldown
        self.clock = clock
        self.state = CLOSED
        self.consecutive = 0
        self.opened_at = 0.0
        self.last_error = ""
        self.stats = BreakerStats()
        self._lock = threading.Lock()

    def before_call(self) -> None:
        """Raise ``CircuitOpen`` unless this call may go to the network."""
        if self.state == CLOSED:
            return  # the healthy case, without the lock (reading one attribute is atomic)
        with self._lock:
            if self.state == CLOSED:
                return
            if self.state == OPEN and self.clock() - self.opened_at >= self.cooldown:
                self.state = HALF_OPEN  # this caller is the probe; the others keep being refused
                return
            self.stats.refused += 1
        raise CircuitOpen(f"circuit open for {self.endpoint} (last error: {self.last_error})")

    def success(self) -> None:
        if self.state == CLOSED and not self.consecutive:
            return  # nothing to reset
        with self._lock:
            self.state, self.consecutive = CLOSED, 0

    def failure(self, exc: BaseException) -> None:
        with self._lock:
            self.stats.failures += 1
            self.consecutive += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:200]
            if self.state == HALF_OPEN or (self.state == CLOSED and self.consecutive >= self.threshold):
                self.state, self.opened_at = OPEN, self.clock()
                self.stats.opened += 1

    def release_probe(self) -> None:
        """The probe ended without a verdict (e.g. a script error): let another probe run."""
        with self._lock:
            if self.state == HALF_OPEN:
                self.state, self.opened_at = OPEN, self.clock() - self.cooldown

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {"endpoint": self.endpoint, "state": self.state, "consecutive_failures": self.consecutive,
                    "opened": self.stats.opened, "refused": self.stats.refused,
                    "failures": self.stats.failures, "last_error": self.last_error}


class Breakers:
    """The breakers of one engine, one per endpoint (``store.Stores``)."""

    def __init__(self) -> None:
        self.by_endpoint: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    def get(self, endpoint: str) -> CircuitBreaker | None:
        """The breaker of ``endpoint``, if one was made."""
        return self.by_endpoint.get(endpoint)

    def of(self, endpoint: str, failures: int = 5, cooldown: float = 1.0) -> CircuitBreaker:
        """The breaker of ``endpoint``, (re)configured with these thresholds."""
        breaker = self.by_endpoint.get(endpoint)
        if breaker is None:
            with self._lock:
                breaker = self.by_endpoint.setdefault(endpoint, CircuitBreaker(endpoint, failures, cooldown))
        breaker.threshold, breaker.cooldown = failures, cooldown
        return breaker

    def snapshot(self) -> list[dict[str, object]]:
        """Each breaker's state and counters (``fallback.status()["breakers"]``)."""
        return [b.snapshot() for b in list(self.by_endpoint.values())]
