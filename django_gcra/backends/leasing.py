"""``LeasingBackend``: serve most decisions of a hot key from a local lease.

A policy with ``"lease": {"size": L, "ttl": s}`` is decided by a ``LeasingBackend``
wrapped around the store (see ``django_gcra.leases``). A request its process's lease for the key cannot cover takes
up to L units from the global GCRA in ONE script call (as many as are free near the
quota edge, at least the request's own cost), spends its own cost and keeps the rest
for ``ttl`` seconds. Every leased unit is counted by the script when it is taken, so
a lease never admits more than the global limit; units unused when the lease expires
are stranded (lost to everyone), at most L per process and key.

``Decision.remaining`` from a leased key is the store's remaining as of this process's
last call for the key, aged by this process's clock, plus the units this process still
holds: exact for one process, optimistic by what other processes took since that call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from ..algorithm import ALLOWED, DENIED
from ..policy import Lease
from .base import Backend, BackendError, LimitSpec, Outcome

__all__ = ["LeasingBackend", "LeaseStats"]

logger = logging.getLogger("django_gcra")
REFILL_WAIT = 0.05  # seconds a thread waits for another's refill of the same key before its own call


@dataclass
class LeaseStats:
    """Counters of one leased policy in this process (read with ``lease_stats()``)."""

    decisions: int = 0  # decisions that came through the lease wrapper
    local: int = 0  # served from memory, no store call
    store_calls: int = 0  # script calls made: refills, prefetches, direct decisions
    leased_units: int = 0  # units taken from the store by refills and prefetches
    stranded_units: int = 0  # leased units that expired or were evicted unused
    held_units: int = 0  # units held right now (a gauge: stranded if no traffic comes)

    @property
    def calls_saved(self) -> int:
        """Store calls avoided compared with one call per decision."""
        return self.decisions - self.store_calls


@dataclass
class _Chunk:
    units: int
    expires: float  # monotonic seconds


@dataclass
class _KeyLease:
    """One key's lease in this process. Fields change only under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    chunks: list[_Chunk] = field(default_factory=list)  # oldest first
    held: int = 0  # the units in `chunks`
    refilling: bool = False  # a refill or prefetch call is in flight
    settled: threading.Event = field(default_factory=threading.Event)  # set when it ends
    spec: LimitSpec | None = None
    denied_until: float = 0.0  # a refill of `denied_need` units was denied until then
    denied_need: int = 0
    store_tat: int = 0  # the key's TAT (us) after our last call for it
    store_now: int = 0  # the store clock (us) at that call, and our clock then
    seen_at: float = 0.0


def _units(chunks: list[_Chunk]) -> int:
    return sum(c.units for c in chunks)


class LeasingBackend(Backend):
    """A ``Backend`` serving one leased policy's single-limit decisions from local leases.

    Anything a lease cannot answer honestly goes straight to ``inner``: shadow limits,
    several limits, peeks (cost 0), and costs above the burst.
    """

    def __init__(self, inner: Backend, lease: Lease, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic, prefetch: Callable[[Callable[[], None]], Any] | None = None):
        self.inner, self.lease, self.max_keys, self.clock = inner, lease, max_keys, clock
        self.prefetch = prefetch or _submit
        self._stats = LeaseStats()
        self._stats_lock = threading.Lock()
        self._keys: OrderedDict[str, _KeyLease] = OrderedDict()
        self._keys_lock = threading.Lock()
        self._next_sweep = 0.0

    # The request path -------------------------------------------------------------

    def evaluate(self, specs: Sequence[LimitSpec], cost: int) -> Outcome:
        if not self._leasable(specs, cost):
            return self._direct(None, self.inner.evaluate(specs, cost))
        state = self._state(specs[0].key)
        served, own = self._serve(state, specs[0], cost)
        if served is None and own is None and state.settled.wait(REFILL_WAIT):
            served, own = self._serve(state, specs[0], cost)  # another thread refilled: try again
        if served is not None:
            return served
        if own is None:  # another call is still refilling this key: decide this one directly
            return self._direct(state, self.inner.evaluate(specs, cost))
        need, started = cost - _units(own), self.clock()
        try:
            outcome = self.inner.take(specs, max(self.lease.size, need), need)
        except BaseException:
            self._restore(state, own)
            raise
        return self._refilled(state, need, own, started, outcome)

    async def aevaluate(self, specs: Sequence[LimitSpec], cost: int) -> Outcome:
        if not self._leasable(specs, cost):
            return self._direct(None, await self.inner.aevaluate(specs, cost))
        state = self._state(specs[0].key)
        served, own = self._serve(state, specs[0], cost)  # never awaits while holding a lock
        if served is not None:
            return served
        if own is None:  # waiting for the refill would block the loop: decide this one directly
            return self._direct(state, await self.inner.aevaluate(specs, cost))
        need, started = cost - _units(own), self.clock()
        try:
            outcome = await self.inner.atake(specs, max(self.lease.size, need), need)
        except BaseException:
            self._restore(state, own)
            raise
        return self._refilled(state, need, own, started, outcome)

    def _leasable(self, specs: Sequence[LimitSpec], cost: int) -> bool:
        return len(specs) == 1 and specs[0].enforce and 0 < cost <= specs[0].burst

    def _serve(self, state: _KeyLease, spec: LimitSpec, cost: int) -> tuple[Outcome | None, list[_Chunk] | None]:
        """Serve from memory when the lease covers ``cost``. Otherwise, unless a refill
        is in flight ((None, None): decide directly), claim the refill and the units
        still held, which the refill spends first: (None, chunks)."""
        now = self.clock()
        with state.lock:
            if state.chunks and state.chunks[0].expires <= now:  # the oldest expires first
                self._expire(state, now)
            if spec != state.spec:  # a new key, or an override changed its rate or burst
                state.spec, state.denied_until = spec, 0.0
            if state.held >= cost:
                self._spend(state, cost)
                outcome = self._local(state, now)
                with self._stats_lock:  # the hot path: no keyword plumbing
                    self._stats.decisions += 1
                    self._stats.local += 1
                    self._stats.held_units -= cost
                if self.lease.low_water and state.held <= self.lease.low_water and not state.refilling:
                    self._claim(state)
                    self.prefetch(lambda: self._prefetch(state))
                return outcome, None
            if now + 1e-6 < state.denied_until and cost - state.held >= state.denied_need:
                # Others only consume and leases never hand units back, so the store
                # cannot free this many units before the retry-after it gave us.
                self._count(decisions=1, local=1)
                return self._local(state, now, DENIED), None
            if state.refilling:
                return None, None
            self._claim(state)
            own, state.chunks, state.held = state.chunks, [], 0
            self._count(held_units=-_units(own))
            return None, own

    def _refilled(self, state: _KeyLease, need: int, own: list[_Chunk], started: float, outcome: Outcome) -> Outcome:
        granted = outcome.granted or 0
        with state.lock:
            self._settle(state)
            self._observe(state, outcome)
            if not outcome.allowed:
                self._restore_locked(state, own)
                if outcome.retry_after is not None:
                    state.denied_until, state.denied_need = started + outcome.retry_after / 1e6, need
            elif granted > need:  # the units were counted after `started`: expire from then
                state.chunks.append(_Chunk(granted - need, started + self.lease.ttl))
                state.held += granted - need
                self._count(held_units=granted - need)
            held = state.held
        self._count(decisions=1, store_calls=1, leased_units=granted)
        return replace(outcome, remaining=(outcome.remaining[0] + held,))

    def _restore(self, state: _KeyLease, own: list[_Chunk]) -> None:
        """The refill call failed: the store's failure policy decides this request."""
        with state.lock:
            self._settle(state)
            self._restore_locked(state, own)
        self._count(store_calls=1)

    def _restore_locked(self, state: _KeyLease, own: list[_Chunk]) -> None:
        # Keep the units claimed for the refill, with their own expiries, for smaller requests.
        state.chunks[:0] = own
        state.held += _units(own)
        self._count(held_units=_units(own))
        self._expire(state, self.clock())

    def _direct(self, state: _KeyLease | None, outcome: Outcome) -> Outcome:
        self._count(decisions=1, store_calls=1)
        if state is None:
            return outcome
        with state.lock:
            self._observe(state, outcome)
            held = state.held
        return replace(outcome, remaining=(outcome.remaining[0] + held,))

    # Background prefetch ------------------------------------------------------------

    def _prefetch(self, state: _KeyLease) -> None:
        """Top the lease up ahead of need, off the request path."""
        started, outcome = self.clock(), None
        try:
            outcome = self.inner.take([state.spec], self.lease.size, 1)
        except BackendError as exc:  # the next request that needs the store will see it too
            logger.debug("django_gcra: lease prefetch failed: %s", exc)
        granted = (outcome.granted or 0) if outcome is not None else 0
        with state.lock:
            self._settle(state)
            if outcome is not None:
                self._observe(state, outcome)
            if granted:
                state.chunks.append(_Chunk(granted, started + self.lease.ttl))
                state.held += granted
        self._count(store_calls=1, leased_units=granted, held_units=granted)

    # Bookkeeping ---------------------------------------------------------------------

    def _claim(self, state: _KeyLease) -> None:
        state.refilling = True
        state.settled.clear()

    def _settle(self, state: _KeyLease) -> None:
        state.refilling = False
        state.settled.set()

    def _spend(self, state: _KeyLease, units: int) -> None:
        state.held -= units
        while units:
            chunk = state.chunks[0]
            used = min(units, chunk.units)
            chunk.units -= used
            units -= used
            if not chunk.units:
                state.chunks.pop(0)

    def _expire(self, state: _KeyLease, now: float) -> None:
        stranded = sum(c.units for c in state.chunks if c.expires <= now)
        if stranded:
            state.chunks = [c for c in state.chunks if c.expires > now]
            state.held -= stranded
            self._count(stranded_units=stranded, held_units=-stranded)

    def _observe(self, state: _KeyLease, outcome: Outcome) -> None:
        state.store_tat = outcome.now + outcome.reset_after[0]
        state.store_now, state.seen_at = outcome.now, self.clock()

    def _local(self, state: _KeyLease, now: float, status: int = ALLOWED) -> Outcome:
        """An outcome from memory: the store's state as of our last call for the key,
        aged by our own clock (no one else's use is known), plus what we hold."""
        interval, burst = state.spec.interval, state.spec.burst
        store_now = state.store_now + round((now - state.seen_at) * 1_000_000)
        rested_in = max(0, state.store_tat - store_now)  # a TAT in the past is a rested key
        remaining = max(0, (interval * burst - rested_in) // interval)
        retry, binding = (0, None) if status == ALLOWED else (max(1, round((state.denied_until - now) * 1e6)), 0)
        return Outcome(status, status, retry, binding, store_now, (remaining + state.held,), (rested_in,))

    def _count(self, **deltas: int) -> None:
        with self._stats_lock:
            for name, delta in deltas.items():
                setattr(self._stats, name, getattr(self._stats, name) + delta)

    def stats(self) -> LeaseStats:
        with self._stats_lock:
            return replace(self._stats)

    def _state(self, key: str) -> _KeyLease:
        with self._keys_lock:
            state = self._keys.get(key)
            if state is not None:
                self._keys.move_to_end(key)
                return state
            now = self.clock()
            if len(self._keys) >= self.max_keys or now >= self._next_sweep:
                self._sweep(now)
            state = self._keys[key] = _KeyLease()
            return state

    def _sweep(self, now: float) -> None:
        """Drop idle leases (all units expired); past ``max_keys``, the least recently used."""
        self._next_sweep = now + self.lease.ttl
        for key in [k for k, s in self._keys.items() if not s.refilling and all(c.expires <= now for c in s.chunks)]:
            state = self._keys.pop(key)
            with state.lock:
                self._expire(state, now)
        while len(self._keys) >= self.max_keys:
            key, state = next(((k, s) for k, s in self._keys.items() if not s.refilling), next(iter(self._keys.items())))
            del self._keys[key]
            with state.lock:
                evicted, state.chunks, state.held = state.held, [], 0
            self._count(stranded_units=evicted, held_units=-evicted)

    def held_keys(self) -> int:
        with self._keys_lock:
            return len(self._keys)

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        return self.inner.read_tats(keys)


# One background thread runs prefetches, so a hot key rarely waits on the store.
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _submit(job: Callable[[], None]) -> None:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="django_gcra-lease")
    _executor.submit(job)
