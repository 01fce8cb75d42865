"""The rebalancer of multi-region budgets: the one place that talks to every region.

``rebalance()`` (``manage.py gcra_rebalance``) reads each region's demand for the last
complete window (``complete_window``), computes the new shares with ``next_shares`` (the
limits' shares, and the shares of the busy keys that have their own) and writes them,
with a log entry when they moved, to every region it reaches. It reads and writes the
regions' Redis only, never this process's ``ShareState``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..budgets import RegionSettings
from ..conf import get_settings
from ..store import cache_connection
from .shares import DEFAULT_BUDGET, MAX_FIELDS, demand_key, field_of, log_key, parse_table, shares_key, window_of

__all__ = ["BUSY_FRACTION", "KEY_TTL_WINDOWS", "LOG_LENGTH", "MAX_KEY_SHARES", "RebalanceResult", "complete_window",
           "next_shares", "rebalance"]

logger = logging.getLogger("django_gcra")

LOG_LENGTH = 200  # share changes kept in each region's log
BUSY_FRACTION = 0.2  # a key asking this much of its limit in a window gets its own shares
MAX_KEY_SHARES = 1000  # keys with their own shares, across all limits
KEY_TTL_WINDOWS = 12  # windows without demand after which a key's own shares are dropped


def next_shares(old: Mapping[str, float], wants: Mapping[str, float], regions: Iterable[str],
                reachable: Iterable[str], floor: float, smoothing: float, max_step: float) -> dict[str, float]:
    """One rebalance of one limit's shares (docs/howto/multi-region.md, "The formulas").

    Regions not ``reachable`` keep their share (they keep enforcing it); the reachable
    ones split the rest: target_r = floor + (mass - n * floor) * wants_r / sum(wants), each
    share moves ``1 - smoothing`` of the way to its target, and the whole move is scaled
    down so no share moves more than ``max_step``. Shares sum to 1 before and after; with
    no demand at all they stay."""
    names = list(regions)
    live = [r for r in names if r in set(reachable)]
    given = {r: max(0.0, float(old.get(r, 0.0))) for r in names}
    total_old = math.fsum(given.values())
    old = {r: (s / total_old if total_old > 0 else 1.0 / len(names)) for r, s in given.items()}
    mass = math.fsum(old[r] for r in live)
    total = math.fsum(max(0.0, float(wants.get(r, 0.0))) for r in live)
    spread = mass - len(live) * floor
    if not live or total <= 0 or spread < 0:
        return old
    step = {r: (1.0 - smoothing) * (floor + spread * max(0.0, float(wants.get(r, 0.0))) / total - old[r])
            for r in live}
    biggest = max(abs(v) for v in step.values())
    k = min(1.0, max_step / biggest) if biggest > 0 else 1.0
    new = dict(old)
    for r in live:
        new[r] = old[r] + k * step[r]
    total_new = math.fsum(new.values())
    return {r: s / total_new for r, s in new.items()}


@dataclass
class RebalanceResult:
    window: int
    skipped: bool = False  # the shares were already computed from this window
    unreachable: list[str] = field(default_factory=list)
    demand: dict[str, dict[str, int]] = field(default_factory=dict)  # region -> field -> units
    shares: dict[str, dict[str, float]] = field(default_factory=dict)  # field -> region -> share
    changed: dict[str, dict[str, float]] = field(default_factory=dict)  # the fields that moved


def complete_window(now: float, regions: RegionSettings) -> int:
    """The last demand window whose every flush has arrived by ``now``."""
    lag = regions.refresh + min(0.5, 0.1 * regions.rebalance_interval)
    return window_of(now - lag, regions.rebalance_interval) - 1


def _shared_fields(names: Iterable[str]) -> list[str]:
    policies = get_settings().policies
    out = []
    for name in names:
        policy = policies.get(name.split("/", 1)[0])
        budget = (policy.budget if policy is not None else None) or DEFAULT_BUDGET
        if budget.mode == "shared":
            out.append(name)
    return sorted(out)[:MAX_FIELDS]


def _busy_keys(seen: Iterable[str], limits: set[str], previous: Mapping[str, Mapping[str, float]],
               result: RebalanceResult, window: int) -> tuple[dict[str, int], list[str]]:
    """The keys with shares of their own after this window (key field -> the last window
    it asked anything), and the ones to drop. A key gets its own shares when it asked at
    least ``BUSY_FRACTION`` of its limit in the window, and keeps them until it has asked
    nothing for ``KEY_TTL_WINDOWS`` windows; at most ``MAX_KEY_SHARES``, the busiest."""
    regions = get_settings().regions
    assert regions is not None
    capacity = _capacities(regions.rebalance_interval)
    candidates: list[tuple[int, int, str]] = []
    dropped = []
    for name in seen:
        if name.count("/") < 2:
            continue
        base = name.rsplit("/", 1)[0]
        asked = sum(d.get(name, 0) for d in result.demand.values())
        own = previous.get(name)
        last = int(own.get("_seen", -1)) if own is not None else -1
        if base not in limits or base not in capacity:
            if own is not None:
                dropped.append(name)
            continue
        if asked > 0 and (own is not None or asked >= BUSY_FRACTION * capacity[base]):
            last = window
        if own is None and last != window:
            continue  # not busy: the limit's shares serve it
        if window - last > KEY_TTL_WINDOWS:
            dropped.append(name)
            continue
        candidates.append((asked, last, name))
    candidates.sort(reverse=True)
    dropped += [name for _, _, name in candidates[MAX_KEY_SHARES:] if name in previous]
    return {name: last for _, last, name in candidates[:MAX_KEY_SHARES]}, sorted(dropped)


def _capacities(seconds: float) -> dict[str, float]:
    """Units each configured limit admits in ``seconds`` (its largest tier's rate)."""
    return {field_of(p.name, lim.name): max(r.count / r.period for r in lim.rates.values()) * seconds
            for p in get_settings().policies.values() for lim in p.limits}


def rebalance(now: float | None = None, force: bool = False,
              connect: Callable[[str], Any] = cache_connection) -> RebalanceResult:
    """Read every region's demand of the last complete window, compute the shares, write
    them to every region reached. ``force``: even if they were computed from this window."""
    config = get_settings()
    regions = config.regions
    if regions is None:
        raise RuntimeError("DJANGO_GCRA['REGIONS'] is not set")
    now = time.time() if now is None else now
    window = complete_window(now, regions)
    result = RebalanceResult(window)
    clients: dict[str, Any] = {}
    previous: tuple[int, dict[str, dict[str, float]]] = (-1, {})
    for region, alias in regions.caches.items():
        try:
            client = connect(alias)
            pipe = client.pipeline(transaction=False)
            pipe.hgetall(demand_key(config.prefix, window))
            pipe.hgetall(shares_key(config.prefix))
            demand_raw, shares_raw = pipe.execute()
        except Exception as exc:
            logger.warning("django_gcra: rebalance: region %s unreachable, it keeps its last shares: %s", region, exc)
            result.unreachable.append(region)
            continue
        clients[region] = client
        result.demand[region] = {k.decode(): int(v) for k, v in list(demand_raw.items())[:MAX_FIELDS]}
        stamp = shares_raw.pop(b"_window", None)
        shares_raw.pop(b"_at", None)
        stamp_value = int(stamp) if stamp is not None else -1
        if stamp_value > previous[0] or (stamp_value == previous[0] and not previous[1]):
            previous = (stamp_value, parse_table(shares_raw))
    if not clients:
        return result
    if previous[0] >= window and not force:
        result.skipped, result.shares = True, previous[1]
        return result
    seen_fields = {*previous[1], *(f for d in result.demand.values() for f in d)}
    fields = _shared_fields(f for f in seen_fields if f.count("/") == 1)
    equal = dict.fromkeys(regions.names, regions.equal)

    def move(name: str, old: Mapping[str, float]) -> None:
        old = {r: old[r] for r in regions.names if r in old}
        if set(old) != set(regions.names):
            old = equal  # the regions changed: start again from equal shares
        wants = {r: result.demand[r].get(name, 0) for r in clients}
        new = next_shares(old, wants, regions.names, clients, regions.floor, regions.smoothing, regions.max_step)
        result.shares[name] = new
        if any(abs(new[r] - old.get(r, 0.0)) > 1e-6 for r in new):
            result.changed[name] = new

    for name in fields:
        move(name, previous[1].get(name) or equal)
    keyed, dropped = _busy_keys(seen_fields, set(fields), previous[1], result, window)
    for name in keyed:
        move(name, previous[1].get(name) or previous[1].get(name.rsplit("/", 1)[0]) or equal)  # new: as its limit
    logged = dict(list(result.changed.items())[:len(fields) + 20])  # the limits, and a few keys
    entry = json.dumps({"at": round(now, 3), "window": window, "unreachable": result.unreachable,
                        "changed": {n: {r: round(s, 4) for r, s in v.items()} for n, v in logged.items()}})
    mapping: dict[str, Any] = {n: json.dumps(v) for n, v in result.shares.items()}
    for name in keyed:  # a key's shares carry the last window it asked anything
        mapping[name] = json.dumps({**result.shares[name], "_seen": keyed[name]})
    mapping.update({"_window": window, "_at": repr(now)})
    for region, client in clients.items():
        try:
            pipe = client.pipeline(transaction=False)
            pipe.hset(shares_key(config.prefix), mapping=mapping)
            if dropped:
                pipe.hdel(shares_key(config.prefix), *dropped)
            if result.changed:
                pipe.lpush(log_key(config.prefix), entry)
                pipe.ltrim(log_key(config.prefix), 0, LOG_LENGTH - 1)
            pipe.execute()
        except Exception as exc:
            logger.warning("django_gcra: rebalance: could not write region %s's shares: %s", region, exc)
            result.unreachable.append(region)
    for name, new in result.changed.items():
        logger.info("django_gcra: shares of %s from window %d: %s", name, window,
                    ", ".join(f"{r} {s:.3f}" for r, s in new.items()))
    return result
