"""Local token leases: most decisions of a leased policy are served from memory.

The running engine's ``LeaseBook`` (``lease_book.py``) keeps one ``LeasingBackend`` per
leased policy and store. ``lease_stats()`` reads the counters (Redis calls saved, leased
units, stranded units) per policy. See docs/howto/leases.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import engine
from .backends.lease_backend import LeaseStats, LeasingBackend

__all__ = ["LeaseCollector", "LeaseStats", "LeasingBackend", "lease_stats"]


def lease_stats() -> dict[str, LeaseStats]:
    """Counters per leased policy in this process, summed over its wrappers (since the
    settings last changed: a new configuration starts new leases; none before the first
    decision, so a collector registered early never builds the engine)."""
    running = engine.running
    return {} if running is None else running.leases.stats()


class LeaseCollector:
    """A ``prometheus_client`` collector of ``lease_stats()``; register it yourself:
    ``prometheus_client.REGISTRY.register(LeaseCollector())``. Labelled by policy only."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = lease_stats()
        for name, help_text, kind in (
            ("decisions", "Decisions of leased policies", CounterMetricFamily),
            ("local", "Leased-policy decisions served from memory", CounterMetricFamily),
            ("store_calls", "Store script calls made by leased policies", CounterMetricFamily),
            ("leased_units", "Units taken from the store into local leases", CounterMetricFamily),
            ("stranded_units", "Leased units that expired or were evicted unused", CounterMetricFamily),
            ("held_units", "Leased units held in this process now", GaugeMetricFamily),
        ):
            family = kind(f"django_gcra_lease_{name}", help_text, labels=["policy"])
            for policy, values in sorted(stats.items()):
                family.add_metric([policy], getattr(values, name))
            yield family
