"""Per-descriptor overrides of a limit (the policy plane), hot-reloaded.

Precedence, highest first: an enabled, unexpired ``LimitOverride`` that matches the
request (the most specific match wins: most matched descriptors, then the most recently
updated), then the limit's rate for the request's tier, then the default tier.

The same cache holds the ``AccessRule`` rows (exemptions and deny lists, ``access.py``),
compiled by policy: one version stamp, one refresh, one thread kind for both.

Hot reload without a database query on the request path: each process keeps the
overrides in memory and, at most once per ``OVERRIDE_REFRESH`` seconds, a background
thread reads a version stamp from Redis that every commit touching an override bumps
(``transaction.on_commit``), and reloads from the database only when the stamp moved, or
every ``OVERRIDE_TTL`` seconds when Redis cannot be read. Decisions serve the current
index meanwhile, so a locked or slow database never stalls one; only a process's very
first load is waited for, and for at most the limiter's ``TIMEOUT``. The process that
commits a change reloads at once, in the committing thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from django.db import connections

from . import catalog
from .conf import Settings, get_settings
from .override_rules import override_problem
from .policy import Limit, Policy, is_known_descriptor
from .rates import Rate, parse_rate
from .rules import KINDS, NEVER, RuleSet
from .store import in_event_loop
from .worker import Worker

__all__ = ["OverrideCache", "apply_override", "find", "load_access", "load_index", "version_key"]

logger = logging.getLogger("django_gcra")


@dataclass(frozen=True)
class Compiled:
    """One override, ready for the request path."""

    pk: int
    rate: Rate | None
    burst: int | None
    mode: str  # enforce | shadow | off
    expires: float | None  # Unix time
    quota: int | None = None  # a calendar quota's units per period

    def live(self, now: float) -> bool:
        return self.expires is None or self.expires > now


# policy -> limit -> [(matched descriptor names, {their values: [Compiled, latest first]})],
# the most specific shape (most names) first: a lookup probes one dict per shape in use.
# A policy absent from the index has no override at all (the limiter then memoizes its plans).
Shape = tuple[tuple[str, ...], dict[tuple[str, ...], list[Compiled]]]
Index = dict[str, dict[str, list[Shape]]]


def version_key(settings: Settings | None = None) -> str:
    """The key of the version stamp every change of the policy plane bumps."""
    return f"{(settings or get_settings()).prefix}:overrides:version"


class OverrideCache:
    """The process-local overrides and access rules, and the logic deciding when to reload them."""

    def __init__(self, settings: Settings, read: Callable[[str], bytes | None]) -> None:
        self.settings = settings
        self.read = read  # GET with the limiter's timeouts, not while the circuit is open (Stores.read_guarded)
        self.index: Index = {}
        self.access: dict[str, RuleSet] = {}  # AccessRule rows by policy ("": every policy)
        # Whether any exempt or deny rule may be in force (settings or rows): decide()'s one
        # test. True until a load has looked (and after a settings change).
        self.ruled = True
        self.loaded_at: float | None = None  # monotonic
        self.version: bytes | None = None
        self.next_check = 0.0  # monotonic
        self.failing = False
        self.expired = self.loaded_expired = 0  # expire() moves the first; a load takes it
        self.worker = Worker("overrides", self._refresh_step, first=None)
        self.due_lock = threading.Lock()  # held while a lookup decides whether a refresh is due
        self.lock = threading.Lock()  # held by the one refresh in flight
        self.idle = threading.Event()  # set while no refresh is asked for or in flight
        self.idle.set()

    def expire(self) -> None:
        """Reload at the next lookup (and again if a load in flight began before this call)."""
        self.expired += 1
        self.loaded_at, self.next_check = None, 0.0

    def join(self, timeout: float) -> bool:
        """Wait for a refresh in flight (tests, shutdown); True when none is."""
        return self.idle.wait(timeout)

    def get(self) -> Index:
        if time.monotonic() < self.next_check:
            return self.index
        if self.due_lock.acquire(blocking=False):
            try:
                if time.monotonic() >= self.next_check:  # (not another thread's refresh just asked for)
                    self.next_check = time.monotonic() + self.settings.override_refresh
                    self.idle.clear()
                    self.worker.wake()
            finally:
                self.due_lock.release()
        if self.loaded_at is None and not self.failing and not in_event_loop():
            self.idle.wait(self.settings.timeout)  # a process's first load: bounded by TIMEOUT
        return self.index

    def _refresh_step(self) -> None:
        try:
            with self.lock:
                self.refresh()
        finally:
            try:
                connections.close_all()  # the worker's own connections, closed before join() returns
            finally:
                self.idle.set()

    def reload_now(self) -> None:
        """Reload in this thread (it just committed a change), after a refresh in flight."""
        if not self.lock.acquire(timeout=5):
            self.expire()
            return
        try:
            self.loaded_at = None
            self.refresh()
            self.next_check = time.monotonic() + self.settings.override_refresh
        finally:
            self.lock.release()

    def close(self) -> None:
        """Stop the refresh thread, without a last refresh (the engine is retired)."""
        self.worker.stop(last_step=False)

    def refresh(self) -> None:
        try:
            version = self.read(version_key(self.settings))
            stamp_ok = True
        except Exception as exc:  # Redis down: rely on the TTL
            logger.debug("django_gcra: override version unreadable: %s", exc)
            version, stamp_ok = None, False
        expired = self.expired
        stale = (self.loaded_at is None or expired != self.loaded_expired
                 or time.monotonic() - self.loaded_at > self.settings.override_ttl)
        if not stale and stamp_ok and version == self.version:
            return
        try:
            # (No close_old_connections() here: in reload_now the connection is the committing
            # caller's, maybe inside its transaction; the refresh thread opens its own.)
            index = load_index()
            access = load_access()
        except Exception as exc:  # never fail a request for the policy plane; keep the last index
            if not self.failing:
                logger.warning("django_gcra: could not load limit overrides and access rules (keeping %d, %d): %s",
                               len(self.index), len(self.access), exc)
            self.failing = True
            self.ruled = bool(self.access) or self.settings.ruled  # (the rules kept, and the settings')
            return
        self.index, self.access, self.version, self.loaded_at, self.failing = (
            index, access, version, time.monotonic(), False)
        self.ruled = bool(access) or self.settings.ruled
        self.loaded_expired = expired


def load_index() -> Index:
    """Every enabled, unexpired override of a limit in the plane (``catalog.policies()``:
    settings, inline ``@ratelimit`` and DRF scopes), compiled. One query."""
    from .models import LimitOverride

    policies = catalog.policies()
    rows = LimitOverride.objects.in_force().order_by("-updated_at", "-pk")
    shapes: dict[tuple[str, str], dict[tuple[str, ...], dict[tuple[str, ...], list[Compiled]]]] = {}
    for row in rows:
        problem = override_problem(row, policies)
        if problem is not None:
            if problem.field not in ("policy", "limit"):  # (a code policy may be registered later: quiet)
                logger.warning("django_gcra: override %s ignored: %s", row.pk, problem)
            continue
        rate = parse_rate(row.rate) if row.rate else None
        names = tuple(sorted(str(k) for k in row.match))
        values = tuple(str(row.match[k]) for k in sorted(row.match, key=str))
        expires = row.expires_at.timestamp() if row.expires_at else None
        compiled = Compiled(row.pk, rate, row.burst, row.mode, expires, row.quota)
        shapes.setdefault((row.policy, row.limit), {}).setdefault(names, {}).setdefault(values, []).append(compiled)
    index: Index = {}
    for (policy, limit), by_names in shapes.items():
        index.setdefault(policy, {})[limit] = sorted(by_names.items(), key=lambda shape: -len(shape[0]))
    return index


def load_access() -> dict[str, RuleSet]:
    """Every enabled, unexpired ``AccessRule``, compiled by policy ("": every policy). A
    row the limiter cannot apply (an unknown descriptor, an ip value that is no address
    or network) is skipped and logged (``manage.py check --database default``: W120). One query."""
    from .models import AccessRule

    custom = get_settings().descriptors
    table: dict[str, RuleSet] = {}
    for row in AccessRule.objects.in_force():
        expires = row.expires_at.timestamp() if row.expires_at else NEVER
        try:
            if row.kind not in KINDS or not is_known_descriptor(row.descriptor, custom):
                raise ValueError(f"kind {row.kind!r} or descriptor {row.descriptor!r} is unknown")
            table.setdefault(row.policy, RuleSet()).of(row.kind).add(row.descriptor, row.value, expires)
        except ValueError as exc:
            logger.warning("django_gcra: access rule %s ignored: %s", row.pk, exc)
    return table


def find(index: Index, policy: str, limit: str, values: Mapping[str, str], now: float) -> Compiled | None:
    """The most specific live override for these values (most matched descriptors,
    then the most recently updated)."""
    for names, table in index.get(policy, {}).get(limit, ()):
        try:
            candidates = table.get(tuple(values[n] for n in names), ())
        except KeyError:  # the request lacks a descriptor this shape matches on
            continue
        for compiled in candidates:
            if compiled.live(now):
                return compiled
    return None




def apply_override(index: Index, policy: Policy, limit: Limit, values: Mapping[str, str], rate: Rate, burst: int,
                   mode: str) -> tuple[Rate, int, str] | None:
    """The (rate, burst, mode) in force for this limit and these descriptor values, given
    the overrides ``index`` (``OverrideCache.get()``); None when an override turns the limit off."""
    found = find(index, policy.name, limit.name, values, time.time())
    if found is None:
        return rate, burst, mode
    if found.mode == "off":
        return None
    if limit.calendar is not None:  # a quota: its units per period, in a Rate of its period's length
        if found.quota is None:
            return rate, burst, found.mode
        return Rate(found.quota, rate.period), found.quota, found.mode
    new_rate = found.rate or rate
    if found.burst is not None:
        burst = found.burst
    elif found.rate is not None:
        burst = limit.burst_for(new_rate)
    return new_rate, burst, found.mode
