"""``LeasingBackend``: serve most decisions of a hot key from a local lease.

A policy with ``"lease": {"size": L, "ttl": s}`` is decided by a ``LeasingBackend``
wrapped around the store (``django_gcra.leases`` keeps one per policy and process;
``key_lease`` holds one key's units in memory). A request its process's lease for
the key cannot cover takes up to L units from the global GCRA in ONE script call (as
many as are free near the quota edge, at least the request's own cost), spends its own
cost and keeps the rest for ``ttl`` seconds. Every leased unit is counted by the script
when it is taken, so a lease never admits more than the global limit; units unused when
the lease expires are stranded (lost to everyone), at most L per process and key.

Only keys that prove hot are leased: a key's first decisions go to the store one call
each, and the key is leased at its ``hot_after``-th store decision within one window of
``ttl`` (a key seen less often would strand most of every lease it took). The wrapper
keeps that count itself, per key, in one bounded dict (``_hot``); a lease that expires
unused makes the key cold again.

``Decision.remaining`` from a leased key is the store's remaining as of this process's
last call for the key, aged by this process's clock, plus the units this process still
holds: exact for one process, optimistic by what other processes took since that call.

The local path (a leased key whose lease covers the cost) is a dict lookup, one lock
held for a few integer operations, and one tuple of three numbers: ``decide()`` asks
``serve`` first and builds its ``Decision`` from them, with no ``Outcome`` made.

Low water (``low_water`` > 0): the request that leaves the lease at or below it queues a
prefetch, which tops the lease up off the request path (a background thread, or a task
of the event loop: ``prefetchers``). One thread deciding back to back holds the GIL, so
the prefetch's thread may not even start before the lease is spent: the request that
runs it dry then takes the refill over (one call on its own thread, as without low
water, and the prefetch makes none), and for one ``ttl`` the key's prefetches are sent
ahead instead (``_send_ahead``: written on the request thread's connection without
waiting; the reply is read by the request that runs the lease dry, by that thread's next
store call, or late by ``prefetchers``' collector). A store that cannot send ahead
refills the key on demand for that ttl.

Shaping (``max_wait``): a decision is first decided as without a wait (served from the
lease, or taking one, as usual); only if that denies, and for at most ``max_wait``, does it
go to the store once more, with ``max_wait``, which reserves its slot there (the leased
units this process still holds are too few for it; the store's reply decides).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from ..algorithm import DENIED
from .base import Backend, BackendError, LimitSpec, Outcome
from .key_lease import Ahead, Held, KeyLease, LeaseStats, Served, admitted, counted, held_units
from .prefetchers import Prefetchers

__all__ = ["HOT_AFTER", "LeaseStats", "LeasingBackend"]

logger = logging.getLogger("django_gcra")
REFILL_WAIT = 0.05  # seconds a thread waits for another's refill of the same key before its own call
# A key is leased at its HOT_AFTER-th store decision within one window of a lease ttl; before that
# (and on a key seen less often) every decision is one direct store call, and no lease
# is taken to strand. 3: a key must come back twice within ttl to earn a lease.
HOT_AFTER = 3
EVICT_FRACTION = 8  # past max_keys, the oldest 1/8 of the leases go at once (no sweep per new key)


def _may_wait(outcome: Outcome, max_wait: int) -> bool:
    """A denial the store could turn into a reservation: its retry-after within ``max_wait`` (us)."""
    return not outcome.allowed and outcome.retry_after is not None and outcome.retry_after <= max_wait


class LeasingBackend(Backend):
    """A ``Backend`` serving one leased policy's single-limit decisions from local leases.

    Anything a lease cannot answer honestly goes straight to ``inner``: shadow limits,
    several limits, peeks (cost 0), and costs above the burst; so do a cold key's
    decisions (``hot_after``).
    """

    def __init__(self, inner: Backend, size: int, ttl: float, low_water: int = 0, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic,
                 prefetch: Callable[[Callable[[], None]], object] | None = None, hot_after: int = HOT_AFTER,
                 prefetchers: Prefetchers | None = None) -> None:
        self.inner, self.max_keys, self.clock = inner, max_keys, clock
        self.size, self.ttl, self.low_water = size, ttl, low_water  # units per lease, seconds, prefetch mark
        self.hot_after = max(1, hot_after)  # a key's store decision within a window of ttl that leases it
        self.prefetchers = Prefetchers() if prefetchers is None else prefetchers  # (its engine's: lease_book)
        self.prefetch = prefetch or self.prefetchers.submit
        self._stats = LeaseStats()  # everything but the local decisions of the keys in _keys
        self._stats_lock = threading.Lock()
        # The direct decisions of keys without a lease (one store call each), counted by
        # ``next`` (one C call, atomic under the GIL) and read with ``counted``, not under
        # ``_stats_lock``.
        self.cold = itertools.count()
        self._keys: dict[str, KeyLease] = {}  # read without a lock (one dict lookup); written under _keys_lock
        self._keys_lock = threading.Lock()
        self._heat: dict[str, int] = {}  # cold key -> its store decisions in this window (_hot)
        self._heat_until = 0.0  # when the window ends (monotonic seconds)
        self._heat_lock = threading.Lock()
        self._next_sweep = 0.0

    def serve(self, specs: Sequence[LimitSpec], cost: int, in_loop: bool = False) -> Served | None:
        """``decide()``'s local path: a single-limit decision this process's lease of the
        key covers, as the lease's numbers, ``(remaining, us until the key is rested, the
        store's clock in us)``, with no ``Outcome`` made; None otherwise (then ``evaluate``
        decides it). ``in_loop``: called from a coroutine (a prefetch then runs as a task
        of the loop)."""
        if len(specs) == 1:
            spec = specs[0]
            state = self._keys.get(spec.key)
            if state is not None:
                return self._local(state, spec, cost, in_loop)
        return None

    def _local(self, state: KeyLease, spec: LimitSpec, cost: int, in_loop: bool) -> Served | None:
        """The local path: a leased key whose unexpired lease covers ``cost``, served
        with a few integer operations under the key's lock (``serve``)."""
        if (state.spec is not spec and state.spec != spec) or not 0 < cost <= state.held:
            return None
        now = self.clock()
        lock = state.lock
        lock.acquire()  # (not ``with``: its __enter__ parses arguments, this is half the cost)
        try:
            if state.expires <= now or state.held < cost:
                return None
            state.held -= cost  # KeyLease.spend, inline: the hot path
            if cost < state.first:
                state.first -= cost
            else:
                state.first, state.expires = state.second - (cost - state.first), state.second_expires
                state.second = 0
            state.local += 1
            # KeyLease.outcome(now)'s numbers, inline: the store's remaining aged by our clock, plus what we hold
            aged = round((now - state.seen_at) * 1e6)
            rested_in = state.rest - aged
            if rested_in < 0:
                rested_in = 0
            remaining = (state.capacity - rested_in) // state.interval
            served = ((remaining if remaining > 0 else 0) + state.held, rested_in, state.store_now + aged)
            if not (self.low_water and state.held <= self.low_water and not state.refilling):
                return served
            state.claim(queued=True)
        finally:
            lock.release()
        self._start_prefetch(state, in_loop, now)  # (outside the key's lock)
        return served

    def _start_prefetch(self, state: KeyLease, in_loop: bool, now: float) -> None:
        """Top ``state`` up off the request path: in a coroutine, as a task of its event
        loop (its call goes out with the loop's next batch, and no thread competes for the
        GIL); in a thread that outruns the background thread, sent ahead on its own
        connection (``ahead_until``); otherwise on the background thread (``prefetch``)."""
        if in_loop:
            if self.prefetch == self.prefetchers.submit:  # (not a prefetch of its own: tests)
                self.prefetchers.run_in_loop(self._aprefetch(state))
                return
        elif now < state.ahead_until:
            self._send_ahead(state)
            return
        self.prefetch(lambda: self._prefetch(state))

    def evaluate(self, specs: Sequence[LimitSpec], cost: int, max_wait: int = 0) -> Outcome:
        if max_wait > 0:  # shaping: the lease first; a wait is reserved at the store
            outcome = self.evaluate(specs, cost)
            if not _may_wait(outcome, max_wait):
                return outcome
            return self._direct(self._keys.get(specs[0].key), self.inner.evaluate(specs, cost, max_wait),
                                0)  # the decision was counted once already
        if len(specs) == 1:  # one dict lookup: a leased key's lease, or a cold key's heat
            spec = specs[0]
            state = self._keys.get(spec.key)
            if state is not None:
                local = self._local(state, spec, cost, False)
                if local is not None:
                    return admitted(local)
            elif self._goes_direct(spec, cost):
                return self.inner.evaluate(specs, cost)
        if not self._leasable(specs, cost):
            self._count(1, calls=1)
            return self.inner.evaluate(specs, cost)
        state = self._state(specs[0])
        served, own = self._serve(state, specs[0], cost)
        if served is None and own is None and state.settled.wait(REFILL_WAIT):
            served, own = self._serve(state, specs[0], cost)  # another thread refilled: try again
        if served is not None:
            return served
        if own is None:  # another call is still refilling this key: decide this one directly
            return self._direct(state, self.inner.evaluate(specs, cost))
        need, started = cost - held_units(own), self.clock()
        try:
            outcome = self.inner.take(specs, max(self.size, need), need)
        except BaseException:
            self._refilled(state, need, own, started, None)
            raise
        return self._refilled(state, need, own, started, outcome)  # type: ignore[return-value]

    async def aevaluate(self, specs: Sequence[LimitSpec], cost: int, max_wait: int = 0) -> Outcome:
        if max_wait > 0:
            outcome = await self.aevaluate(specs, cost)
            if not _may_wait(outcome, max_wait):
                return outcome
            return self._direct(self._keys.get(specs[0].key), await self.inner.aevaluate(specs, cost, max_wait), 0)
        if len(specs) == 1:
            spec = specs[0]
            state = self._keys.get(spec.key)
            if state is not None:
                local = self._local(state, spec, cost, True)
                if local is not None:
                    return admitted(local)
            elif self._goes_direct(spec, cost):
                return await self.inner.aevaluate(specs, cost)
        if not self._leasable(specs, cost):
            self._count(1, calls=1)
            return await self.inner.aevaluate(specs, cost)
        state = self._state(specs[0])
        served, own = self._serve(state, specs[0], cost, in_loop=True)  # never awaits while holding a lock
        if served is not None:
            return served
        if own is None:  # waiting for the refill would block the loop: decide this one directly
            return self._direct(state, await self.inner.aevaluate(specs, cost))
        need, started = cost - held_units(own), self.clock()
        try:
            outcome = await self.inner.atake(specs, max(self.size, need), need)
        except BaseException:
            self._refilled(state, need, own, started, None)
            raise
        return self._refilled(state, need, own, started, outcome)  # type: ignore[return-value]

    @staticmethod
    def _leasable(specs: Sequence[LimitSpec], cost: int) -> bool:
        return len(specs) == 1 and specs[0].enforce and 0 < cost <= specs[0].burst

    def _goes_direct(self, spec: LimitSpec, cost: int) -> bool:
        """True (and the decision counted as a store call) when a key without a lease is
        decided directly on the store: it is not leasable (shadow, a peek, a cost above
        the burst) or still cold. False when it is hot now (``_hot``): it gets a lease."""
        if spec.enforce and 0 < cost <= spec.burst and self._hot(spec.key):
            return False
        next(self.cold)  # one decision, one store call (counted without a lock: see cold)
        return True

    def _hot(self, key: str) -> bool:
        """Count a store decision of ``key``, which holds no lease: True at its
        ``hot_after``-th within one window of ``ttl``. A window starts with the first count
        after the last one ended; the dict holds at most ``max_keys`` keys (a key this rare is
        cold anyway: past that, a new window starts)."""
        if self.hot_after == 1:  # every key is hot at once
            return True
        now = self.clock()
        with self._heat_lock:
            heat = self._heat
            if now >= self._heat_until or len(heat) >= self.max_keys:
                heat.clear()
                self._heat_until = now + self.ttl
            count = heat.get(key, 0) + 1
            if count < self.hot_after:
                heat[key] = count
                return False
            heat.pop(key, None)
            return True

    def _state(self, spec: LimitSpec) -> KeyLease:
        """The key's lease, made if the key has none yet."""
        key, now = spec.key, self.clock()
        with self._keys_lock:
            state = self._keys.get(key)
            if state is None:
                if len(self._keys) >= self.max_keys or now >= self._next_sweep:
                    self._sweep(now)
                state = self._keys[key] = KeyLease(spec)
            return state

    def _serve(self, state: KeyLease, spec: LimitSpec, cost: int, in_loop: bool = False,
               collected: bool = False) -> tuple[Outcome | None, Held | None]:
        """Serve from memory when the lease covers ``cost`` (or a remembered denial does).
        Otherwise, unless a refill is in flight ((None, None): decide directly), claim the
        refill and the units still held, which the refill spends first: (None, units).
        A prefetch sent ahead is collected first (its reply read), once."""
        now = self.clock()
        prefetch, collect = False, None
        with state.lock:
            stranded = state.expire(now)
            if spec != state.spec:  # an override changed its rate or burst
                state.set_spec(spec)
            if state.held >= cost:
                state.spend(cost)
                state.local += 1
                if self.low_water and state.held <= self.low_water and not state.refilling:
                    state.claim(queued=True)
                    prefetch = True
                served = state.outcome(now)
            elif state.denies(now, cost):
                state.local += 1
                served = state.outcome(now, DENIED)
            elif state.refilling and not state.queued and (state.ahead is None or state.ahead.collect is None):
                served = None  # a call for the key is in flight (or being sent ahead)
            elif state.ahead is not None and not collected and not in_loop:
                served, collect = None, state.ahead.collect  # sent ahead: its reply is (nearly) here
            else:  # refill now, taking over a prefetch not started (or one sent ahead, in a coroutine)
                if state.queued:  # this thread outruns the background one: send ahead for a ttl
                    state.ahead_until = now + self.ttl
                state.ahead = None
                state.claim()
                own = state.take_all()
                if stranded:
                    self._count(0, stranded=stranded)
                return None, own
        if stranded:
            self._count(0, stranded=stranded)
        if collect is not None:
            collect()  # (outside the key's lock) reads the reply, which settles the prefetch
            return self._serve(state, spec, cost, in_loop, collected=True)
        if prefetch:  # (outside the key's lock)
            self._start_prefetch(state, in_loop, now)
        return served, None

    def _refilled(self, state: KeyLease, need: int, own: Held, started: float,
                  outcome: Outcome | None) -> Outcome | None:
        """Settle a refill; ``outcome`` None: the call failed (the caller re-raises)."""
        granted = (outcome.granted or 0) if outcome is not None else 0
        with state.lock:
            state.settle()
            if outcome is not None:
                state.observe(outcome, self.clock())
            if outcome is None or not outcome.allowed:  # keep the units for smaller requests
                state.restore(own)
                if outcome is not None and outcome.retry_after is not None:
                    state.denied_until, state.denied_need = started + outcome.retry_after / 1e6, need
            else:  # the units were counted after `started`: they expire a ttl from then
                state.add(granted - need, started + self.ttl)
            stranded, held = state.expire(self.clock()), state.held
        self._count(int(outcome is not None), calls=1, leased=granted, stranded=stranded)
        return None if outcome is None else outcome._replace(remaining=(outcome.remaining[0] + held,))

    def _direct(self, state: KeyLease | None, outcome: Outcome, decisions: int = 1) -> Outcome:
        self._count(decisions, calls=1)
        if state is None:
            return outcome
        with state.lock:
            state.observe(outcome, self.clock())
            held = state.held
        return outcome._replace(remaining=(outcome.remaining[0] + held,))

    @staticmethod
    def _begin_prefetch(state: KeyLease, ahead: Ahead | None = None) -> bool:
        """A queued prefetch starts (``ahead``: sent ahead by this thread); False if a
        request that ran dry first has taken it over (one busy thread holds the GIL: the
        prefetch's thread may not run before the lease is spent, and the request then
        refills it itself, as without low water)."""
        with state.lock:
            queued, state.queued = state.queued, False
            if queued:
                state.ahead = ahead
        return queued

    def _prefetch(self, state: KeyLease) -> None:
        """Top the lease up ahead of need, off the request path (a background thread)."""
        if not self._begin_prefetch(state):
            return
        started, outcome = self.clock(), None
        try:
            outcome = self.inner.take([state.spec], self.size, 1)
        except BackendError as exc:  # the next request that needs the store will see it too
            logger.debug("django_gcra: lease prefetch failed: %s", exc)
        self._prefetched(state, started, outcome)

    def _send_ahead(self, state: KeyLease) -> None:
        """Top the lease up with a call written now on this thread's connection, without
        waiting: for a thread deciding back to back, whose GIL the background thread would
        wait for. Its reply is read by this thread's next call to the store, by the request
        that runs the lease dry (``_serve``), or else by ``prefetchers``' collector."""
        ahead = Ahead(self.clock())
        if not self._begin_prefetch(state, ahead):
            return
        try:
            collect = self.inner.take_ahead([state.spec], self.size, 1,
                                            lambda outcome: self._prefetched(state, ahead.sent, outcome, ahead))
        except BackendError as exc:  # an open circuit: nothing sent
            logger.debug("django_gcra: lease prefetch failed: %s", exc)
            self._prefetched(state, ahead.sent, None, ahead)
            return
        if collect is None:  # this store cannot: the key refills on demand until ahead_until
            with state.lock:
                if state.ahead is ahead:
                    state.ahead = None
                    state.settle()
            return
        ahead.collect = collect
        self.prefetchers.collect_late(collect)

    async def _aprefetch(self, state: KeyLease) -> None:
        """``_prefetch`` as a task of the event loop."""
        if not self._begin_prefetch(state):
            return
        started, outcome = self.clock(), None
        try:
            outcome = await self.inner.atake([state.spec], self.size, 1)
        except BackendError as exc:
            logger.debug("django_gcra: lease prefetch failed: %s", exc)
        finally:
            self._prefetched(state, started, outcome)

    def _prefetched(self, state: KeyLease, started: float, outcome: Outcome | None,
                    ahead: Ahead | None = None) -> None:
        """Add a prefetch's units; its claim ends unless a request took it over (one sent
        ahead, in a coroutine: ``_serve``), whose own refill ends it then."""
        granted = (outcome.granted or 0) if outcome is not None else 0
        with state.lock:
            if state.ahead is ahead:
                state.ahead = None
                state.settle()
            if outcome is not None:
                state.observe(outcome, self.clock())
            state.add(granted, started + self.ttl)
        self._count(0, calls=1, leased=granted)

    def _count(self, decisions: int, local: int = 0, calls: int = 0, leased: int = 0, stranded: int = 0) -> None:
        with self._stats_lock:
            s = self._stats
            s.decisions += decisions
            s.local += local
            s.store_calls += calls
            s.leased_units += leased
            s.stranded_units += stranded

    def stats(self) -> LeaseStats:
        with self._keys_lock:
            held = sum(s.held for s in self._keys.values())
            local = sum(s.local for s in self._keys.values())
            with self._stats_lock:
                s, direct = self._stats, counted(self.cold)
                return replace(s, held_units=held, local=s.local + local, decisions=s.decisions + local + direct,
                               store_calls=s.store_calls + direct)

    def drop(self, keys: Iterable[str]) -> int:
        """Forget this process's lease (and heat) of each of ``keys`` (``django_gcra.reset``):
        their units are never served; returns the leases dropped."""
        dropped = 0
        with self._keys_lock, self._heat_lock:
            for key in keys:
                self._heat.pop(key, None)
                if key in self._keys:
                    self._count(0, stranded=self._drop(key, None))
                    dropped += 1
        return dropped

    def held_keys(self) -> int:
        with self._keys_lock:
            return len(self._keys)

    def _drop(self, key: str, now: float | None) -> int:
        """Forget ``key``'s lease (``_keys_lock`` held); its units are stranded: those not
        yet expired too when ``now`` is None (an eviction). Returns them."""
        state = self._keys.pop(key)
        with state.lock:
            stranded = state.expire(now) if now is not None else held_units(state.take_all())
            local, state.local = state.local, 0
        self._count(local, local=local)
        return stranded

    def _sweep(self, now: float) -> None:
        """Drop idle leases (every unit expired); past ``max_keys``, the oldest ones."""
        self._next_sweep = now + self.ttl
        stranded = 0
        for key, state in list(self._keys.items()):
            if not state.refilling and (not state.held or (state.expires <= now and
                                                            (not state.second or state.second_expires <= now))):
                stranded += self._drop(key, now)
        if len(self._keys) >= self.max_keys:
            excess = len(self._keys) - self.max_keys + max(1, self.max_keys // EVICT_FRACTION)
            victims = [k for k, s in self._keys.items() if not s.refilling][:excess]
            for key in victims:
                stranded += self._drop(key, None)
        if stranded:
            self._count(0, stranded=stranded)

    def read_tats(self, keys: Sequence[str]) -> list[int | None]:
        return self.inner.read_tats(keys)

    def read_states(self, specs: Sequence[LimitSpec]) -> list[Any]:
        return self.inner.read_states(specs)
