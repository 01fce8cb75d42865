"""Concurrency slots once taken: releasing them off the request path, and keeping them alive.

A decision that passes a concurrency limit holds a slot: its token in the limit's ZSET,
scored by when it expires (Redis time + ``ttl``, set by the decision's script call).

- ``Slots.release()`` (``arelease()``) sends the slot's ZREMs at once, as one pipeline, and
  returns when they reached Redis: the slot is free for every later decision, in this
  process at once and in the others as soon as they ask. The surfaces release when the
  response is closed, after its body is out, so no round trip is added before the
  response. A release that fails is counted (``stats.release_failures``) and logged,
  never retried: the slot's ttl frees it anyway.
- A background ``Worker`` extends every slot still held by this process every ``ttl / 3`` (a
  pipelined ``ZADD XX`` per key, scored from Redis time), so a long request keeps its slot
  while a dead process's slots are free again at most ``ttl`` after it died.
- A ``Slots`` object dropped without being released (a decision from ``decide()`` that
  the caller forgot) is released when it is garbage collected, and counted as abandoned:
  a finalizer may run anywhere, even inside a call on the same connection pool, so that
  release alone is queued for the background thread (``SlotKeeper``), which sends it at once.
- ``LocalSlots`` are the per-process semaphores of ``on_failure="local"``.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from redis.cluster import RedisCluster

from ..worker import Worker
from . import clock as test_clock

logger = logging.getLogger("django_gcra")

__all__ = ["LocalSemaphores", "SlotBook", "SlotKeeper", "SlotStats", "Slots"]

# Extends the caller's slots, scored from Redis time: KEYS the slot ZSETs, ARGV[1] the
# token, ARGV[1 + i] key i's ttl in us. XX: a slot already released or expired stays gone.
EXTEND_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local kept = 0
for i = 1, #KEYS do
  local ttl = tonumber(ARGV[i + 1])
  kept = kept + redis.call('ZADD', KEYS[i], 'XX', 'CH', string.format('%.0f', now + ttl), ARGV[1])
  redis.call('PEXPIRE', KEYS[i], math.ceil(ttl / 1000) + 1000)
end
return kept
"""


class SlotStats:
    """Per-process counters of concurrency slots (``status()``; metrics read them too)."""

    FIELDS = ("acquired", "released", "refused", "expired", "abandoned", "release_failures", "extend_failures",
              "extended")

    def __init__(self, book: SlotBook) -> None:
        self.book = book
        self._lock = threading.RLock()  # re-entrant: Slots.__del__ may run while this thread holds it
        self.counts = dict.fromkeys(self.FIELDS, 0)

    def add(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self.counts[name] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            found = dict(self.counts)
        found["held"] = self.book.held()
        return found

    @classmethod
    def none(cls) -> dict[str, int]:
        """A snapshot of no slots at all (no engine yet)."""
        return dict.fromkeys((*cls.FIELDS, "held"), 0)


class SlotBook:
    """The concurrency slots of one engine: its counters, the keepers of its stores, its
    local semaphores (``on_failure="local"``) and the prefix of its holder tokens."""

    def __init__(self) -> None:
        self.stats = SlotStats(self)
        self.local = LocalSemaphores(self.stats)
        self.keepers: list[SlotKeeper] = []
        self.prefix = f"{uuid.uuid4().hex[:12]}:{os.getpid()}:"  # (a forked child builds its own book)
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self.closed = False

    def new_token(self) -> str:
        """A holder token unique to one decision, across hosts and processes (and forks)."""
        return self.prefix + str(next(self._counter))

    def keeper(self, get_client: Callable[[], Any], get_async_client: Callable[[], Any] | None = None) -> SlotKeeper:
        """A new keeper of one store's slots (made by a closed book, a decision still in
        flight on a retired engine, its thread never starts: its slots are released
        directly, and their ttl frees the ones not released)."""
        keeper = SlotKeeper(self.stats, get_client, get_async_client=get_async_client)
        with self._lock:
            self.keepers.append(keeper)
            if self.closed:
                keeper.worker.stop()
        return keeper

    def held(self) -> int:
        """The slots held now, in Redis and in local semaphores."""
        return sum(len(k.held) for k in list(self.keepers)) + self.local.held_total()

    def close(self) -> None:
        """Send the queued releases and stop the keepers' threads (the engine is retired)."""
        with self._lock:
            self.closed = True
            keepers = list(self.keepers)
        for keeper in keepers:
            keeper.worker.stop()

    def forget(self) -> None:
        """A forked child: the parent's slots are the parent's to keep and release."""
        for keeper in list(self.keepers):
            keeper.forget()


class Slots:
    """The slots one decision holds: release once (idempotent), from any thread or loop."""

    __slots__ = ("__weakref__", "extended_at", "keeper", "keys", "released", "token", "ttls")

    def __init__(self, keeper: Any, keys: tuple[str, ...], ttls: tuple[int, ...], token: str) -> None:
        self.keeper, self.keys, self.ttls, self.token = keeper, keys, ttls, token
        self.released = False
        self.extended_at = time.monotonic()

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.keeper.release(self)

    async def arelease(self) -> None:
        if not self.released:
            self.released = True
            await self.keeper.arelease(self)

    def __del__(self) -> None:
        if not self.released:
            try:
                self.keeper.stats.add("abandoned")
                self.released = True
                self.keeper.release_later(self)
            except Exception:  # never raise from a finalizer (at exit the keeper may be gone)
                pass


class SlotKeeper:
    """Releases the slots of one store, and extends them from a background ``Worker``."""

    def __init__(self, stats: SlotStats, get_client: Callable[[], Any],
                 get_async_client: Callable[[], Any] | None = None) -> None:
        self.stats, self.get_client, self.get_async_client = stats, get_client, get_async_client
        self.worker = Worker("slots", self._step, first=self._next_extension)
        self._logged_at = 0.0
        self._unlogged = 0
        self.forget()

    def forget(self) -> None:
        """No slots held or queued, fresh locks (a forked child's keeper)."""
        # Weak: a Slots its decision dropped unreleased is collected, released by __del__, no longer extended.
        self.held: weakref.WeakSet[Slots] = weakref.WeakSet()
        self._queue: deque[Slots] = deque()
        self._lock = threading.RLock()  # (a __del__ may release while it is held)
        self._sending = threading.Lock()  # held while a batch is on its way: flush() waits for it

    # -- the request side
    def acquired(self, keys: tuple[str, ...], ttls: tuple[int, ...], token: str) -> Slots:
        slots = Slots(self, keys, ttls, token)
        with self._lock:
            self.held.add(slots)
        self.stats.add("acquired")
        self.worker.start()  # the heartbeat
        return slots

    def release(self, slots: Slots) -> None:
        """Free ``slots`` in Redis now (one pipelined round trip)."""
        with self._lock:
            self.held.discard(slots)
        try:
            pipe = self.get_client().pipeline(transaction=False)
            for key in slots.keys:
                pipe.zrem(key, slots.token)
            pipe.execute()
        except Exception as exc:
            self._release_failed(1, exc)
        else:
            self.stats.add("released")

    async def arelease(self, slots: Slots) -> None:
        """``release()`` on the event loop's own client (the sync one, when there is none)."""
        client = self.get_async_client() if self.get_async_client else None
        if client is None:
            self.release(slots)
            return
        with self._lock:
            self.held.discard(slots)
        try:
            async with client.pipeline(transaction=False) as pipe:
                for key in slots.keys:
                    pipe.zrem(key, slots.token)
                await pipe.execute()
        except Exception as exc:
            self._release_failed(1, exc)
        else:
            self.stats.add("released")

    def release_later(self, slots: Slots) -> None:
        """Queue ``slots``' release for the background thread (a finalizer's release)."""
        with self._lock:
            self.held.discard(slots)
            self._queue.append(slots)
        self.worker.wake()

    # -- the background side
    def _step(self) -> float:
        self.flush()
        self.extend_due()
        return self._next_extension()

    def _next_extension(self) -> float:
        """Seconds until the earliest held slot is due for extension (at most 1)."""
        now, wait = time.monotonic(), 1.0
        for slots in list(self.held):
            wait = min(wait, slots.extended_at + min(slots.ttls) / 3e6 - now)
        return max(0.01, wait)

    def flush(self) -> int:
        """Send every queued (abandoned) release now, as one pipeline, and return once each
        queued before the call has reached Redis (or failed); the number released."""
        with self._sending:
            return self._send()

    def _send(self) -> int:
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
        if not batch:
            return 0
        try:
            pipe = self.get_client().pipeline(transaction=False)
            for slots in batch:
                for key in slots.keys:
                    pipe.zrem(key, slots.token)
            pipe.execute()
        except Exception as exc:
            self._release_failed(len(batch), exc)
            return 0
        self.stats.add("released", len(batch))
        return len(batch)

    def extend_due(self, force: bool = False) -> int:
        """Extend the held slots due (all with ``force``): one pipelined script call each."""
        now = time.monotonic()
        with self._lock:  # (a request thread may add one meanwhile)
            held = list(self.held)
        due = [s for s in held if force or now - s.extended_at >= min(s.ttls) / 3e6]
        if not due:
            return 0
        script, clock = EXTEND_SCRIPT, test_clock.active
        if clock is not None:  # django_gcra.testing.limiter_clock: its time, not the server's
            script = test_clock.clocked(script, clock.now_us)
        try:
            client = self.get_client()
            if isinstance(client, RedisCluster):  # its pipeline runs no scripts: one call per decision
                for slots in due:
                    client.eval(script, len(slots.keys), *slots.keys, slots.token, *slots.ttls)
            else:
                pipe = client.pipeline(transaction=False)
                for slots in due:
                    pipe.eval(script, len(slots.keys), *slots.keys, slots.token, *slots.ttls)
                pipe.execute()
        except Exception as exc:
            self.stats.add("extend_failures", len(due))
            logger.warning("django_gcra: could not extend %d concurrency slot(s) (they expire after their ttl "
                           "unless a later extension succeeds): %s", len(due), exc)
            return 0
        for slots in due:
            slots.extended_at = now
        self.stats.add("extended", len(due))
        return len(due)

    def _release_failed(self, n: int, exc: BaseException) -> None:
        self.stats.add("release_failures", n)
        now = time.monotonic()
        self._unlogged += n
        if now - self._logged_at >= 10.0:
            logger.warning("django_gcra: could not release %d concurrency slot(s); each is free again after its "
                           "ttl: %s", self._unlogged, exc)
            self._logged_at, self._unlogged = now, 0


class LocalSemaphores:
    """``on_failure="local"``: a per-process counting semaphore of ``max`` per key."""

    def __init__(self, stats: SlotStats) -> None:
        self.stats = stats
        self._lock = threading.RLock()  # re-entrant: Slots.__del__ may run while this thread holds it
        self._held: dict[str, int] = {}

    def try_acquire(self, keys: Sequence[str], maxima: Sequence[int]) -> int | None:
        """Take one slot of every key, or none: None on success, else the full key's index."""
        with self._lock:
            for i, (key, most) in enumerate(zip(keys, maxima)):
                if self._held.get(key, 0) >= most:
                    return i
            for key in keys:
                self._held[key] = self._held.get(key, 0) + 1
        return None

    def counts(self, keys: Sequence[str]) -> list[int]:
        with self._lock:
            return [self._held.get(key, 0) for key in keys]

    def release(self, slots: Slots) -> None:
        with self._lock:
            for key in slots.keys:
                left = self._held.get(key, 0) - 1
                if left > 0:
                    self._held[key] = left
                else:
                    self._held.pop(key, None)
        self.stats.add("released")

    async def arelease(self, slots: Slots) -> None:
        self.release(slots)

    def release_later(self, slots: Slots) -> None:
        self.release(slots)

    def held_total(self) -> int:
        with self._lock:
            return sum(self._held.values())

    def acquired(self, keys: tuple[str, ...]) -> Slots:
        self.stats.add("acquired")
        return Slots(self, keys, (), "")
