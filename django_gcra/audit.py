"""The audit trail, off the request path.

An observer of every decision (``signals.observers``) records denials (``denied``), shadow would-denies
(``shadow_denied``) and local-fallback denials (``fallback_denied``; a closed policy's
``unavailable`` answer is not a rate-limit denial and is only counted in metrics) into
an in-memory buffer. Records are coalesced per (policy, limit, key, outcome): a flood of
denials for one key is one buffer entry with a count. A background thread writes the
buffer every ``AUDIT['FLUSH_INTERVAL']`` seconds with one ``bulk_create``, so a flush
interval yields at most one row per (policy, limit, key, outcome). The buffer holds at
most ``AUDIT['MAX_BUFFER']`` distinct entries; records beyond it are dropped and
counted. A failed write is logged and counted, never raised: the request never waits
for, nor fails because of, the database.
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

from .conf import get_config, setting
from .decision import Decision
from .metrics import audit_dropped, audit_failed, outcome_of

__all__ = ["AUDIT_DEFAULTS", "AuditRecorder", "audit_setting", "key_of", "on_decision", "recorder"]

logger = logging.getLogger("django_gcra")

AUDIT_DEFAULTS: dict[str, Any] = {
    "ENABLED": True,
    "FLUSH_INTERVAL": 2.0,  # seconds between writes
    "MAX_BUFFER": 10_000,  # distinct (policy, limit, key, outcome) entries held between writes
    "RETENTION_DAYS": 30,  # gcra_prune_audit deletes older rows
}
AUDITED = frozenset({"denied", "shadow_denied", "fallback_denied"})
MAX_KEY = 255


def audit_setting(name: str) -> Any:
    """One ``AUDIT`` value; a value of the wrong type (system check E030) gives the default."""
    default = AUDIT_DEFAULTS[name]
    value = setting("AUDIT")
    value = (value if isinstance(value, Mapping) else {}).get(name, default)
    if isinstance(default, bool):
        return value if isinstance(value, bool) else default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return value if (value >= 0 if name == "RETENTION_DAYS" else value > 0) else default


def key_of(descriptors: Mapping[str, str]) -> str:
    """``name=value,...`` in name order; too long: a prefix and a digest, still unique."""
    key = ",".join(f"{name}={descriptors[name]}" for name in sorted(descriptors))
    if len(key) > MAX_KEY:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        key = f"{key[:MAX_KEY - 17]}~{digest}"
    return key


def _identifying(decision: Decision) -> dict[str, str]:
    """The descriptors of the binding limit's key: who was (or would have been) denied."""
    policy = get_config().policies.get(decision.policy)
    limit = next((lim for lim in policy.limits if lim.name == decision.limit), None) if policy else None
    names = limit.key if limit else decision.descriptors
    return {n: decision.descriptors[n] for n in names if n in decision.descriptors}


class _Entry:
    __slots__ = ("cost", "count", "descriptors", "first", "last", "method", "path", "retry")

    def __init__(self, now: float, descriptors: dict[str, str], method: str, path: str) -> None:
        self.count, self.cost, self.first, self.last, self.retry = 0, 0, now, now, 0.0
        self.descriptors, self.method, self.path = descriptors, method, path


class AuditRecorder:
    """The bounded buffer and its flusher thread (started on the first record)."""

    def __init__(self, autostart: bool = True) -> None:
        self.autostart = autostart
        self.buffer: dict[tuple[str, str, str, str], _Entry] = {}
        self.lock = threading.Lock()
        self.dropped = 0  # records lost to a full buffer or a failed write
        self.failures = 0  # failed writes
        self.written = 0  # rows written
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def record(self, decision: Decision, request: Any = None) -> None:
        outcome = outcome_of(decision)
        if outcome not in AUDITED:
            return
        descriptors = _identifying(decision)
        bucket = (decision.policy, decision.limit, key_of(descriptors), outcome)
        retry = decision.retry_after if outcome != "shadow_denied" else decision.would_retry_after
        now = time.time()
        with self.lock:
            entry = self.buffer.get(bucket)
            if entry is None:
                if len(self.buffer) >= int(audit_setting("MAX_BUFFER")):
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
        if self.autostart and (self._thread is None or not self._thread.is_alive()):
            self._start()

    def _start(self) -> None:
        with self.lock:
            if not self._stop.is_set() and (self._thread is None or not self._thread.is_alive()):  # or forked
                self._thread = threading.Thread(target=self._run, name="gcra-audit", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(float(audit_setting("FLUSH_INTERVAL"))):
            try:
                close_old_connections()  # the thread's own connection: drop it if broken or too old
            except Exception:
                pass  # flush() reports the failure if the database is really unusable
            self.flush()

    def stop(self) -> None:
        """Stop the flusher thread after a last flush."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
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
            AuditEvent.objects.bulk_create(rows, batch_size=500)
        except Exception:
            lost = sum(entry.count for entry in batch.values())
            self.failures += 1
            self.dropped += lost
            audit_failed(lost)
            logger.error("django_gcra: audit write failed; %d rows (%d records) lost", len(batch), lost,
                         exc_info=traceback)
            return 0
        self.written += len(rows)
        return len(rows)

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


recorder = AuditRecorder()


def on_decision(sender: Any, decision: Decision, request: Any = None, **kwargs: Any) -> None:
    """Observer of every decision (``signals.observers``): buffer the denials. Never raises."""
    if decision.allowed and not decision.shadow:
        return  # the common case, kept off every other cost
    try:
        if audit_setting("ENABLED"):
            recorder.record(decision, request)
    except Exception:
        logger.exception("django_gcra: could not record an audit event")


@atexit.register
def _flush_at_exit() -> None:
    if recorder.buffer:
        recorder.flush(traceback=False)
