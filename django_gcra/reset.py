"""Unblocking a caller: ``reset()`` clears the stored state of a policy's limits for some
descriptor values, in every region's store, and this process's leases of those keys.

Another process's lease of a key it cleared is not reached from here: that process serves
what it still holds for at most the lease's ``ttl`` (docs/howto/leases.md). Also here:
``forget_process_state()``, the one call that makes this process forget every limiter state
it keeps in memory (``django_gcra.testing.reset_limits``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async

from . import catalog
from .conf import forget_built, get_settings
from .engine import current
from .plan import stored_keys
from .policy import Policy
from .store import cache_connection

__all__ = ["areset", "forget_process_state", "reset", "store_aliases"]


def find_policy(policy: str | Policy) -> Policy:
    """The policy of that name: one of ``POLICIES``, or one written in code (an inline
    ``@ratelimit`` limit, a DRF scope); ``KeyError`` as ``decide()`` raises it."""
    if isinstance(policy, Policy):
        return policy
    found = catalog.find(policy) if isinstance(policy, str) else None
    if found is None and isinstance(policy, str):
        catalog.discover()  # an inline limit is known once the URLconf's views are imported
        found = catalog.find(policy)
    if found is None:
        known = ", ".join(sorted(get_settings().policies)) or "none"
        raise KeyError(f"unknown rate-limit policy {policy!r} (configured: {known})")
    return found


def store_aliases(policy: Policy | None = None) -> list[str]:
    """The cache aliases whose stores hold limiter keys: ``policy``'s (default: every
    policy's), ``CACHE_ALIAS`` and, with ``REGIONS``, every region's."""
    settings = get_settings()
    aliases = [settings.cache_alias]
    policies = [policy] if policy is not None else list(catalog.policies().values())
    aliases += [p.cache_alias for p in policies if p.cache_alias]
    if settings.regions is not None:
        aliases += list(settings.regions.caches.values())
    return list(dict.fromkeys(aliases))


def reset(policy: str | Policy, descriptors: Mapping[str, Any], *, limit: str | None = None) -> int:
    """Clear the stored state of ``policy``'s limits (rate, quota and concurrency alike; only
    ``limit`` when given) for these descriptor values, in every region's store, and drop
    this process's leases of those keys. Returns the number of keys deleted.

    A limit whose descriptors are not all given is left alone (``limit=`` names one whose
    descriptors must be). ``KeyError``: an unknown policy; ``ValueError``: an unknown limit
    or descriptor, or no limit to clear; ``TypeError``: a value that is not a str or int."""
    pol = find_policy(policy)
    values: dict[str, str] = {}
    for name, given in descriptors.items():
        if name not in pol.descriptors and name != "tier":
            raise ValueError(f"policy {pol.name!r} uses no descriptor {name!r}; its descriptors: "
                             f"{', '.join(sorted(pol.descriptors)) or 'none'}")
        if given is None or name == "tier":  # (the tier picks a rate, never a key)
            continue
        if type(given) is not str and type(given) is not int:
            raise TypeError(f"descriptor {name!r} must be a str, an int or None, not {type(given).__name__}")
        values[name] = str(given)
    limits = pol.every_limit
    if limit is not None:
        limits = tuple(lim for lim in limits if lim.name == limit)
        if not limits:
            raise ValueError(f"policy {pol.name!r} has no limit {limit!r}; its limits: "
                             f"{', '.join(lim.name for lim in pol.every_limit)}")
    keys = list(stored_keys(pol, values, limits).values())
    if not keys:
        needed = sorted({d for lim in limits for d in lim.key})
        raise ValueError(f"no limit of policy {pol.name!r} to clear for {sorted(values)}: give "
                         f"{', '.join(needed)}")
    book = current().leases
    book.drop(pol.name, keys)
    deleted = 0
    for alias in store_aliases(pol):
        deleted += int(cache_connection(alias).unlink(*keys))  # one hash tag: one slot, one call
    book.drop(pol.name, keys)  # (a refill that was in flight meanwhile)
    return deleted


async def areset(policy: str | Policy, descriptors: Mapping[str, Any], *, limit: str | None = None) -> int:
    """``reset()`` for async code (on a worker thread: it never blocks the event loop)."""
    result: int = await sync_to_async(reset, thread_sensitive=False)(policy, descriptors, limit=limit)
    return result


def forget_process_state() -> None:
    """This process forgets every limiter state it keeps in memory: the engine in force
    (clients and backends, circuit breakers, leases, memoized plans, the fallback counters
    and the local fallback's limits, ...) and what else is built from the settings (every
    ``on_change`` callback)."""
    forget_built()
