"""One key's lease in one process, and the lease counters. Memory only, no store calls.

A key holds at most two tranches of leased units, each with its own expiry: the units of
the last refill, and those of a prefetch that arrived while they were still held (a
later prefetch joins the second tranche and keeps its earlier expiry: never used later
than ``ttl`` after it was counted). Two tranches in slots instead of a list of chunks:
spending a unit is a subtraction, with no object made or dropped.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..algorithm import ALLOWED
from .base import LimitSpec, Outcome, Served

__all__ = ["Ahead", "Held", "KeyLease", "LeaseStats", "Served", "admitted"]

Held = tuple[int, float, int, float]  # the units of ``take_all``: (first, its expiry, second, its expiry)
NOTHING: Held = (0, 0.0, 0, 0.0)
_new = tuple.__new__


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


class Ahead:
    """A prefetch sent ahead (``LeasingBackend._send_ahead``): when, and ``collect``, which
    reads its reply from any thread (None until it is sent)."""

    __slots__ = ("collect", "sent")

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.collect: Callable[[], None] | None = None


class KeyLease:
    """One hot key's lease. Every method but ``outcome`` is called with ``lock`` held.

    ``held`` is ``first + second``; ``expires`` is the first tranche's expiry (the one
    that runs out first), so the local path checks two numbers."""

    __slots__ = ("ahead", "ahead_until", "capacity", "denied_need", "denied_until", "expires", "first", "held",
                 "interval", "local", "lock", "queued", "refilling", "rest", "second", "second_expires", "seen_at",
                 "settled", "spec", "store_now")

    def __init__(self, spec: LimitSpec) -> None:
        self.lock = threading.Lock()
        self.held = self.first = self.second = 0
        self.expires = self.second_expires = 0.0
        self.refilling = False  # a refill or prefetch is claimed (queued or in flight)
        self.queued = False  # the claim is a prefetch not started yet (LeasingBackend._begin_prefetch)
        self.ahead_until = 0.0  # until then a prefetch is sent ahead by the request's thread (LeasingBackend._serve)
        self.ahead: Ahead | None = None  # the claim is a prefetch sent ahead
        self.settled = threading.Event()  # set when it ends
        self.set_spec(spec)
        self.denied_need = 0
        self.rest = 0  # us until the key was fully rested, at our last call for it
        self.store_now = 0  # the store clock (us) at that call, and our clock then
        self.seen_at = 0.0
        self.local = 0  # decisions served from memory (LeasingBackend.stats adds them up)

    def set_spec(self, spec: LimitSpec) -> None:
        """The key's limit (anew when an override changes its rate or burst)."""
        self.spec, self.interval, self.capacity = spec, spec.interval, spec.interval * spec.burst
        self.denied_until = 0.0  # a refill of `denied_need` units was denied until then

    def claim(self, queued: bool = False) -> None:
        """Claim the key's refill: a call on this thread, or (``queued``) a prefetch that a
        request running dry before it starts takes over (``LeasingBackend._serve``)."""
        self.refilling, self.queued = True, queued
        self.settled.clear()

    def settle(self) -> None:
        self.refilling = False
        self.settled.set()

    def add(self, count: int, expires: float) -> None:
        if count <= 0:
            return
        if not self.first:
            self.first, self.expires = count, expires
        elif not self.second:
            self.second, self.second_expires = count, expires
        else:  # a third tranche joins the second, with the second's (earlier) expiry
            self.second += count
        self.held += count

    def take_all(self) -> Held:
        own = (self.first, self.expires, self.second, self.second_expires)
        self.held = self.first = self.second = 0
        return own

    def restore(self, own: Held) -> None:
        """Put back units taken with ``take_all``, with their own expiries (before any
        added since, which expire later)."""
        first, expires, second, second_expires = own
        if not first + second:
            return
        later = self.first + self.second, self.expires if self.first else self.second_expires
        self.held = self.first = self.second = 0
        self.add(first, expires)
        self.add(second, second_expires)
        self.add(*later)

    def spend(self, count: int) -> None:
        self.held -= count
        if count < self.first:
            self.first -= count
        else:
            self.first, self.expires = self.second - (count - self.first), self.second_expires
            self.second = 0

    def expire(self, now: float) -> int:
        """Drop expired units; return how many (they are stranded)."""
        stranded = 0
        if self.first and self.expires <= now:
            stranded, self.first, self.expires, self.second = self.first, self.second, self.second_expires, 0
            if self.first and self.expires <= now:
                stranded, self.first = stranded + self.first, 0
            self.held -= stranded
        return stranded

    def denies(self, now: float, cost: int) -> bool:
        """True while a remembered denial covers ``cost``: others only consume and leases
        never hand units back, so the store cannot free them before its retry-after."""
        return now + 1e-6 < self.denied_until and cost - self.held >= self.denied_need

    def observe(self, outcome: Outcome, now: float) -> None:
        self.rest, self.store_now, self.seen_at = outcome.reset_after[0], outcome.now, now

    def outcome(self, now: float, status: int = ALLOWED) -> Outcome:
        """An outcome from memory: the store's state as of our last call for the key,
        aged by our own clock (no one else's use is known), plus what we hold."""
        aged = round((now - self.seen_at) * 1e6)
        rested_in = self.rest - aged
        if rested_in < 0:  # a TAT in the past is a rested key
            rested_in = 0
        remaining = (self.capacity - rested_in) // self.interval
        if remaining < 0:
            remaining = 0
        store_now = self.store_now + aged
        if status == ALLOWED:
            return admitted((remaining + self.held, rested_in, store_now))
        retry = max(1, round((self.denied_until - now) * 1e6))
        return Outcome(status, status, retry, 0, store_now, (remaining + self.held,), (rested_in,))


def admitted(served: Served) -> Outcome:
    """The ``Outcome`` of an admission served from a lease (``KeyLease.outcome``, ``LeasingBackend.serve``)."""
    remaining, rested_in, store_now = served
    # tuple.__new__ with every field: the named tuple's __new__ is one more frame
    return _new(Outcome, (ALLOWED, ALLOWED, 0, None, store_now, (remaining,), (rested_in,), None, 0, None))


def counted(counter: itertools.count[int]) -> int:
    """How often ``next`` was called on ``counter``, an ``itertools.count()`` from 0 (read
    from its repr, ``count(N)``: the one way to read it that no Python version deprecates)."""
    return int(repr(counter)[6:-1])


def held_units(own: Held) -> int:
    return own[0] + own[2]
