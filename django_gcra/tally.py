"""Decision counts for the console: per policy and limit, never per key (but for keys already listed).

The dashboard's counts and the shadow report's denominators. An observer of every
decision (``signals.observers``) adds to in-process counters:

- ``(policy, limit, "seen")`` for every limit the decision evaluated (its traffic: the
  denominator), and ``(policy, binding limit, outcome)`` with the outcome labels of
  ``metrics.OUTCOMES``. Cardinality is bounded by configuration: policies x limits x outcomes.
- per key, only for the keys already *listed* (a denial or shadow would-deny of theirs was
  recorded): every decision of a listed key counts as that key's traffic from then on,
  so the report can say which share of it would have been denied. At most
  ``MAX_LISTED`` keys per process; beyond, a new key is not listed (and its share shows
  as unknown).

A background thread writes the counters to Redis every ``AUDIT['FLUSH_INTERVAL']``
seconds in one pipeline (minute buckets kept ``MINUTE_TTL``, hour buckets ``HOUR_TTL``,
all under one hash tag), so the console sees every process's decisions. Never on the
request path; a failed write keeps the counts for the next one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from . import catalog
from .audit import key_of
from .conf import get_settings
from .decision import Decision
from .metrics import outcome_of
from .store import cache_connection

__all__ = ["MAX_LISTED", "Tally", "on_decision", "read", "read_keys", "tally"]

logger = logging.getLogger("django_gcra")

MAX_LISTED = 1000
MINUTE, HOUR = 60, 3600
MINUTE_TTL = 3 * HOUR
HOUR_TTL = 32 * 86400
SEP = "\x1f"
LISTING = frozenset({"denied", "shadow_denied", "fallback_denied"})


def _key_of(decision: Decision, limit_key: Iterable[str]) -> str:
    """The audit row's key, so the report can join on it."""
    return key_of({n: decision.descriptors[n] for n in limit_key if n in decision.descriptors})


def _redis_key(kind: str, bucket: int) -> str:
    return f"{get_settings().prefix}:{{tally}}:{kind}:{bucket}"


class Tally:
    """The process's counters and their flusher thread (started on the first decision)."""

    def __init__(self, autostart: bool = True) -> None:
        self.autostart = autostart
        self.lock = threading.Lock()
        self.pending: dict[tuple[str, str, str], int] = {}
        self.pending_keys: dict[tuple[str, str, str], int] = {}
        self.totals: dict[tuple[str, str, str], int] = {}  # since the process started
        self.listed: dict[tuple[str, str], set[str]] = {}
        self.listed_count = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def count(self, decision: Decision) -> None:
        outcome = outcome_of(decision)
        policy = decision.policy
        keyed: list[tuple[str, str, str]] = []
        if self.listed:
            config = catalog.find(policy)
            for limit in config.limits if config else ():
                listed = self.listed.get((policy, limit.name))
                if listed:
                    key = _key_of(decision, limit.key)
                    if key in listed:
                        keyed.append((policy, limit.name, key))
        with self.lock:
            for state in decision.limits:
                field = (policy, state.name, "seen")
                self.pending[field] = self.pending.get(field, 0) + 1
            field = (policy, decision.limit, outcome)
            self.pending[field] = self.pending.get(field, 0) + 1
            for field in keyed:
                self.pending_keys[field] = self.pending_keys.get(field, 0) + 1
        if outcome in LISTING and decision.limit:
            self._list(decision)
        if self.autostart and (self._thread is None or not self._thread.is_alive()):
            self._start()

    def _list(self, decision: Decision) -> None:
        config = catalog.find(decision.policy)
        limit = next((lim for lim in config.limits if lim.name == decision.limit), None) if config else None
        if limit is None:
            return
        key = _key_of(decision, limit.key)
        with self.lock:
            listed = self.listed.setdefault((decision.policy, limit.name), set())
            if key not in listed and self.listed_count < MAX_LISTED:
                listed.add(key)
                self.listed_count += 1
                field = (decision.policy, limit.name, key)  # this decision is the key's traffic too
                self.pending_keys[field] = self.pending_keys.get(field, 0) + 1

    def _start(self) -> None:
        with self.lock:
            if not self._stop.is_set() and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="gcra-tally", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(_interval()):
            self.flush()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.flush()

    def flush(self, now: float | None = None) -> bool:
        """Write the pending counts to Redis; on failure keep them for the next flush. Never raises."""
        with self.lock:
            counts, keys, self.pending, self.pending_keys = self.pending, self.pending_keys, {}, {}
            for field, n in counts.items():
                self.totals[field] = self.totals.get(field, 0) + n
        if not counts and not keys:
            return True
        now = time.time() if now is None else now
        minute, hour = int(now // MINUTE) * MINUTE, int(now // HOUR) * HOUR
        try:
            pipe = cache_connection().pipeline(transaction=False)
            for kind, bucket, ttl, data in (("m", minute, MINUTE_TTL, counts), ("h", hour, HOUR_TTL, counts),
                                            ("k", hour, HOUR_TTL, keys)):
                if data:
                    name = _redis_key(kind, bucket)
                    for field, n in data.items():
                        pipe.hincrby(name, SEP.join(field), n)
                    pipe.expire(name, ttl)
            pipe.execute()
            return True
        except Exception as exc:
            logger.warning("django_gcra: could not write decision counts (kept for the next flush): %s", exc)
            with self.lock:
                for field, n in counts.items():
                    self.pending[field] = self.pending.get(field, 0) + n
                    self.totals[field] -= n
                for field, n in keys.items():
                    self.pending_keys[field] = self.pending_keys.get(field, 0) + n
            return False


def _interval() -> float:
    try:
        return get_settings().audit.flush_interval
    except Exception:
        return 2.0


def _buckets(since: float, until: float, width: int) -> list[int]:
    first = int(since // width) * width
    return list(range(first, int(until) + 1, width))


def _read(kind: str, buckets: list[int]) -> list[dict[str, int]]:
    pipe = cache_connection().pipeline(transaction=False)
    for bucket in buckets:
        pipe.hgetall(_redis_key(kind, bucket))
    return [{(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()} for raw in pipe.execute()]


def read(since: float, until: float, width: int = MINUTE) -> tuple[list[int], dict[tuple[str, str, str], list[int]]]:
    """Every process's counts from Redis: the bucket starts, and per (policy, limit, outcome)
    one count per bucket. ``width`` is ``MINUTE`` (the last hours) or ``HOUR``. Raises on a
    Redis error (the console says so)."""
    buckets = _buckets(since, until, width)
    series: dict[tuple[str, str, str], list[int]] = {}
    for i, raw in enumerate(_read("m" if width == MINUTE else "h", buckets)):
        for field, n in raw.items():
            parts = field.split(SEP)
            if len(parts) == 3:
                series.setdefault((parts[0], parts[1], parts[2]), [0] * len(buckets))[i] += n
    return buckets, series


def read_keys(since: float, until: float) -> Mapping[tuple[str, str, str], int]:
    """Per listed (policy, limit, key): its decisions in the hours overlapping the period."""
    found: dict[tuple[str, str, str], int] = {}
    for raw in _read("k", _buckets(since, until, HOUR)):
        for field, n in raw.items():
            parts = field.split(SEP)
            if len(parts) == 3:
                found[(parts[0], parts[1], parts[2])] = found.get((parts[0], parts[1], parts[2]), 0) + n
    return found


tally = Tally()


def on_decision(sender: Any, decision: Decision, **kwargs: Any) -> None:
    """Observer of every decision (``signals.observers``): count it. Never raises."""
    try:
        tally.count(decision)
    except Exception:
        logger.exception("django_gcra: could not count a decision")
