"""Load shedding: ``LoadSheddingMiddleware`` caps the requests in flight in this process.

Not a rate limit: a request over the cap is answered 503 with ``Retry-After`` whoever sent
it, because the process is overloaded, not because a caller used up an allowance. Nothing
here touches Redis, the rate limiter or its audit trail; the counters are its own
(``stats()``, and Prometheus when ``prometheus_client`` is installed).

The cap is ``DJANGO_GCRA['SHEDDING']['max_in_flight']``; with ``adaptive`` it is the
ceiling of ``GradientLimit``, Envoy's adaptive-concurrency gradient controller
(docs/howto/shedding.md), which lowers the limit when latency rises above the measured
minimum. ``Shedder`` is the one controller per process that the sync and async branches
of the middleware share; it and the limits are pure (an injected clock and random source).
A slot is taken when a request arrives and released when its response is closed, so a
streamed body holds it until the last chunk is sent or the stream is closed.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from .conf import SheddingSettings, get_settings, on_change

__all__ = ["FixedLimit", "GradientLimit", "LoadSheddingMiddleware", "Shedder", "SheddingStats", "Slot",
           "get_shedder", "overloaded_response", "stats"]

MAX_SAMPLES = 4096  # latency samples kept per window: a p50 of the first 4096 is p50 enough
LOG_INTERVAL = 10.0  # seconds between the log lines that count shed requests

logger = logging.getLogger("django_gcra")


class Limit(Protocol):
    limit: int

    def tick(self, now: float) -> None: ...

    def on_sample(self, started: float, rtt: float, now: float) -> None: ...


class FixedLimit:
    """A cap that never moves."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def tick(self, now: float) -> None:
        pass

    def on_sample(self, started: float, rtt: float, now: float) -> None:
        pass


class GradientLimit:
    """Envoy's adaptive-concurrency gradient controller, driven by request completions.

    - minRTT: at start and every ``min_rtt_interval`` seconds (plus up to ``jitter`` of
      it), the limit is pinned to ``min_limit`` until ``min_rtt_samples`` requests that
      started in that window complete; minRTT is their ``percentile``. The limit then
      returns to its value before the window.
    - Every ``sample_interval`` seconds, sampleRTT is the ``percentile`` of the latencies
      completed in the interval, and
      ``gradient = clamp((minRTT * (1 + buffer)) / sampleRTT, 0.5, 2.0)``,
      ``limit = limit * gradient + sqrt(limit * gradient)``, within ``[min_limit, max_limit]``.
    - Five consecutive updates at ``min_limit`` start a new minRTT measurement (the old one
      is probably too low, e.g. a dependency became slower for good).

    Envoy runs the windows on timers; here they close on the next admission or completion
    after they are due, which changes nothing while there is traffic.
    """

    def __init__(self, *, max_limit: int, min_limit: int = 3, sample_interval: float = 0.1,
                 min_rtt_interval: float = 60.0, min_rtt_samples: int = 50, buffer: float = 0.25,
                 jitter: float = 0.15, percentile: float = 0.5, now: float = 0.0,
                 rand: Callable[[], float] = random.random) -> None:
        self.max_limit, self.min_limit = max_limit, min(min_limit, max_limit)
        self.sample_interval, self.min_rtt_interval = sample_interval, min_rtt_interval
        self.min_rtt_samples, self.buffer, self.jitter = min_rtt_samples, buffer, jitter
        self.percentile, self.rand = percentile, rand
        self.limit = self.min_limit
        self.min_rtt: float | None = None
        self.sample_rtt: float | None = None
        self.measuring = False  # in a minRTT window
        self._samples: list[float] = []
        self._deferred = self.min_limit  # the limit to return to after a minRTT window
        self._at_floor = 0  # consecutive updates that left the limit at min_limit
        self._epoch = now
        self._window_end = now + sample_interval
        self._next_min_rtt = now
        self._enter_min_rtt_window(now)

    def tick(self, now: float) -> None:
        if self.measuring:
            return
        if now >= self._next_min_rtt:
            self._enter_min_rtt_window(now)
        elif now >= self._window_end:
            self._close_sample_window(now)

    def on_sample(self, started: float, rtt: float, now: float) -> None:
        self.tick(now)  # a window that was due closes before this sample, which is the next one's
        if started < self._epoch:  # started before this minRTT window: not a sample of it
            return
        if len(self._samples) < MAX_SAMPLES:
            self._samples.append(rtt)
        if self.measuring and len(self._samples) >= self.min_rtt_samples:
            self.min_rtt = self._aggregate()
            self._set_limit(self._deferred)
            self.measuring = False
            self._next_min_rtt = now + self.min_rtt_interval * (1 + self.jitter * self.rand())
            self._window_end = now + self.sample_interval

    def _enter_min_rtt_window(self, now: float) -> None:
        self._deferred = self.limit
        self.measuring = True
        self._set_limit(self.min_limit)
        self._samples.clear()  # samples from before the window may not show the minimum
        self._epoch = now

    def _close_sample_window(self, now: float) -> None:
        self._window_end = now + self.sample_interval
        if not self._samples or not self.min_rtt:
            return
        self.sample_rtt = self._aggregate()
        self._set_limit(self.next_limit(self.limit, self.min_rtt, self.sample_rtt))
        if self._at_floor >= 5:
            self._enter_min_rtt_window(now)

    def next_limit(self, limit: int, min_rtt: float, sample_rtt: float) -> int:
        """Envoy's ``calculateNewLimit``: the gradient, the square-root headroom, the bounds."""
        gradient = max(0.5, min(2.0, min_rtt * (1 + self.buffer) / sample_rtt)) if sample_rtt > 0 else 2.0
        scaled = limit * gradient
        return max(self.min_limit, min(self.max_limit, int(scaled + math.sqrt(scaled))))

    def _set_limit(self, new: int) -> None:
        floor = self.min_limit
        self._at_floor = self._at_floor + 1 if not self.measuring and self.limit == floor and new == floor else 0
        self.limit = new

    def _aggregate(self) -> float:
        ordered = sorted(self._samples)
        self._samples.clear()
        return ordered[min(len(ordered) - 1, int(self.percentile * len(ordered)))]


@dataclass(frozen=True)
class SheddingStats:
    admitted: int  # requests let in (exempt paths not counted)
    shed: int  # requests answered 503
    in_flight: int
    limit: int  # the cap now (max_in_flight unless adaptive)
    min_rtt: float | None  # seconds; adaptive only
    sample_rtt: float | None


class Shedder:
    """One process's cap: thread-safe (one lock, never held across I/O or an ``await``)."""

    def __init__(self, limit: Limit, clock: Callable[[], float] = time.monotonic) -> None:
        self.algorithm, self.clock = limit, clock
        self.lock = threading.Lock()
        self.in_flight = self.admitted = self.shed = 0
        self._logged_shed, self._logged_at = 0, -math.inf

    def try_acquire(self) -> Slot | None:
        """A slot, or None when the process is at its limit (the request is shed)."""
        now = self.clock()
        with self.lock:
            self.algorithm.tick(now)
            if self.in_flight >= self.algorithm.limit:
                self.shed += 1
                if now - self._logged_at >= LOG_INTERVAL:
                    self._log(now)
                return None
            self.in_flight += 1
            self.admitted += 1
        return Slot(self, now)

    def _log(self, now: float) -> None:
        # One line per LOG_INTERVAL, not one per request: an overload must not also flood the logs.
        logger.warning("django_gcra: load shedding answered %d request(s) 503 (limit %d, %d in flight)",
                       self.shed - self._logged_shed, self.algorithm.limit, self.in_flight)
        self._logged_shed, self._logged_at = self.shed, now

    def stats(self) -> SheddingStats:
        with self.lock:
            return SheddingStats(self.admitted, self.shed, self.in_flight, self.algorithm.limit,
                                 getattr(self.algorithm, "min_rtt", None), getattr(self.algorithm, "sample_rtt", None))


class Slot:
    """One admitted request. ``finish()`` records its latency (once); ``release()`` frees
    the slot (once, from any thread); ``cancel()`` frees it without a latency sample."""

    __slots__ = ("finished", "released", "shedder", "started")

    def __init__(self, shedder: Shedder, started: float) -> None:
        self.shedder, self.started = shedder, started
        self.finished = self.released = False

    def finish(self) -> None:
        shedder = self.shedder
        now = shedder.clock()
        with shedder.lock:
            if not self.finished and not self.released:
                self.finished = True
                shedder.algorithm.on_sample(self.started, now - self.started, now)

    def release(self) -> None:
        self.finish()
        self.cancel()

    def cancel(self) -> None:
        with self.shedder.lock:
            if not self.released:
                self.released = True
                self.shedder.in_flight -= 1


_shedder: Shedder | None = None
_build_lock = threading.Lock()


def build_shedder(config: SheddingSettings, clock: Callable[[], float] = time.monotonic) -> Shedder:
    limit: Limit = FixedLimit(config.max_in_flight)
    if config.adaptive:
        limit = GradientLimit(max_limit=config.max_in_flight, min_limit=config.min_in_flight,
                              sample_interval=config.sample_interval, min_rtt_interval=config.min_rtt_interval,
                              min_rtt_samples=config.min_rtt_samples, buffer=config.buffer, jitter=config.jitter,
                              now=clock())
    return Shedder(limit, clock)


def get_shedder() -> Shedder:
    """This process's shedder, built from the settings on first use (after a fork)."""
    global _shedder
    shedder = _shedder
    if shedder is None:
        with _build_lock:
            shedder = _shedder
            if shedder is None:
                shedder = _shedder = build_shedder(get_settings().shedding)
    return shedder


@on_change
def _forget() -> None:
    # Slots already taken keep their own shedder and release into it.
    global _shedder
    _shedder = None


def stats() -> SheddingStats:
    """This process's shedding counters."""
    return get_shedder().stats()


def overloaded_response(retry_after: int) -> HttpResponse:
    """503 with ``Retry-After`` and a JSON body in the rate limiter's shape."""
    body = {"error": "overloaded", "message": f"The server is overloaded; retry in {retry_after} s.",
            "retry_after_seconds": retry_after}
    response = HttpResponse(json.dumps(body), status=503, content_type="application/json")
    response["Retry-After"] = str(retry_after)
    response["Cache-Control"] = "no-store"
    # Django logs every 5xx to django.request at ERROR (AdminEmailHandler builds a report
    # for each, and mails ADMINS): shed requests are counted and logged by the shedder
    # instead, once per LOG_INTERVAL. This is the mark Django's log_response sets itself.
    response._has_been_logged = True
    return response


try:
    import prometheus_client
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    prometheus_client = None  # type: ignore[assignment]


def _metric(kind: Any, name: str, doc: str) -> Any:
    try:
        return kind(name, doc)
    except ValueError:  # a second import of this module: the first one's metrics stay exported
        return kind(name, doc, registry=None)


if prometheus_client is not None:
    SHED = _metric(prometheus_client.Counter, "django_gcra_shed_total",
                   "Requests answered 503 by LoadSheddingMiddleware (this process was at its limit).")
    ADMITTED = _metric(prometheus_client.Counter, "django_gcra_shed_admitted_total",
                       "Requests admitted by LoadSheddingMiddleware (exempt paths not counted).")
    LIMIT = _metric(prometheus_client.Gauge, "django_gcra_shed_limit",
                    "LoadSheddingMiddleware's current limit on requests in flight.")
    IN_FLIGHT = _metric(prometheus_client.Gauge, "django_gcra_shed_in_flight",
                        "Requests in flight under LoadSheddingMiddleware.")
    LIMIT.set_function(lambda: _shedder.algorithm.limit if _shedder is not None else 0)
    IN_FLIGHT.set_function(lambda: _shedder.in_flight if _shedder is not None else 0)


def _count(slot: Slot | None) -> None:
    if prometheus_client is not None:
        (SHED if slot is None else ADMITTED).inc()


_EXEMPT = object()


def _admit(request: HttpRequest) -> Slot | object | None:
    """A slot, ``_EXEMPT`` for an exempt path, or None to shed."""
    config = get_settings().shedding
    path = request.path_info
    if any(pattern.search(path) for pattern in config.exempt):
        return _EXEMPT
    slot = get_shedder().try_acquire()
    _count(slot)
    return slot


def _hold(response: HttpResponseBase, slot: Slot) -> HttpResponseBase:
    """Record the latency now; free the slot when the server closes the response (after
    the last chunk of a streamed body), as Django closes a FileResponse's file."""
    slot.finish()
    response._resource_closers.append(slot.release)
    return response


class LoadSheddingMiddleware:
    """Put it first in MIDDLEWARE, so a shed request costs no session or database work."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        slot = _admit(request)
        if slot is _EXEMPT:
            return self.get_response(request)
        if not isinstance(slot, Slot):
            return overloaded_response(get_settings().shedding.retry_after)
        try:
            response = self.get_response(request)
        except BaseException:
            slot.cancel()
            raise
        return _hold(response, slot)

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        slot = _admit(request)
        if slot is _EXEMPT:
            return await self.get_response(request)
        if not isinstance(slot, Slot):
            return overloaded_response(get_settings().shedding.retry_after)
        try:
            response = await self.get_response(request)
        except BaseException:  # the client went away (CancelledError) or the view raised
            slot.cancel()
            raise
        return _hold(response, slot)
