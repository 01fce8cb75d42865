"""Multi-region budgets: each region decides on its own Redis, enforcing its share of
every limit (docs/howto/multi-region.md).

On the request path only memory is read: ``share_of`` gives the share a region enforces
for a limit (``shared``: from this process's share table; ``fixed``, ``full``, ``home``:
from the settings), and ``scale`` turns it into the interval and burst of the spec.
Demand is counted in memory per (policy, limit) by ``on_decision`` (a decision observer)
and, at most once per ``refresh`` seconds, a background thread (started from
``tick()``, like the override reload) adds the counts to the local Redis's demand window
and reads the share table back from it. Nothing here ever calls another region.

``rebalance()`` (``manage.py gcra_rebalance``) is the one place that talks to every
region: it reads each region's demand for the last complete window, computes the new
shares with ``next_shares`` and writes them to every region it reaches.

Redis keys, in each region's Redis:

- ``<prefix>:regions:demand:<w>``: hash ``policy/limit`` -> units asked in window ``w``
  (``w = floor(unix time / rebalance_interval)``), expiring after ``DEMAND_WINDOWS`` windows;
- ``<prefix>:regions:shares``: hash ``policy/limit`` -> JSON ``{region: share}``, plus
  ``_window`` (the window they were computed from) and ``_at`` (Unix time);
- ``<prefix>:regions:log``: the last ``LOG_LENGTH`` share changes, JSON, newest first.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.utils.module_loading import import_string

from . import conf
from .budgets import Budget, RegionSettings
from .conf import get_settings, on_change
from .keys import escape
from .policy import Limit, Policy
from .signals import observers
from .store import cache_connection, in_event_loop
from .worker import Worker, after_fork

__all__ = ["RebalanceResult", "RegionCollector", "ShareState", "next_shares", "observe_demand", "on_decision",
           "rebalance", "scale", "share_of", "state", "status_lines", "tick"]

logger = logging.getLogger("django_gcra")

DEMAND_WINDOWS = 20  # windows a demand hash is kept
LOG_LENGTH = 200  # share changes kept in each region's log
MAX_FIELDS = 10_000  # (policy, limit) pairs counted, and shares held, per process
KEY_SLOTS = 1024  # distinct keys counted per process between two flushes
BUSY_PER_FLUSH = 32  # the most keys one process reports per flush (its busiest)
BUSY_FRACTION = 0.2  # a key asking this much of its limit in a window gets its own shares
MAX_KEY_SHARES = 1000  # keys with their own shares, across all limits
KEY_TTL_WINDOWS = 12  # windows without demand after which a key's own shares are dropped
DEFAULT_BUDGET = Budget("shared")
EPSILON = 1e-9


def field_of(policy: str, limit: str) -> str:
    return f"{policy}/{limit}"


def key_field(name: str, key: Iterable[str], values: Mapping[str, str]) -> str:
    """The field of one key of a limit: ``policy/limit/<escaped values>``."""
    return f"{name}/{':'.join(escape(values[d]) for d in key)}"


def demand_key(prefix: str, window: int) -> str:
    return f"{prefix}:regions:demand:{window}"


def shares_key(prefix: str) -> str:
    return f"{prefix}:regions:shares"


def log_key(prefix: str) -> str:
    return f"{prefix}:regions:log"


def window_of(now: float, interval: float) -> int:
    return math.floor(now / interval)


def scale(interval: int, burst: int, share: float) -> tuple[int, int]:
    """A limit's (interval us, burst) at ``share`` of it: the interval divided by the share,
    rounded up (the rate never exceeds the share), and the burst times the share, rounded
    up (so at least 1, and at most one unit above the exact share: N units over all
    regions, the rounding term of the slack). Rounding the burst down would cost small
    shares most: under Poisson arrivals a burst of 1 admits well below its rate."""
    if share >= 1.0:
        return interval, burst
    return math.ceil(interval / share - EPSILON), max(1, math.ceil(burst * share - EPSILON))


class ShareState:
    """This process's share table (read from the local Redis) and its unsent demand."""

    def __init__(self) -> None:
        self.shares: dict[str, dict[str, float]] = {}  # field -> {region: share}
        self.window: int | None = None  # the demand window the table was computed from
        self.version = 0  # bumped whenever the table changes
        self.demand: dict[str, int] = {}  # units asked since the last flush
        self.totals: dict[str, int] = {}  # units asked since the process started (metrics)
        self.keys: dict[str, int] = {}  # per key ("policy/limit/values"): units since the last flush
        self.keyed: frozenset[str] = frozenset()  # limits with keys of their own shares in the table
        self.key_of: dict[str, tuple[str, ...]] | None = None  # limit field -> its key's descriptors
        self.demand_lock = threading.Lock()
        self.loaded = False
        self.failing = False
        self.next_sync = 0.0  # monotonic
        self.synced_at: float | None = None  # monotonic, last successful sync
        self.sync_lock = threading.Lock()  # held while a tick decides whether a sync is due
        self.idle = threading.Event()  # clear while a sync is asked for or in flight
        self.idle.set()
        self.worker = Worker("regions", self._sync_step, first=None)
        self.listeners: list[Callable[[], None]] = []

    def reset(self) -> None:
        """Forget everything (settings changed, tests)."""
        self.join(5)
        with self.demand_lock:
            self.demand, self.totals, self.keys, self.key_of = {}, {}, {}, None
        self.keyed = frozenset()
        self.shares, self.window, self.loaded, self.failing, self.next_sync = {}, None, False, False, 0.0
        self.synced_at = None
        self._changed()

    def join(self, timeout: float) -> bool:
        return self.idle.wait(timeout)

    def _changed(self) -> None:
        self.version += 1
        for callback in self.listeners:
            callback()

    def tick(self) -> int | None:
        """Called on the request path by planning: start a background sync when one is due
        (a process's first one is waited for, at most the limiter's TIMEOUT); return the
        table's version (None without REGIONS)."""
        if time.monotonic() < self.next_sync:
            return self.version
        regions = get_settings().regions
        if regions is None:
            return None
        if self.sync_lock.acquire(blocking=False):
            try:
                if time.monotonic() >= self.next_sync:
                    self.next_sync = time.monotonic() + regions.refresh
                    self.idle.clear()
                    self.worker.wake()
            finally:
                self.sync_lock.release()
        if not self.loaded and not self.failing and not in_event_loop():
            self.idle.wait(get_settings().timeout)
        return self.version

    def _sync_step(self) -> None:
        try:
            self.sync()
        finally:
            self.idle.set()

    def count(self, policy: str, limits: Iterable[str], cost: int, values: Mapping[str, str] | None = None) -> None:
        key_of = self.key_of
        if key_of is None:
            key_of = self.key_of = {field_of(p.name, lim.name): lim.key for p in get_settings().policies.values()
                                    for lim in p.limits}
        with self.demand_lock:
            demand, totals, keys = self.demand, self.totals, self.keys
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

    def sync(self) -> None:
        """Add the counted demand to the local Redis and read the share table back."""
        config = get_settings()
        regions = config.regions
        if regions is None:
            return
        with self.demand_lock:
            demand, self.demand = self.demand, {}
            keys, self.keys = self.keys, {}
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
            if not self.failing:
                logger.warning("django_gcra: region %s: could not sync shares with the local Redis (keeping %d): %s",
                               regions.local, len(self.shares), exc)
            self.failing = True
            self.count_back(demand)
            return
        window_raw = raw.pop(b"_window", None)
        raw.pop(b"_at", None)
        shares = _parse_table(raw)
        self.failing, self.loaded, self.synced_at = False, True, time.monotonic()
        self.window = int(window_raw) if window_raw is not None else None
        if shares != self.shares:
            self.shares = shares
            self.keyed = frozenset(name.rsplit("/", 1)[0] for name in shares if name.count("/") >= 2)
            self._changed()

    def count_back(self, demand: Mapping[str, int]) -> None:
        with self.demand_lock:
            for name, units in demand.items():
                if name in self.demand or len(self.demand) < MAX_FIELDS:
                    self.demand[name] = self.demand.get(name, 0) + units


def _parse_table(raw: Mapping[bytes, bytes]) -> dict[str, dict[str, float]]:
    shares: dict[str, dict[str, float]] = {}
    for name, value in raw.items():
        if len(shares) >= MAX_FIELDS:
            break
        try:
            vector = json.loads(value)
            shares[name.decode()] = {str(r): float(s) for r, s in vector.items()}
        except (ValueError, AttributeError, TypeError):
            logger.warning("django_gcra: ignoring a malformed share entry %r", name)
    return shares


state = ShareState()
on_change(state.reset)


@after_fork
def _forget_in_child() -> None:
    # A forked worker has no thread behind a sync its parent had in flight, and must not
    # report its parent's demand a second time; it keeps the parent's shares.
    state.sync_lock, state.demand_lock = threading.Lock(), threading.Lock()
    state.idle = threading.Event()
    state.idle.set()
    state.demand, state.keys, state.totals, state.next_sync = {}, {}, {}, 0.0


def tick() -> int | None:
    """The share table's version (planning memoizes under it; None without REGIONS); may
    start a background sync."""
    if state.next_sync > time.monotonic():
        return state.version
    return state.tick()


_home_functions: dict[str, Callable[[Mapping[str, str]], Any]] = {}


def _home_of(path: str, values: Mapping[str, str]) -> str | None:
    function = _home_functions.get(path)
    try:
        if function is None:
            function = _home_functions[path] = import_string(path)
        region = function(values)
    except Exception:
        logger.exception("django_gcra: home region function %s failed; using the equal share", path)
        return None
    return region if isinstance(region, str) else None


on_change(_home_functions.clear)


def share_of(policy: Policy, limit: Limit, values: Mapping[str, str]) -> float:
    """The share of ``limit`` this region enforces for these descriptor values (1.0
    without REGIONS). Memory only."""
    regions = get_settings().regions
    if regions is None:
        return 1.0
    return budget_share(policy.budget or DEFAULT_BUDGET, regions, field_of(policy.name, limit.name), values,
                        limit.key)


def budget_share(budget: Budget, regions: RegionSettings, name: str, values: Mapping[str, str],
                 key: tuple[str, ...] | None = None) -> float:
    mode, local = budget.mode, regions.local
    if mode == "full":
        return 1.0
    if mode == "fixed":
        return budget.shares.get(local, 0.0) if budget.shares else regions.equal
    if mode == "home":
        assert budget.home is not None
        home = _home_of(budget.home, values)
        if home == local:
            return 1.0
        return budget.away if home in regions.caches else regions.equal
    vector = None
    if key is not None and name in state.keyed:  # this limit has busy keys with shares of their own
        vector = state.shares.get(key_field(name, key, values))
    if vector is None:
        vector = state.shares.get(name)
    share = vector.get(local) if vector is not None else None
    return regions.equal if share is None or not 0.0 < share <= 1.0 else share


def on_decision(sender: Any, decision: Any, request: Any = None) -> None:
    """Observer of every decision (``signals.observers``) while ``REGIONS`` is set
    (``observe_demand``): count the units asked of each limit in force, in memory."""
    if (conf.standing or get_settings()).regions is not None and decision.limits:
        state.count(decision.policy, [s.name for s in decision.limits], decision.cost, decision.descriptors)


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


# The rebalancer --------------------------------------------------------------------------


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
            previous = (stamp_value, _parse_table(shares_raw))
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


class RegionCollector:
    """A ``prometheus_client`` collector of this process's region: the share it enforces of
    each shared limit, and the units asked of each limit here. Register it yourself:
    ``prometheus_client.REGISTRY.register(RegionCollector())``. Labelled by region, policy
    and limit (bounded by configuration)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        regions = get_settings().regions
        if regions is None:
            return
        share = GaugeMetricFamily("django_gcra_region_share", "The share of a shared limit this region enforces",
                                  labels=["region", "policy", "limit"])
        demand = CounterMetricFamily("django_gcra_region_demand_units", "Units asked of a limit in this region",
                                     labels=["region", "policy", "limit"])
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


def status_lines(connect: Callable[[str], Any] = cache_connection, changes: int = 5) -> list[str]:
    """``gcra_status``'s view of the regions: each region's shares and its demand in the
    last complete window, and the latest share changes (from the local region's log)."""
    config = get_settings()
    regions = config.regions
    if regions is None:
        return []
    window = complete_window(time.time(), regions)
    lines = []
    for region, alias in regions.caches.items():
        try:
            pipe = connect(alias).pipeline(transaction=False)
            pipe.hgetall(shares_key(config.prefix))
            pipe.hgetall(demand_key(config.prefix, window))
            shares_raw, demand_raw = pipe.execute()
        except Exception as exc:
            lines.append(f"{region} ({alias}): unreachable: {type(exc).__name__}: {exc}")
            continue
        stamp = shares_raw.pop(b"_window", None)
        shares_raw.pop(b"_at", None)
        table = _parse_table(shares_raw)
        since = f"from window {int(stamp)}" if stamp is not None else "never rebalanced: equal shares"
        lines.append(f"{region} ({alias}): shares {since}")
        names = sorted(set(table) | {k.decode() for k in demand_raw})
        keys = [n for n in names if n.count("/") >= 2]
        for name in [n for n in names if n.count("/") == 1] + keys[:10]:
            share = table.get(name, {}).get(region)
            shown = f"{share:.3f}" if share is not None else f"{regions.equal:.3f} (equal)"
            lines.append(f"  {name}: share {shown}, demand {int(demand_raw.get(name.encode(), 0))} "
                         f"units in window {window}")
        if len(keys) > 10:
            lines.append(f"  ... and {len(keys) - 10} more keys with shares or demand of their own")
    try:
        log = connect(regions.caches[regions.local]).lrange(log_key(config.prefix), 0, changes - 1)
    except Exception:
        log = []
    if log:
        lines.append("latest share changes (newest first):")
        lines.extend(f"  {entry.decode()}" for entry in log)
    return lines
