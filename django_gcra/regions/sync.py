"""Counting a region's demand, and the periodic sync with its local Redis.

Demand is counted in memory per (policy, limit), and per key of a limit, by ``observe``
(behind the decision observer ``region_demand.on_decision``) and, at most once per ``refresh``
seconds, the share state's background worker (woken by ``ShareState.tick``, like the
override reload) runs ``sync``: it adds the counts to the local Redis's demand window and
reads the share table back from it. Nothing here ever calls another region.

Every function takes the ``ShareState`` it works on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..conf import get_settings
from ..store import cache_connection
from .shares import MAX_FIELDS, ShareState, demand_key, field_of, key_field, parse_table, shares_key, window_of

__all__ = ["BUSY_PER_FLUSH", "DEMAND_WINDOWS", "KEY_SLOTS", "count", "count_back", "observe", "sync"]

logger = logging.getLogger("django_gcra")

DEMAND_WINDOWS = 20  # windows a demand hash is kept
KEY_SLOTS = 1024  # distinct keys counted per process between two flushes
BUSY_PER_FLUSH = 32  # the most keys one process reports per flush (its busiest)


def observe(state: ShareState, decision: Any) -> None:
    """Count the units ``decision`` asked of each limit in force, while ``REGIONS`` is set."""
    if get_settings().regions is not None and decision.limits:
        count(state, decision.policy, [s.name for s in decision.limits], decision.cost, decision.descriptors)


def count(state: ShareState, policy: str, limits: Iterable[str], cost: int,
          values: Mapping[str, str] | None = None) -> None:
    key_of = state.key_of
    if key_of is None:
        key_of = state.key_of = {field_of(p.name, lim.name): lim.key for p in get_settings().policies.values()
                                 for lim in p.limits}
    with state.demand_lock:
        demand, totals, keys = state.demand, state.totals, state.keys
        for name in limits:
            key = field_of(policy, name)
            if key in totals:
                totals[key] += cost
            elif len(totals) < MAX_FIELDS:
                totals[key] = cost
            else:
                continue  # past the bound: not counted at all
            demand[key] = demand.get(key, 0) + cost
            descriptors = key_of.get(key)
            if descriptors is not None and values is not None:
                one = key_field(key, descriptors, values)
                if one in keys:
                    keys[one] += cost
                elif len(keys) < KEY_SLOTS:  # the first keys of a flush interval: a busy key is among them
                    keys[one] = cost


def sync(state: ShareState) -> None:
    """Add the counted demand to the local Redis and read the share table back."""
    config = get_settings()
    regions = config.regions
    if regions is None:
        return
    with state.demand_lock:
        demand, state.demand = state.demand, {}
        keys, state.keys = state.keys, {}
    busy = sorted(((units, name) for name, units in keys.items() if units >= 2), reverse=True)[:BUSY_PER_FLUSH]
    sent = {**demand, **{name: units for units, name in busy}}
    window = window_of(time.time(), regions.rebalance_interval)
    key = demand_key(config.prefix, window)
    try:
        pipe = cache_connection(regions.caches[regions.local]).pipeline(transaction=False)
        for name, units in sent.items():
            pipe.hincrby(key, name, units)
        if sent:
            pipe.expire(key, math.ceil(regions.rebalance_interval * DEMAND_WINDOWS))
        pipe.hgetall(shares_key(config.prefix))
        raw = pipe.execute()[-1]
    except Exception as exc:  # keep the last shares; send this demand with the next sync
        if not state.failing:
            logger.warning("django_gcra: region %s: could not sync shares with the local Redis (keeping %d): %s",
                           regions.local, len(state.shares), exc)
        state.failing = True
        count_back(state, demand)
        return
    window_raw = raw.pop(b"_window", None)
    raw.pop(b"_at", None)
    shares = parse_table(raw)
    state.failing, state.loaded, state.synced_at = False, True, time.monotonic()
    state.window = int(window_raw) if window_raw is not None else None
    if shares != state.shares:
        state.shares = shares
        state.keyed = frozenset(name.rsplit("/", 1)[0] for name in shares if name.count("/") >= 2)
        state.changed()


def count_back(state: ShareState, demand: Mapping[str, int]) -> None:
    """Demand a failed sync could not send, counted again for the next one."""
    with state.demand_lock:
        for name, units in demand.items():
            if name in state.demand or len(state.demand) < MAX_FIELDS:
                state.demand[name] = state.demand.get(name, 0) + units
