"""The lease wrappers of one engine: a policy with a ``lease`` is decided by one
``LeasingBackend`` (``backends/lease_backend.py``) per store around it, whose prefetches
share the book's ``Prefetchers``. ``leases.lease_stats()`` reads the book's counters.
See docs/howto/leases.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import fields

from .backends import Backend
from .backends.lease_backend import LeaseStats, LeasingBackend
from .backends.prefetchers import Prefetchers
from .policy import Lease, Policy

__all__ = ["LeaseBook"]


class LeaseBook:
    """Every lease wrapper of one engine, by (store, policy name, lease)."""

    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys  # LEASE_MAX_KEYS: keys leased at once per wrapper
        self.prefetchers = Prefetchers()
        self._wrappers: dict[tuple[int, str, Lease], LeasingBackend] = {}
        self._lock = threading.Lock()

    def wrap(self, inner: Backend, policy: Policy) -> Backend:
        """The backend deciding ``policy`` on ``inner``: ``inner`` itself, or its lease wrapper."""
        lease = policy.lease
        if lease is None:
            return inner
        key = (id(inner), policy.name, lease)
        with self._lock:
            wrapper = self._wrappers.get(key)
            if wrapper is None or wrapper.inner is not inner:
                wrapper = self._wrappers[key] = LeasingBackend(inner, lease.size, lease.ttl, lease.low_water,
                                                               max_keys=self.max_keys,
                                                               prefetchers=self.prefetchers)
        return wrapper

    def stats(self) -> dict[str, LeaseStats]:
        """Counters per leased policy, summed over its wrappers."""
        totals: dict[str, LeaseStats] = {}
        with self._lock:
            items = [(name, wrapper.stats()) for (_, name, _), wrapper in self._wrappers.items()]
        for name, stats in items:
            total = totals.setdefault(name, LeaseStats())
            for f in fields(LeaseStats):
                setattr(total, f.name, getattr(total, f.name) + getattr(stats, f.name))
        return totals

    def drop(self, policy: str, keys: Iterable[str]) -> int:
        """Forget the leases of ``keys`` in every wrapper of ``policy`` (``django_gcra.reset``)."""
        keys = tuple(keys)
        with self._lock:
            wrappers = [wrapper for (_, name, _), wrapper in self._wrappers.items() if name == policy]
        return sum(wrapper.drop(keys) for wrapper in wrappers)

    def close(self) -> None:
        self.prefetchers.close()
