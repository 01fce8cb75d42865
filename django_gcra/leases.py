"""Local token leases: most decisions of a leased policy are served from memory.

``store.backend_for(policy)`` calls ``leasing_backend()``: a policy with a ``lease`` is
decided by one ``LeasingBackend`` (``backends/lease_backend.py``) per process around the store. ``lease_stats()`` reads
the counters (Redis calls saved, leased units, stranded units) per policy.
See docs/howto/leases.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import fields
from typing import Any

from .backends import Backend
from .backends.lease_backend import LeaseStats, LeasingBackend
from .conf import get_settings, on_change
from .policy import Lease, PerPolicy, Policy
from .worker import after_fork

__all__ = ["LeaseCollector", "LeaseStats", "LeasingBackend", "drop_leases", "lease_stats", "leasing_backend",
           "reset_leases"]

_wrappers: dict[tuple[int, str, Lease], LeasingBackend] = {}
generation = 0  # moved by every reset: a backend memoized under an older number is stale (store.backend_for)
_wrappers_lock = threading.Lock()


# policy -> (inner, wrapper): one dict lookup instead of hashing the Lease.
_by_policy: PerPolicy[tuple[Backend, LeasingBackend]] = PerPolicy()


def leasing_backend(inner: Backend, policy: Policy) -> Backend:
    """The backend deciding ``policy``: ``inner`` itself, or its lease wrapper if leased."""
    if policy.lease is None:
        return inner
    found = _by_policy.get(policy)
    if found is not None and found[0] is inner:
        return found[1]
    return _by_policy.put(policy, (inner, _wrapper(inner, policy)))[1]


def _wrapper(inner: Backend, policy: Policy) -> LeasingBackend:
    assert policy.lease is not None
    key = (id(inner), policy.name, policy.lease)
    wrapper = _wrappers.get(key)
    if wrapper is None or wrapper.inner is not inner:
        with _wrappers_lock:
            wrapper = _wrappers.get(key)
            if wrapper is None or wrapper.inner is not inner:
                lease = policy.lease
                wrapper = _wrappers[key] = LeasingBackend(inner, lease.size, lease.ttl, lease.low_water,
                                                          max_keys=get_settings().lease_max_keys)
    return wrapper


def lease_stats() -> dict[str, LeaseStats]:
    """Counters per leased policy in this process, summed over its wrappers."""
    totals: dict[str, LeaseStats] = {}
    with _wrappers_lock:
        items = [(name, wrapper.stats()) for (_, name, _), wrapper in _wrappers.items()]
    for name, stats in items:
        total = totals.setdefault(name, LeaseStats())
        for f in fields(LeaseStats):
            setattr(total, f.name, getattr(total, f.name) + getattr(stats, f.name))
    return totals


def drop_leases(policy: str, keys: Iterable[str]) -> int:
    """Forget this process's leases of ``keys`` in every wrapper of ``policy`` (``django_gcra.reset``)."""
    keys = tuple(keys)
    with _wrappers_lock:
        wrappers = [wrapper for (_, name, _), wrapper in _wrappers.items() if name == policy]
    return sum(wrapper.drop(keys) for wrapper in wrappers)


@on_change
def reset_leases() -> None:
    """Forget every lease and counter in this process (tests; a changed configuration)."""
    global generation
    with _wrappers_lock:
        generation += 1
        _wrappers.clear()
        _by_policy.clear()


@after_fork
def _forget_in_child() -> None:
    # A forked worker must not spend the units its parent holds: both would admit them.
    global _wrappers_lock, generation
    _wrappers_lock = threading.Lock()
    generation += 1
    _wrappers.clear()
    _by_policy.clear()


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
