"""Prometheus counters, when ``prometheus_client`` is installed; a no-op otherwise.

Labels are bounded by configuration, never by traffic: policy, limit and outcome names
come from settings, so no key, tenant or user ever becomes a label. Fallback decisions
(the store was unreachable) are counted apart, so failing open never looks like
healthy traffic. Concurrency slots (per process: held now, and since start acquired,
released, refused, expired by ttl, abandoned, release failures) are read from the
engine in force's slot book when scraped.

``django_gcra_decisions_total`` is not incremented per decision: the console's counts
(``tally``) already count every decision by policy, limit and outcome (one dict increment),
and the counter is brought up to them whenever it is collected in this process (a scrape,
``get_sample_value``) and after every flush of those counts (so with ``prometheus_client``'s
multiprocess mode, a scrape served by another process sees a worker's decisions within
``AUDIT['FLUSH_INTERVAL']``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from . import engine, otel
from .backends.slots import SlotStats
from .decision import OUTCOMES, Decision, outcome_of

__all__ = ["AVAILABLE", "OUTCOMES", "count_decisions_from", "export", "forget_exported", "on_decision", "outcome_of"]

logger = logging.getLogger("django_gcra")


def _slots() -> dict[str, int]:
    """The slot counters of the engine in force (none before the first decision)."""
    running = engine.running
    return SlotStats.none() if running is None else running.slots.stats.snapshot()


def _settles() -> dict[tuple[str, str], int]:
    running = engine.running
    return {} if running is None else running.settler.stats.snapshot()

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


class _Exporter:
    """Collected before the counters (registered first): brings them up to date."""

    def describe(self) -> list[Any]:
        return []  # no metric of its own (and not collected when registered)

    def collect(self) -> Any:
        export()
        return iter(())


if AVAILABLE:
    try:
        prometheus_client.REGISTRY.register(_Exporter())
    except ValueError:  # pragma: no cover (a second import of this module)
        pass
    DECISIONS = _counter("django_gcra_decisions_total", "Rate-limit decisions by policy, limit and outcome.",
                         ("policy", "limit", "outcome"))
    FALLBACK = _counter("django_gcra_fallback_decisions_total",
                        "Decisions made without the store (on_failure), by policy and outcome.", ("policy", "outcome"))
    WAITED = _counter("django_gcra_waited_seconds_total",
                      "Seconds decisions waited for a reserved slot (shaping), by policy and limit.",
                      ("policy", "limit"))
    AUDIT_FAILURES = _counter("django_gcra_audit_write_failures_total",
                              "Audit flushes that failed to write (their rows are kept for the next one).", ())
    AUDIT_DROPPED = _counter("django_gcra_audit_dropped_total",
                             "Audit records dropped: the in-memory buffer was full, or the write at exit failed.",
                             ())


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

        snap = _slots()
        yield GaugeMetricFamily("django_gcra_concurrency_slots_held", "Concurrency slots this process holds now.",
                                value=snap["held"])
        for name, doc in SLOT_COUNTERS.items():
            yield CounterMetricFamily(f"django_gcra_concurrency_slots_{name}", doc, value=snap[name])


if AVAILABLE:
    try:
        prometheus_client.REGISTRY.register(SlotCollector())
    except ValueError:  # a second import of this module: the first one's collector is registered
        pass


class SettleCollector:
    """``decision.settle`` in this process, by policy and outcome (applied, failed), read at scrape time."""

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily("django_gcra_settles", "Metered costs settled after the response, by policy "
                                     "and outcome (applied; failed: logged, never failing the response).",
                                     labels=("policy", "outcome"))
        for (policy, outcome), total in sorted(_settles().items()):
            family.add_metric((policy, outcome), total)
        yield family


if AVAILABLE:
    try:
        prometheus_client.REGISTRY.register(SettleCollector())
    except ValueError:  # a second import of this module: the first one's collector is registered
        pass


_children: dict[tuple[str, str, str], Any] = {}  # labels -> the labelled child's inc


_source: Callable[[], Mapping[tuple[str, str, str], int]] | None = None
_exported: dict[tuple[str, str, str], int] = {}
_export_lock = threading.Lock()


def count_decisions_from(source: Callable[[], Mapping[tuple[str, str, str], int]]) -> None:
    """Feed ``django_gcra_decisions_total`` from ``source``: every decision counted so far
    in this process, by (policy, limit, outcome) (``tally`` calls this when imported)."""
    global _source
    _source = source
    otel.count_decisions_from(source)  # OpenTelemetry's counter, when on, observes the same counts


def forget_exported() -> None:
    """A forked child's counts start empty (``tally``): so does what it exported."""
    global _export_lock
    _export_lock = threading.Lock()
    _exported.clear()


def export() -> None:
    """Add the decisions counted since the last export to the counter. Never raises."""
    if not AVAILABLE or _source is None:
        return
    try:
        with _export_lock:
            for labels, total in _source().items():
                done = _exported.get(labels, 0)
                if total > done:
                    inc = _children.get(labels)
                    if inc is None:
                        inc = _children[labels] = DECISIONS.labels(*labels).inc
                    inc(total - done)
                _exported[labels] = total
    except Exception:  # metrics never fail a scrape or a flush
        logger.exception("django_gcra: could not export the decision counts")


def on_decision(sender: Any, decision: Decision, request: Any = None, **kwargs: Any) -> None:
    """Observer of the notable decisions (``signals.notable_observers``): what the console's
    counts do not count, the seconds waited and the fallback decisions."""
    if not AVAILABLE or not (decision.fallback or decision.waited > 0):
        return  # the common case: counted by ``tally``, exported from there
    try:
        if decision.waited > 0:
            WAITED.labels(decision.policy, decision.limit).inc(decision.waited)
        if decision.fallback:
            FALLBACK.labels(decision.policy, outcome_of(decision)).inc()
    except Exception:  # metrics never fail a request
        logger.exception("django_gcra: could not count a decision")


def audit_failed(rows: int) -> None:
    otel.audit_failed(rows)
    if AVAILABLE:
        AUDIT_FAILURES.inc()
        AUDIT_DROPPED.inc(rows)


def audit_dropped(records: int = 1) -> None:
    otel.audit_dropped(records)
    if AVAILABLE:
        AUDIT_DROPPED.inc(records)
