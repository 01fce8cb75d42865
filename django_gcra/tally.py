"""Decision counts for the console: per policy and limit, never per key (but for keys already listed).

The dashboard's counts and the shadow report's denominators. An observer of every
decision (``signals.observers``) adds to in-process counters:

- ``(policy, limit, "seen")`` for every limit the decision evaluated (its traffic: the
  denominator), and ``(policy, binding limit, outcome)`` with the outcome labels of
  ``decision.OUTCOMES``. Cardinality is bounded by configuration: policies x limits x outcomes.
  These are also the counts Prometheus exports (``metrics.export``): one count per decision
  serves both.
- per key, only for the keys already *listed* (a denial or shadow would-deny of theirs was
  recorded): every decision of a listed key counts as that key's traffic from then on,
  so the report can say which share of it would have been denied. At most
  ``MAX_LISTED`` keys per process; beyond, a new key is not listed (and its share shows
  as unknown).

- keys **near their quota**, sampled: an allowed decision that leaves a limit at most
  ``1 - NEAR_SHARE`` of its burst (20 %: "used 80 % or more") records that key, with its
  used share and its identifying descriptors, in a per-process table of at most
  ``MAX_NEAR`` keys per flush interval (a key already there keeps its highest share; once
  full, new keys wait for the next interval). Each flush adds them to one sorted set per
  hour in Redis (``ZADD GT``: a key keeps its highest share) trimmed to the ``NEAR_KEPT``
  highest shares, so the dashboard can list keys close to their limit before any is
  denied. Why sampled from decisions and not a SCAN of the limits' keys: the decision
  already holds the remaining units, so finding a near key costs an integer comparison
  on the request path and nothing in Redis, whereas a SCAN costs the console a walk of
  every key of the prefix (millions on a busy store: unbounded time, or a partial sample
  that misses exactly the keys it was for) and cannot name a key's descriptors, which a
  key hashes or escapes. The cost: a key is seen only when it decides, and only the
  process-local top of each interval reaches Redis; cardinality is bounded twice
  (``MAX_NEAR`` per process and interval, ``NEAR_KEPT`` per hour in Redis).

A background thread writes the counters to Redis every ``AUDIT['FLUSH_INTERVAL']``
seconds in one pipeline (minute buckets kept ``MINUTE_TTL``, hour buckets ``HOUR_TTL``,
all under one hash tag), so the console sees every process's decisions. Never on the
request path; a failed write keeps the counts for the next one.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from . import catalog, metrics
from .audit import key_of
from .backends.key_lease import counted
from .conf import get_settings
from .decision import Decision, outcome_of
from .store import cache_connection
from .worker import Worker, after_fork

__all__ = ["MAX_LISTED", "MAX_NEAR", "NEAR_KEPT", "NEAR_SHARE", "Tally", "on_decision", "read", "read_keys",
           "read_near", "tally"]

logger = logging.getLogger("django_gcra")

MAX_LISTED = 1000
MAX_ADMITTED = 1000  # (policy, limit) pairs counted without a lock; beyond, the general path
MINUTE, HOUR = 60, 3600
MINUTE_TTL = 3 * HOUR
HOUR_TTL = 32 * 86400
SEP = "\x1f"
NEAR_SHARE = 0.8  # used share of the burst from which an allowed decision's key is "near its quota"
_FAR_SHARE = 1 - NEAR_SHARE  # the remaining share below which it is
_NONE_KEYED: list[tuple[str, str, str]] = []  # no key of the policy is listed: never appended to
MAX_NEAR = 256  # near keys one process holds between flushes
NEAR_KEPT = 50  # near keys kept per hour bucket in Redis (the highest shares)
LISTING = frozenset({"denied", "shadow_denied", "fallback_denied"})


def _key_of(decision: Decision, limit_key: Iterable[str]) -> str:
    """The audit row's key, so the report can join on it."""
    return key_of({n: decision.descriptors[n] for n in limit_key if n in decision.descriptors})


def _redis_key(kind: str, bucket: int) -> str:
    return f"{get_settings().prefix}:{{tally}}:{kind}:{bucket}"


class _Admissions:
    """One (policy, limit)'s plain admissions (one limit, allowed, no key of the policy listed): counted
    with ``next`` (one C call, atomic under the GIL: no lock on the request path), folded
    into the pending counts as both "seen" and "allowed" when they are read or flushed."""

    __slots__ = ("allowed", "counter", "folded", "seen")

    def __init__(self, policy: str, limit: str) -> None:
        self.counter, self.folded = itertools.count(), 0
        self.seen, self.allowed = (policy, limit, "seen"), (policy, limit, "allowed")


class Tally:
    """The process's counters and their flusher (a ``Worker``, started on the first decision)."""

    def __init__(self, autostart: bool = True) -> None:
        self.autostart = autostart
        self.worker = Worker("tally", self._step, first=_interval)
        self.forget()

    def forget(self) -> None:
        """No counts, fresh locks: a new tally (a forked child's own)."""
        self.lock = threading.Lock()
        self._pending: dict[tuple[str, str, str], int] = {}  # (read as ``pending``: with the admissions folded in)
        self.pending_keys: dict[tuple[str, str, str], int] = {}
        self.totals: dict[tuple[str, str, str], int] = {}  # since the process started
        self.listed: dict[tuple[str, str], set[str]] = {}
        self.listed_count = 0
        # The policies with a listed key: only their decisions are looked up in ``listed``
        # (a denial of one policy's key does not slow every other policy's decisions).
        self.listed_policies: set[str] = set()
        self.pending_near: dict[tuple[str, str, str], tuple[float, dict[str, str]]] = {}
        self._admitted: dict[tuple[str, str], _Admissions] = {}

    def observe(self, sender: Any, decision: Decision, request: Any = None) -> None:
        """Count ``decision``: the observer of every decision (``signals.observers``, as
        ``on_decision``; its counting in this one frame). Never raises."""
        try:
            limits, policy = decision.limits, decision.policy
            if (len(limits) == 1 and decision.allowed and not (decision.shadow or decision.fallback or decision.waited)
                    and policy not in self.listed_policies):  # one limit, admitted, no key of its policy listed
                state = limits[0]
                admissions = self._admitted.get((policy, state.name)) or self._admissions(policy, state.name)
                if admissions is None:  # (too many pairs already: policies built per call)
                    self._count(decision)
                else:
                    next(admissions.counter)
                    if state.remaining <= _FAR_SHARE * state.burst and state.burst > 0:  # most stop here
                        self._near(decision, state.name, (state.burst - state.remaining) / state.burst)
            else:
                self._count(decision)
            if self.autostart:
                self.worker.start()
        except Exception:
            logger.exception("django_gcra: could not count a decision")

    def count(self, decision: Decision) -> None:
        """Count ``decision`` (``observe`` without a sender). Never raises."""
        self.observe(None, decision)

    def _admissions(self, policy: str, limit: str) -> _Admissions | None:
        """The (policy, limit)'s admissions counter, made on its first admission; None past
        ``MAX_ADMITTED`` pairs (never dropped: a thread may be counting on one)."""
        with self.lock:
            found = self._admitted.get((policy, limit))
            if found is None and len(self._admitted) < MAX_ADMITTED:
                found = self._admitted[(policy, limit)] = _Admissions(policy, limit)
            return found

    @property
    def pending(self) -> dict[tuple[str, str, str], int]:
        """The counts not yet written to Redis, by (policy, limit, "seen" or an outcome)."""
        with self.lock:
            self._fold()
            return self._pending

    def _fold(self) -> None:
        """Add the admissions counted since the last fold to the pending counts (lock held)."""
        pending = self._pending
        for admissions in self._admitted.values():
            now = counted(admissions.counter)
            if now != admissions.folded:
                more, admissions.folded = now - admissions.folded, now
                pending[admissions.seen] = pending.get(admissions.seen, 0) + more
                pending[admissions.allowed] = pending.get(admissions.allowed, 0) + more

    def _count(self, decision: Decision) -> None:
        """``count`` of any decision: every limit it evaluated seen, its outcome, the listed keys."""
        outcome = outcome_of(decision)
        policy = decision.policy
        keyed = self._keyed(decision) if policy in self.listed_policies else _NONE_KEYED
        with self.lock:
            pending = self._pending
            for state in decision.limits:
                field = (policy, state.name, "seen")
                pending[field] = pending.get(field, 0) + 1
            field = (policy, decision.limit, outcome)
            pending[field] = pending.get(field, 0) + 1
            for field in keyed:
                self.pending_keys[field] = self.pending_keys.get(field, 0) + 1
        if outcome == "allowed":
            for state in decision.limits:
                if state.remaining <= _FAR_SHARE * state.burst and state.burst > 0:  # most stop here
                    self._near(decision, state.name, (state.burst - state.remaining) / state.burst)
        elif outcome in LISTING and decision.limit:
            self._list(decision)

    def _keyed(self, decision: Decision) -> list[tuple[str, str, str]]:
        """The listed keys this decision is traffic of."""
        keyed = []
        policy = decision.policy
        config = catalog.find(policy)
        for limit in config.limits if config else ():
            listed = self.listed.get((policy, limit.name))
            if listed:
                key = _key_of(decision, limit.key)
                if key in listed:
                    keyed.append((policy, limit.name, key))
        return keyed

    def decision_totals(self) -> dict[tuple[str, str, str], int]:
        """Every decision this process counted, by (policy, binding limit, outcome)."""
        with self.lock:
            self._fold()
            totals = {field: n for field, n in self.totals.items() if field[2] != "seen"}
            for field, n in self._pending.items():
                if field[2] != "seen":
                    totals[field] = totals.get(field, 0) + n
        return totals

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
                self.listed_policies.add(decision.policy)
                field = (decision.policy, limit.name, key)  # this decision is the key's traffic too
                self.pending_keys[field] = self.pending_keys.get(field, 0) + 1

    def _near(self, decision: Decision, limit_name: str, share: float) -> None:
        config = catalog.find(decision.policy)
        limit = next((lim for lim in config.limits if lim.name == limit_name), None) if config else None
        if limit is None:
            return
        descriptors = {n: decision.descriptors[n] for n in limit.key if n in decision.descriptors}
        field = (decision.policy, limit_name, key_of(descriptors))
        with self.lock:
            known = self.pending_near.get(field)
            if known is None and len(self.pending_near) >= MAX_NEAR:
                return
            if known is None or known[0] < share:
                self.pending_near[field] = (share, descriptors)

    def _step(self) -> float:
        self.flush()
        return _interval()

    def stop(self) -> None:
        self.worker.stop()
        self.flush()

    def flush(self, now: float | None = None) -> bool:
        """Write the pending counts to Redis; on failure keep them for the next flush. Never
        raises. The Prometheus counter is brought up to date too (another process may serve
        the scrapes: ``prometheus_client``'s multiprocess mode)."""
        metrics.export()
        with self.lock:
            self._fold()
            counts, keys, self._pending, self.pending_keys = self._pending, self.pending_keys, {}, {}
            near, self.pending_near = self.pending_near, {}
            for field, n in counts.items():
                self.totals[field] = self.totals.get(field, 0) + n
        if not counts and not keys and not near:
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
            if near:
                name = _redis_key("n", hour)
                pipe.zadd(name, {json.dumps([*field, d], sort_keys=True): share
                                 for field, (share, d) in near.items()}, gt=True)
                pipe.zremrangebyrank(name, 0, -NEAR_KEPT - 1)  # keep the highest shares
                pipe.expire(name, HOUR_TTL)
            pipe.execute()
            return True
        except Exception as exc:
            logger.warning("django_gcra: could not write decision counts (kept for the next flush): %s", exc)
            with self.lock:
                for field, n in counts.items():
                    self._pending[field] = self._pending.get(field, 0) + n
                    self.totals[field] -= n
                for field, n in keys.items():
                    self.pending_keys[field] = self.pending_keys.get(field, 0) + n
                for field, entry in near.items():
                    if len(self.pending_near) < MAX_NEAR and entry[0] > self.pending_near.get(field, (0.0,))[0]:
                        self.pending_near[field] = entry
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


def read_near(since: float, until: float, count: int = 10) -> list[dict[str, Any]]:
    """The keys near their quota in the hours overlapping the period, highest used share
    first: ``{"policy", "limit", "key", "descriptors", "share"}``. At most ``NEAR_KEPT``
    per hour are read. Raises on a Redis error."""
    pipe = cache_connection().pipeline(transaction=False)
    for bucket in _buckets(since, until, HOUR):
        pipe.zrevrange(_redis_key("n", bucket), 0, NEAR_KEPT - 1, withscores=True)
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rows in pipe.execute():
        for member, share in rows:
            try:
                policy, limit, key, descriptors = json.loads(member)
            except (ValueError, TypeError):
                continue
            found = best.get((policy, limit, key))
            if found is None or found["share"] < share:
                best[(policy, limit, key)] = {"policy": policy, "limit": limit, "key": key,
                                              "descriptors": descriptors, "share": float(share)}
    return sorted(best.values(), key=lambda r: (-r["share"], r["policy"], r["limit"], r["key"]))[:count]


tally = Tally()
metrics.count_decisions_from(tally.decision_totals)


@after_fork
def _forked() -> None:
    """In a forked child: counts of its own (the parent flushes and exports what it
    counted; a child keeping a copy would count it twice), with fresh locks."""
    tally.forget()
    metrics.forget_exported()


on_decision = tally.observe  # the observer of every decision (apps.ready puts it in signals.observers)
