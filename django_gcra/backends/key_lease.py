"""One key's lease in one process, and the lease counters. Memory only, no store calls."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..algorithm import ALLOWED
from .base import LimitSpec, Outcome

__all__ = ["Chunk", "KeyLease", "LeaseStats"]


@dataclass
class LeaseStats:
    """Counters of one leased policy in this process (read with ``leases.lease_stats()``)."""

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
class Chunk:
    """Units taken by one store call, usable until ``expires`` (monotonic seconds)."""

    units: int
    expires: float


def units(chunks: list[Chunk]) -> int:
    return sum(c.units for c in chunks)


@dataclass
class KeyLease:
    """One key's lease. Every method but ``outcome`` is called with ``lock`` held."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    chunks: list[Chunk] = field(default_factory=list)  # oldest first, so the first expires first
    held: int = 0  # the units in `chunks`
    refilling: bool = False  # a refill or prefetch call is in flight
    settled: threading.Event = field(default_factory=threading.Event)  # set when it ends
    spec: LimitSpec | None = None
    denied_until: float = 0.0  # a refill of `denied_need` units was denied until then
    denied_need: int = 0
    store_tat: int = 0  # the key's TAT (us) after our last call for it
    store_now: int = 0  # the store clock (us) at that call, and our clock then
    seen_at: float = 0.0

    def claim(self) -> None:
        self.refilling = True
        self.settled.clear()

    def settle(self) -> None:
        self.refilling = False
        self.settled.set()

    def add(self, count: int, expires: float) -> None:
        if count > 0:
            self.chunks.append(Chunk(count, expires))
            self.held += count

    def take_all(self) -> list[Chunk]:
        own, self.chunks, self.held = self.chunks, [], 0
        return own

    def restore(self, own: list[Chunk]) -> None:
        """Put back units taken with ``take_all``, with their own expiries."""
        self.chunks[:0] = own
        self.held += units(own)

    def spend(self, count: int) -> None:
        self.held -= count
        while count:
            chunk = self.chunks[0]
            used = min(count, chunk.units)
            chunk.units -= used
            count -= used
            if not chunk.units:
                self.chunks.pop(0)

    def expire(self, now: float) -> int:
        """Drop expired units; return how many (they are stranded)."""
        if not self.chunks or self.chunks[0].expires > now:
            return 0
        stranded = units([c for c in self.chunks if c.expires <= now])
        self.chunks = [c for c in self.chunks if c.expires > now]
        self.held -= stranded
        return stranded

    def denies(self, now: float, cost: int) -> bool:
        """True while a remembered denial covers ``cost``: others only consume and leases
        never hand units back, so the store cannot free them before its retry-after."""
        return now + 1e-6 < self.denied_until and cost - self.held >= self.denied_need

    def observe(self, outcome: Outcome, now: float) -> None:
        self.store_tat = outcome.now + outcome.reset_after[0]
        self.store_now, self.seen_at = outcome.now, now

    def outcome(self, now: float, status: int = ALLOWED) -> Outcome:
        """An outcome from memory: the store's state as of our last call for the key,
        aged by our own clock (no one else's use is known), plus what we hold."""
        assert self.spec is not None  # set by the first decision on the key
        interval, burst = self.spec.interval, self.spec.burst
        store_now = self.store_now + round((now - self.seen_at) * 1_000_000)
        rested_in = max(0, self.store_tat - store_now)  # a TAT in the past is a rested key
        remaining = max(0, (interval * burst - rested_in) // interval)
        retry, binding = (0, None) if status == ALLOWED else (max(1, round((self.denied_until - now) * 1e6)), 0)
        return Outcome(status, status, retry, binding, store_now, (remaining + self.held,), (rested_in,))
