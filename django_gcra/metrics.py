"""Prometheus counters, when ``prometheus_client`` is installed; a no-op otherwise.

Labels are bounded by configuration, never by traffic: policy, limit and outcome names
come from settings, so no key, tenant or user ever becomes a label. Fallback decisions
(the store was unreachable) are counted apart, so failing open never looks like
healthy traffic. Concurrency slots (per process: held now, and since start acquired,
released, refused, expired by ttl, abandoned, release failures) are read from
``backends.slots.stats`` when scraped.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from .backends.slots import stats as slot_stats
from .decision import Decision

__all__ = ["AVAILABLE", "OUTCOMES", "on_decision", "outcome_of"]

logger = logging.getLogger("django_gcra")

#: Every outcome label. ``fallback_*`` and ``unavailable`` (on_failure="closed") are
#: the decisions made without the store. ``waited``: allowed after waiting for a reserved
#: slot (shaping, ``max_wait``); a refusal beyond ``max_wait`` is ``denied``.
OUTCOMES = ("allowed", "waited", "denied", "shadow_denied", "fallback_allowed", "fallback_denied", "unavailable")


def outcome_of(decision: Decision) -> str:
    """The outcome label of one decision (shared by metrics and the audit trail)."""
    if decision.allowed and not (decision.shadow or decision.fallback or decision.waited):
        return "allowed"  # the common case first
    if decision.unavailable:
        return "unavailable"
    if decision.fallback:
        return "fallback_allowed" if decision.allowed else "fallback_denied"
    if not decision.allowed:
        return "denied"
    if decision.shadow:
        return "shadow_denied"
    return "waited" if decision.waited > 0 else "allowed"


try:
    import prometheus_client
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    prometheus_client = None  # type: ignore[assignment]

AVAILABLE = prometheus_client is not None


def _counter(name: str, doc: str, labels: tuple[str, ...]) -> Any:
    """A counter in the default registry; if this module was imported a second time (a
    reload), the first import's counters stay the exported ones and this copy's are not."""
    try:
        return prometheus_client.Counter(name, doc, labels)
    except ValueError:
        logger.warning("django_gcra: metric %s is already registered; this copy of the module is not exported",
                       name)
        return prometheus_client.Counter(name, doc, labels, registry=None)


if AVAILABLE:
    DECISIONS = _counter("django_gcra_decisions_total", "Rate-limit decisions by policy, limit and outcome.",
                         ("policy", "limit", "outcome"))
    FALLBACK = _counter("django_gcra_fallback_decisions_total",
                        "Decisions made without the store (on_failure), by policy and outcome.", ("policy", "outcome"))
    WAITED = _counter("django_gcra_waited_seconds_total",
                      "Seconds decisions waited for a reserved slot (shaping), by policy and limit.",
                      ("policy", "limit"))
    AUDIT_FAILURES = _counter("django_gcra_audit_write_failures_total",
                              "Audit flushes that failed to write (their rows are lost).", ())
    AUDIT_DROPPED = _counter("django_gcra_audit_dropped_total",
                             "Audit records dropped because the in-memory buffer was full or a write failed.", ())


SLOT_COUNTERS = {
    "acquired": "Concurrency slots taken by allowed decisions.",
    "released": "Concurrency slots released (by the surfaces, release(), or when a forgotten decision was collected).",
    "refused": "Decisions refused because a concurrency limit was full.",
    "expired": "Concurrency slots found expired by ttl (their holder died or stopped extending them).",
    "abandoned": "Concurrency slots of decisions collected without release() (released then).",
    "release_failures": "Concurrency slot releases that failed to reach the store (freed by their ttl).",
}


class SlotCollector:
    """This process's concurrency slots, read at scrape time."""

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = slot_stats.snapshot()
        yield GaugeMetricFamily("django_gcra_concurrency_slots_held", "Concurrency slots this process holds now.",
                                value=snap["held"])
        for name, doc in SLOT_COUNTERS.items():
            yield CounterMetricFamily(f"django_gcra_concurrency_slots_{name}", doc, value=snap[name])


if AVAILABLE:
    try:
        prometheus_client.REGISTRY.register(SlotCollector())
    except ValueError:  # a second import of this module: the first one's collector is registered
        pass


_children: dict[tuple[str, str, str], Any] = {}


def _inc_of(child: Any) -> Callable[[], None]:
    """``child.inc`` as one call: a labelled child's own value's ``inc(1)`` when the client
    has one (its ``inc`` checks, per call, what holds for every child: observable, amount
    >= 0, no exemplar), else ``child.inc``."""
    value_inc = getattr(getattr(child, "_value", None), "inc", None)
    if callable(value_inc) and child._is_observable():
        return functools.partial(value_inc, 1)
    inc: Callable[[], None] = child.inc
    return inc


def on_decision(sender: Any, decision: Decision, **kwargs: Any) -> None:
    """Observer of every decision (``signals.observers``): count it."""
    if not AVAILABLE:
        return
    try:
        outcome = outcome_of(decision)
        labels = (decision.policy, decision.limit, outcome)
        inc = _children.get(labels)
        if inc is None:  # labels() costs a lock and a lookup; policies and limits are few
            inc = _children[labels] = _inc_of(DECISIONS.labels(*labels))
        inc()
        if decision.waited > 0:
            WAITED.labels(decision.policy, decision.limit).inc(decision.waited)
        if decision.fallback:
            FALLBACK.labels(decision.policy, outcome).inc()
    except Exception:  # metrics never fail a request
        logger.exception("django_gcra: could not count a decision")


def audit_failed(rows: int) -> None:
    if AVAILABLE:
        AUDIT_FAILURES.inc()
        AUDIT_DROPPED.inc(rows)


def audit_dropped(records: int = 1) -> None:
    if AVAILABLE:
        AUDIT_DROPPED.inc(records)
