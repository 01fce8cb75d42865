"""OpenTelemetry: the Prometheus counters as OTel instruments, and the decision on the span.

On when ``DJANGO_GCRA["OTEL"]`` is True and ``opentelemetry-api`` is installed (system
checks E140, E141 otherwise). Off, nothing of it runs: no observer is registered, no
instrument is made, ``opentelemetry`` is not imported.

On:

- every decision sets ``ratelimit.policy``, ``ratelimit.limit``, ``ratelimit.allowed`` and
  ``ratelimit.outcome`` on the current span (when it is recording; with several decisions
  on one request the span holds the last one);
- the meter ``django_gcra`` has the counters Prometheus exports (``metrics.py``), with the
  same names and attributes: ``django_gcra_decisions_total`` (policy, limit, outcome),
  ``django_gcra_fallback_decisions_total`` (policy, outcome),
  ``django_gcra_waited_seconds_total`` (policy, limit), the audit trail's
  ``django_gcra_audit_write_failures_total`` and ``django_gcra_audit_dropped_total``, and
  this process's concurrency slots (``django_gcra_concurrency_slots_held`` and
  ``django_gcra_concurrency_slots_<acquired|released|...>``). Attributes are bounded by
  configuration, never a key, tenant or user.

The decision counts are not added per decision: they are the console's counts (``tally``,
one dict increment per decision), observed when the meter's reader collects, as the
Prometheus counter is. The fallback decisions and waited seconds are added by an observer
of the notable decisions (``signals.notable_observers``), like Prometheus's.

The instruments come from the global ``MeterProvider`` (``opentelemetry.metrics``), so set
the SDK's provider (or the auto-instrumentation's) before the first decision is counted;
until then the API's proxy meter records nothing and hands the instruments over once set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.conf import settings as django_settings

from . import engine
from .backends.slots import SlotStats
from .conf import on_change, otel_installed
from .decision import Decision, outcome_of
from .signals import notable_observers, observers

__all__ = ["audit_dropped", "audit_failed", "count_decisions_from", "enabled", "observe", "on_decision",
           "on_notable"]

logger = logging.getLogger("django_gcra")


def _slots() -> dict[str, int]:
    """The slot counters of the engine in force (none before the first decision)."""
    running = engine.running
    return SlotStats.none() if running is None else running.slots.stats.snapshot()

SLOT_FIELDS = ("acquired", "released", "refused", "expired", "abandoned", "release_failures")

_source: Callable[[], Mapping[tuple[str, str, str], int]] | None = None


def count_decisions_from(source: Callable[[], Mapping[tuple[str, str, str], int]]) -> None:
    """Observe ``django_gcra_decisions_total`` from ``source`` (``metrics`` passes the console's counts)."""
    global _source
    _source = source


def enabled() -> bool:
    """True while the observers are registered (``OTEL`` is True and OpenTelemetry installed)."""
    return on_decision in observers


class _Instruments:
    """The meter's instruments, made once per process on the first ``observe`` that turns it on."""

    def __init__(self) -> None:
        from opentelemetry import metrics

        meter = metrics.get_meter("django_gcra")
        self.fallback = meter.create_counter(
            "django_gcra_fallback_decisions_total", unit="{decision}",
            description="Decisions made without the store (on_failure), by policy and outcome.")
        self.waited = meter.create_counter(
            "django_gcra_waited_seconds_total", unit="s",
            description="Seconds decisions waited for a reserved slot (shaping), by policy and limit.")
        self.audit_failures = meter.create_counter(
            "django_gcra_audit_write_failures_total", unit="{flush}",
            description="Audit flushes that failed to write (their rows are kept for the next one).")
        self.audit_dropped = meter.create_counter(
            "django_gcra_audit_dropped_total", unit="{record}",
            description="Audit records dropped: the in-memory buffer was full, or the write at exit failed.")
        meter.create_observable_counter(
            "django_gcra_decisions_total", callbacks=[_decisions], unit="{decision}",
            description="Rate-limit decisions by policy, limit and outcome.")
        meter.create_observable_gauge(
            "django_gcra_concurrency_slots_held", callbacks=[_slots_held], unit="{slot}",
            description="Concurrency slots this process holds now.")
        for field in SLOT_FIELDS:
            meter.create_observable_counter(
                f"django_gcra_concurrency_slots_{field}", callbacks=[_slot_counter(field)], unit="{slot}",
                description=f"Concurrency slots {field.replace('_', ' ')} in this process (see metrics.py).")


_instruments: _Instruments | None = None


def _decisions(options: Any) -> Iterator[Any]:
    if not enabled() or _source is None:
        return
    from opentelemetry.metrics import Observation

    try:
        totals = dict(_source())
    except Exception:  # metrics never fail a collection
        logger.exception("django_gcra: could not read the decision counts")
        return
    for (policy, limit, outcome), total in totals.items():
        yield Observation(total, {"policy": policy, "limit": limit, "outcome": outcome})


def _slots_held(options: Any) -> Iterator[Any]:
    if enabled():
        from opentelemetry.metrics import Observation

        yield Observation(_slots()["held"])


def _slot_counter(field: str) -> Callable[[Any], Iterator[Any]]:
    def observe_slots(options: Any) -> Iterator[Any]:
        if enabled():
            from opentelemetry.metrics import Observation

            yield Observation(_slots()[field])

    return observe_slots


def on_decision(sender: Any, decision: Decision, request: Any = None, **kwargs: Any) -> None:
    """Observer of every decision (``signals.observers``, only while on): the current span's attributes."""
    try:
        from opentelemetry import trace

        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes({"ratelimit.policy": decision.policy, "ratelimit.limit": decision.limit,
                                 "ratelimit.allowed": decision.allowed, "ratelimit.outcome": outcome_of(decision)})
    except Exception:  # telemetry never fails a request
        logger.exception("django_gcra: could not set the span's rate-limit attributes")


def on_notable(sender: Any, decision: Decision, request: Any = None, **kwargs: Any) -> None:
    """Observer of the notable decisions (only while on): the fallback decisions and seconds waited."""
    made = _instruments
    if made is None or not (decision.fallback or decision.waited > 0):
        return
    try:
        if decision.waited > 0:
            made.waited.add(decision.waited, {"policy": decision.policy, "limit": decision.limit})
        if decision.fallback:
            made.fallback.add(1, {"policy": decision.policy, "outcome": outcome_of(decision)})
    except Exception:  # telemetry never fails a request
        logger.exception("django_gcra: could not count a decision in OpenTelemetry")


def audit_failed(rows: int) -> None:
    if _instruments is not None and enabled():
        _instruments.audit_failures.add(1)
        _instruments.audit_dropped.add(rows)


def audit_dropped(records: int = 1) -> None:
    if _instruments is not None and enabled():
        _instruments.audit_dropped.add(records)


def _wanted() -> bool:
    """``OTEL`` is True (read raw: a value in error is reported by the checks, E140) and
    OpenTelemetry's API is importable (E141 otherwise)."""
    raw = getattr(django_settings, "DJANGO_GCRA", {})
    return isinstance(raw, Mapping) and raw.get("OTEL") is True and otel_installed()


def observe() -> None:
    """Register the observers exactly while OpenTelemetry is on (``AppConfig.ready`` and
    every settings change call it); the instruments are made the first time it is."""
    global _instruments
    wanted = _wanted()
    if wanted and _instruments is None:
        _instruments = _Instruments()
    for hooks, observer in ((observers, on_decision), (notable_observers, on_notable)):
        present = observer in hooks
        if wanted and not present:
            hooks.append(observer)
        elif present and not wanted:
            hooks.remove(observer)


on_change(observe)
