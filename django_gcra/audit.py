"""The audit trail, off the request path.

An observer of the notable decisions (``signals.notable_observers``) records denials (``denied``), shadow would-denies
(``shadow_denied``) and the denials made without the store (``fallback_denied``: the
local fallback's, and a ``closed`` policy's refusals while the store is unreachable,
whose limit is blank) and the refusals of a deny rule (``blocked``, limit blank, keyed by
every descriptor the decision holds) into an in-memory buffer. Records are coalesced per
(policy, limit, key, outcome): a flood of
denials for one key is one buffer entry with a count. A background thread writes the
buffer every ``AUDIT['FLUSH_INTERVAL']`` seconds with one ``bulk_create``, so a flush
interval yields at most one row per (policy, limit, key, outcome). The buffer holds at
most ``AUDIT['MAX_BUFFER']`` distinct entries; records beyond it are dropped and
counted. A failed write (a locked or unreachable database) is logged and counted, never
raised, and its rows are kept for the next flush (within the same bound): the request
never waits for, nor fails because of, the database, and a passing failure loses nothing.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from django.db import close_old_connections

from . import catalog
from .conf import get_settings
from .decision import Decision, outcome_of
from .keys import escape
from .metrics import audit_dropped, audit_failed
from .worker import Worker

__all__ = ["AuditRecorder", "key_of", "on_decision", "recorder"]

logger = logging.getLogger("django_gcra")

AUDITED = frozenset({"denied", "shadow_denied", "fallback_denied", "blocked"})
MAX_KEY = 255


def key_of(descriptors: Mapping[str, str]) -> str:
    """``name=value,...`` in name order, each value escaped as in a Redis key (so no value
    can forge a separator); too long: a prefix and a digest, still unique."""
    key = ",".join(f"{name}={escape(descriptors[name])}" for name in sorted(descriptors))
    if len(key) > MAX_KEY:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        key = f"{key[:MAX_KEY - 17]}~{digest}"
    return key


def _identifying(decision: Decision) -> dict[str, str]:
    """The descriptors of the binding limit's key: who was (or would have been) denied."""
    policy = catalog.find(decision.policy)
    limit = next((lim for lim in policy.limits if lim.name == decision.limit), None) if policy else None
    names = limit.key if limit else decision.descriptors
    return {n: decision.descriptors[n] for n in names if n in decision.descriptors}


class _Entry:
    __slots__ = ("cost", "count", "descriptors", "first", "last", "method", "path", "retry")

    def __init__(self, now: float, descriptors: dict[str, str], method: str, path: str) -> None:
        self.count, self.cost, self.first, self.last, self.retry = 0, 0, now, now, 0.0
        self.descriptors, self.method, self.path = descriptors, method, path


class AuditRecorder:
    """The bounded buffer and its flusher (a ``Worker``, started on the first record)."""

    def __init__(self, autostart: bool = True) -> None:
        self.autostart = autostart
        self.buffer: dict[tuple[str, str, str, str], _Entry] = {}
        self.lock = threading.Lock()
        self.dropped = 0  # records lost to a full buffer or a failed write
        self.failures = 0  # failed writes
        self.worker = Worker("audit", self._step, first=_flush_interval)

    def record(self, decision: Decision, request: Any = None) -> None:
        outcome = outcome_of(decision)
        if outcome == "unavailable":  # failing closed: refused without the store
            outcome = "fallback_denied"
        if outcome not in AUDITED:
            return
        descriptors = _identifying(decision)
        bucket = (decision.policy, decision.limit, key_of(descriptors), outcome)
        retry = decision.retry_after if outcome != "shadow_denied" else decision.would_retry_after
        now = time.time()
        with self.lock:
            entry = self.buffer.get(bucket)
            if entry is None:
                if len(self.buffer) >= get_settings().audit.max_buffer:
                    self.dropped += 1
                    audit_dropped()
                    return
                method = getattr(request, "method", None) or ""
                path = (getattr(request, "path", None) or "")[:255]
                entry = self.buffer[bucket] = _Entry(now, descriptors, method, path)
            entry.count += 1
            entry.cost += decision.cost
            entry.last = now
            entry.retry = max(entry.retry, retry)
        if self.autostart:
            self.worker.start()

    def _step(self) -> float:
        try:
            close_old_connections()  # the worker's own connection: drop it if broken or too old
        except Exception:
            pass  # flush() reports the failure if the database is really unusable
        self.flush()
        return _flush_interval()

    def stop(self) -> None:
        """Stop the flusher after a last flush."""
        self.worker.stop()
        self.flush()

    def flush(self, traceback: bool = True) -> int:
        """Write the buffer now; return the rows written. Never raises."""
        with self.lock:
            batch, self.buffer = self.buffer, {}
        if not batch:
            return 0
        try:
            from .models import AuditEvent

            rows = [self._row(AuditEvent, bucket, entry) for bucket, entry in batch.items()]
            AuditEvent.objects.bulk_create(rows, batch_size=500)  # (atomic: all rows or none)
        except Exception:
            kept, lost = self._keep(batch)
            self.failures += 1
            self.dropped += lost
            audit_failed(lost)
            logger.error("django_gcra: audit write failed; %d rows kept for the next flush, %d records lost "
                         "(the buffer was full)", kept, lost, exc_info=traceback)
            return 0
        return len(rows)

    def _keep(self, batch: dict[tuple[str, str, str, str], _Entry]) -> tuple[int, int]:
        """Put a batch that could not be written back into the buffer (merged with what came
        since, within ``MAX_BUFFER`` entries); return the rows kept and the records that did not fit."""
        kept = lost = 0
        try:
            limit = get_settings().audit.max_buffer
        except Exception:  # settings in error: keep what the buffer holds already
            limit = 0
        with self.lock:
            for bucket, entry in batch.items():
                newer = self.buffer.get(bucket)
                if newer is not None:  # the same key denied again meanwhile: one entry
                    newer.count += entry.count
                    newer.cost += entry.cost
                    newer.first = min(newer.first, entry.first)
                    newer.retry = max(newer.retry, entry.retry)
                    kept += 1
                elif len(self.buffer) < limit:
                    self.buffer[bucket] = entry
                    kept += 1
                else:
                    lost += entry.count
        return kept, lost

    @staticmethod
    def _row(model: Any, bucket: tuple[str, str, str, str], entry: _Entry) -> Any:
        policy, limit, key, outcome = bucket
        return model(
            time=datetime.fromtimestamp(entry.first, timezone.utc),
            last_time=datetime.fromtimestamp(entry.last, timezone.utc),
            policy=policy, limit=limit, outcome=outcome, key=key, descriptors=entry.descriptors,
            count=entry.count, cost=entry.cost, retry_after=None if entry.retry == float("inf") else entry.retry,
            method=entry.method, path=entry.path,
        )


def _flush_interval() -> float:
    try:
        return get_settings().audit.flush_interval
    except Exception:  # settings in error (the checks say which): keep flushing at the default
        return 2.0


recorder = AuditRecorder()


def on_decision(sender: Any, decision: Decision, request: Any = None, **kwargs: Any) -> None:
    """Observer of the notable decisions (``signals.notable_observers``): buffer the denials. Never raises."""
    if decision.allowed and not decision.shadow:
        return  # a fallback or waited admission: nothing to audit
    try:
        if get_settings().audit.enabled:
            recorder.record(decision, request)
    except Exception:
        logger.exception("django_gcra: could not record an audit event")


@atexit.register
def _flush_at_exit() -> None:
    """The last flush; what it cannot write has no next flush to wait for: it is lost, and said so."""
    if recorder.buffer and not recorder.flush(traceback=False) and recorder.buffer:
        lost = sum(entry.count for entry in recorder.buffer.values())
        recorder.dropped += lost
        audit_dropped(lost)
        logger.error("django_gcra: %d audit records lost at exit (the write failed)", lost)
