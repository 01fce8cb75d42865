"""The request path of multi-region budgets: the share table a decision reads.

``ShareState`` holds this process's share table (read from the local Redis by the sync,
``sync.py``) and its unsent demand. Its read side is memory only: ``share_of`` gives the
share a region enforces for a limit (``shared``: from the table; ``fixed``, ``full``,
``home``: from the settings), ``scale`` turns it into the interval and burst of the spec,
and ``tick`` tells planning the table's version and wakes the sync when one is due.

Also here, for every module of the package: the constants they share and the names of the
Redis keys and hash fields (the package's docstring lists the keys).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.utils.module_loading import import_string

from ..budgets import Budget, RegionSettings
from ..conf import get_settings
from ..keys import escape
from ..policy import Limit, Policy
from ..store import in_event_loop
from ..worker import Worker

__all__ = ["DEFAULT_BUDGET", "EPSILON", "MAX_FIELDS", "ShareState", "demand_key", "field_of", "key_field", "log_key",
           "parse_table", "scale", "shares_key", "window_of"]

logger = logging.getLogger("django_gcra")

MAX_FIELDS = 10_000  # (policy, limit) pairs counted, and shares held, per process
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


def parse_table(raw: Mapping[bytes, bytes]) -> dict[str, dict[str, float]]:
    """A shares hash as read from Redis (without ``_window`` and ``_at``): field -> {region: share}."""
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
    """This process's share table (read from the local Redis) and its unsent demand.

    The read side is here (``tick``, ``share_of``, ``budget_share``); counting the demand
    and the sync that sends it and reads the table back are ``sync.py``'s functions of a
    ``ShareState``: ``sync`` is the one its worker calls."""

    def __init__(self, sync: Callable[[ShareState], None]) -> None:
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
        self._sync = sync
        self._home_functions: dict[str, Callable[[Mapping[str, str]], Any]] = {}  # dotted path -> the function
        self.worker = Worker("regions", self._sync_step, first=None)
        self.listeners: list[Callable[[], None]] = []

    def join(self, timeout: float) -> bool:
        return self.idle.wait(timeout)

    def changed(self) -> None:
        """The table changed: a new version, and the listeners (planning's memo) are told."""
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
            self._sync(self)
        finally:
            self.idle.set()

    def share_of(self, policy: Policy, limit: Limit, values: Mapping[str, str]) -> float:
        """The share of ``limit`` this region enforces for these descriptor values (1.0
        without REGIONS). Memory only."""
        regions = get_settings().regions
        if regions is None:
            return 1.0
        return self.budget_share(policy.budget or DEFAULT_BUDGET, regions, field_of(policy.name, limit.name), values,
                                 limit.key)

    def budget_share(self, budget: Budget, regions: RegionSettings, name: str, values: Mapping[str, str],
                     key: tuple[str, ...] | None = None) -> float:
        mode, local = budget.mode, regions.local
        if mode == "full":
            return 1.0
        if mode == "fixed":
            return budget.shares.get(local, 0.0) if budget.shares else regions.equal
        if mode == "home":
            assert budget.home is not None
            home = self._home_of(budget.home, values)
            if home == local:
                return 1.0
            return budget.away if home in regions.caches else regions.equal
        vector = None
        if key is not None and name in self.keyed:  # this limit has busy keys with shares of their own
            vector = self.shares.get(key_field(name, key, values))
        if vector is None:
            vector = self.shares.get(name)
        share = vector.get(local) if vector is not None else None
        return regions.equal if share is None or not 0.0 < share <= 1.0 else share

    def _home_of(self, path: str, values: Mapping[str, str]) -> str | None:
        function = self._home_functions.get(path)
        try:
            if function is None:
                function = self._home_functions[path] = import_string(path)
            region = function(values)
        except Exception:
            logger.exception("django_gcra: home region function %s failed; using the equal share", path)
            return None
        return region if isinstance(region, str) else None
