"""The engine's regional shares seen from outside: ``on_decision``, the observer that counts
a region's demand (kept among ``signals.observers`` exactly while ``REGIONS`` is set, by
``observe_demand``), and ``RegionCollector``, this process's share and demand for
``prometheus_client``. The share state itself is the engine's (``Engine.shares``,
``regions/shares.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings as django_settings

from . import engine
from .conf import on_change
from .regions import sync
from .signals import observers

__all__ = ["RegionCollector", "observe_demand", "on_decision"]


def on_decision(sender: Any, decision: Any, request: Any = None) -> None:
    """Observer of every decision while ``REGIONS`` is set: count the units asked of each
    limit in force, in memory (the engine in force's shares)."""
    running = engine.running
    if running is not None:
        sync.observe(running.shares, decision)


@on_change
def observe_demand() -> None:
    """Keep ``on_decision`` first among ``signals.observers`` exactly while the settings
    name ``REGIONS`` (read raw: settings in error keep it, and their decisions raise
    anyway), so that a process without regions makes one call less per decision. Called
    by ``AppConfig.ready`` and on every settings change."""
    raw = getattr(django_settings, "DJANGO_GCRA", {})
    wanted = not isinstance(raw, Mapping) or raw.get("REGIONS") is not None
    present = on_decision in observers
    if wanted and not present:
        observers.insert(0, on_decision)
    elif present and not wanted:
        observers.remove(on_decision)


class RegionCollector:
    """A ``prometheus_client`` collector of this process's region: the share it enforces of
    each shared limit, and the units asked of each limit here. Register it yourself:
    ``prometheus_client.REGISTRY.register(RegionCollector())``. Labelled by region, policy
    and limit (bounded by configuration)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        running = engine.running  # (none yet: nothing counted)
        regions = None if running is None else running.settings.regions
        if running is None or regions is None:
            return
        share = GaugeMetricFamily("django_gcra_region_share", "The share of a shared limit this region enforces",
                                  labels=["region", "policy", "limit"])
        demand = CounterMetricFamily("django_gcra_region_demand_units", "Units asked of a limit in this region",
                                     labels=["region", "policy", "limit"])
        state = running.shares
        with state.demand_lock:
            totals = dict(state.totals)
        for name in sorted(n for n in set(state.shares) | set(totals) if n.count("/") == 1):  # no key labels
            policy, _, limit = name.partition("/")
            vector = state.shares.get(name)
            share.add_metric([regions.local, policy, limit],
                             vector.get(regions.local, regions.equal) if vector else regions.equal)
            if name in totals:
                demand.add_metric([regions.local, policy, limit], totals[name])
        yield share
        yield demand
