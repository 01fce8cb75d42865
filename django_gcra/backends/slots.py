"""Concurrency slots once taken: releasing them off the request path, and keeping them alive.

A decision that passes a concurrency limit holds a slot: its token in the limit's ZSET,
scored by when it expires (Redis time + ``ttl``, set by the decision's script call).

- ``Slots.release()`` only queues the release; one background thread per store
  (``SlotKeeper``) sends the queued ZREMs as one pipeline (no round trip on the response
  path), wakes as soon as something is queued, and flushes at interpreter exit. A release
  that fails is counted (``stats.release_failures``) and logged, never retried: the
  slot's ttl frees it anyway. The thread sends at most one pipeline every
  ``FLUSH_INTERVAL`` seconds: an idle process's release goes out at once, while under
  load one pipeline carries every release of the last interval (a slot is then free
  again up to ``FLUSH_INTERVAL`` after its response), and the request threads are not
  made to hand the GIL to the keeper for every request.
- The same thread extends every slot still held by this process every ``ttl / 3`` (a
  pipelined ``ZADD XX`` per key, scored from Redis time), so a long request keeps its slot
  while a dead process's slots are free again at most ``ttl`` after it died.
- A ``Slots`` object dropped without being released (a decision from ``decide()`` that
  the caller forgot) is released when it is garbage collected, and counted as abandoned.
- ``LocalSlots`` are the per-process semaphores of ``on_failure="local"``.
"""

from __future__ import annotations

import atexit
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

from . import clock as test_clock

logger = logging.getLogger("django_gcra")

__all__ = ["LocalSemaphores", "SlotKeeper", "SlotStats", "Slots", "keepers", "new_token", "stats"]

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


FLUSH_INTERVAL = 0.01  # seconds: the keeper sends at most one pipeline of releases this often


class SlotStats:
    """Per-process counters of concurrency slots (``status()``; metrics read them too)."""

    FIELDS = ("acquired", "released", "refused", "expired", "abandoned", "release_failures", "extend_failures",
              "extended")

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: Slots.__del__ may run while this thread holds it
        self.counts = dict.fromkeys(self.FIELDS, 0)

    def add(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self.counts[name] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            found = dict(self.counts)
        found["held"] = held()
        return found

    def reset(self) -> None:
        with self._lock:
            self.counts = dict.fromkeys(self.FIELDS, 0)


stats = SlotStats()
keepers: weakref.WeakSet[SlotKeeper] = weakref.WeakSet()


def held() -> int:
    """The slots this process holds now, in Redis and in local semaphores."""
    return sum(len(k.held) for k in list(keepers)) + LocalSemaphores.held_total()


_counter = itertools.count()
_prefix = ""


def _new_prefix() -> None:
    global _prefix
    _prefix = f"{uuid.uuid4().hex[:12]}:{os.getpid()}:"


_new_prefix()
os.register_at_fork(after_in_child=_new_prefix)


def _after_fork() -> None:
    for keeper in list(keepers):  # a lock the parent's keeper held while sending stays held in the child
        keeper._sending = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def new_token() -> str:
    """A holder token unique to one decision, across hosts and processes (and forks)."""
    return _prefix + str(next(_counter))


class Slots:
    """The slots one decision holds: release once (idempotent), from any thread or loop."""

    __slots__ = ("__weakref__", "extended_at", "keeper", "keys", "released", "token", "ttls")

    def __init__(self, keeper: Any, keys: tuple[str, ...], ttls: tuple[int, ...], token: str) -> None:
        self.keeper, self.keys, self.ttls, self.token = keeper, keys, ttls, token
        self.released = False
        self.extended_at = time.monotonic()

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self.keeper.release(self)

    def __del__(self) -> None:
        if not self.released:
            try:
                stats.add("abandoned")
                self.release()
            except Exception:  # never raise from a finalizer (at exit the keeper may be gone)
                pass


class SlotKeeper:
    """Releases and extends the slots of one store from one background thread."""

    def __init__(self, get_client: Callable[[], Any], name: str = "") -> None:
        self.get_client, self.name = get_client, name
        # Weak: a Slots its decision dropped unreleased is collected, released by __del__, no longer extended.
        self.held: weakref.WeakSet[Slots] = weakref.WeakSet()
        self._queue: deque[Slots] = deque()
        self._cond = threading.Condition(threading.RLock())  # (a __del__ may release while it is held)
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._logged_at = 0.0
        self._unlogged = 0
        self._flushed_at = 0.0
        self._sending = threading.Lock()  # held while a batch is on its way: flush() waits for it
        keepers.add(self)

    # -- the request side: cheap, never blocks on the network
    def acquired(self, keys: tuple[str, ...], ttls: tuple[int, ...], token: str) -> Slots:
        slots = Slots(self, keys, ttls, token)
        with self._cond:
            self.held.add(slots)
        stats.add("acquired")
        self._ensure_thread()
        return slots

    def release(self, slots: Slots) -> None:
        with self._cond:
            self.held.discard(slots)
            self._queue.append(slots)
            self._cond.notify()
        self._ensure_thread()

    def _ensure_thread(self) -> None:
        # The thread never returns (its loop survives any error); only a fork leaves it behind.
        if self._thread is not None and self._pid == os.getpid():
            return
        with self._cond:
            if self._thread is not None and self._pid == os.getpid():
                return
            if self._thread is not None:  # a forked child: the parent's slots are the parent's to keep
                self.held = weakref.WeakSet()
                self._queue.clear()
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name=f"django_gcra-slots{self.name}", daemon=True)
            self._thread.start()

    # -- the background side
    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._cond.wait(timeout=self._next_extension())
                busy = bool(self._queue)
            if busy:  # under load, batch: at most one pipeline every FLUSH_INTERVAL
                wait = self._flushed_at + FLUSH_INTERVAL - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self._flushed_at = time.monotonic()
            try:
                self.flush()
                self.extend_due()
            except Exception:  # the thread must outlive any bug; the ttl is the backstop
                logger.exception("django_gcra: the concurrency slot keeper failed")
                time.sleep(0.1)

    def _next_extension(self) -> float:
        """Seconds until the earliest held slot is due for extension (at most 1)."""
        now, wait = time.monotonic(), 1.0
        for slots in list(self.held):
            wait = min(wait, slots.extended_at + min(slots.ttls) / 3e6 - now)
        return max(0.01, wait)

    def flush(self) -> int:
        """Send every queued release now, as one pipeline, and return once every release
        queued before the call has reached Redis (or failed), the background thread's batch
        in flight included; the number of slots this call released."""
        with self._sending:
            return self._send()

    def _send(self) -> int:
        with self._cond:
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
            stats.add("release_failures", len(batch))
            self._log_failure(len(batch), exc)
            return 0
        stats.add("released", len(batch))
        return len(batch)

    def extend_due(self, force: bool = False) -> int:
        """Extend the held slots due (all with ``force``): one pipelined script call each."""
        now = time.monotonic()
        with self._cond:  # (a request thread may add one meanwhile)
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
            stats.add("extend_failures", len(due))
            logger.warning("django_gcra: could not extend %d concurrency slot(s) (they expire after their ttl "
                           "unless a later extension succeeds): %s", len(due), exc)
            return 0
        for slots in due:
            slots.extended_at = now
        stats.add("extended", len(due))
        return len(due)

    def _log_failure(self, n: int, exc: BaseException) -> None:
        now = time.monotonic()
        self._unlogged += n
        if now - self._logged_at >= 10.0:
            logger.warning("django_gcra: could not release %d concurrency slot(s); each is free again after its "
                           "ttl: %s", self._unlogged, exc)
            self._logged_at, self._unlogged = now, 0


@atexit.register
def _flush_at_exit() -> None:
    for keeper in list(keepers):
        try:
            keeper.flush()
        except Exception:  # pragma: no cover - logged by flush itself
            pass


class LocalSemaphores:
    """``on_failure="local"``: a per-process counting semaphore of ``max`` per key."""

    _lock = threading.RLock()  # re-entrant: Slots.__del__ may run while this thread holds it
    _held: dict[str, int] = {}

    @classmethod
    def try_acquire(cls, keys: Sequence[str], maxima: Sequence[int]) -> int | None:
        """Take one slot of every key, or none: None on success, else the full key's index."""
        with cls._lock:
            for i, (key, most) in enumerate(zip(keys, maxima)):
                if cls._held.get(key, 0) >= most:
                    return i
            for key in keys:
                cls._held[key] = cls._held.get(key, 0) + 1
        return None

    @classmethod
    def counts(cls, keys: Sequence[str]) -> list[int]:
        with cls._lock:
            return [cls._held.get(key, 0) for key in keys]

    @classmethod
    def release(cls, slots: Slots) -> None:
        with cls._lock:
            for key in slots.keys:
                left = cls._held.get(key, 0) - 1
                if left > 0:
                    cls._held[key] = left
                else:
                    cls._held.pop(key, None)
        stats.add("released")

    @classmethod
    def held_total(cls) -> int:
        with cls._lock:
            return sum(cls._held.values())

    @classmethod
    def acquired(cls, keys: tuple[str, ...]) -> Slots:
        stats.add("acquired")
        return Slots(cls, keys, (), "")
