"""Per-descriptor overrides of a limit (the policy plane), hot-reloaded.

Precedence, highest first: an enabled, unexpired ``LimitOverride`` that matches the
request (the most specific match wins: most matched descriptors, then the most recently
updated), then the limit's rate for the request's tier, then the default tier.

Hot reload without a database query per request: each process keeps the overrides in
memory and, at most once per ``OVERRIDE_REFRESH`` seconds, reads a version stamp from
Redis that every commit touching an override bumps (``transaction.on_commit``). The
database is queried only when the stamp moved, or every ``OVERRIDE_TTL`` seconds as a
fallback when Redis cannot be read. Async callers never run the query on the event loop:
their refresh runs in a short-lived thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.signals import setting_changed
from django.db import transaction
from django.dispatch import receiver

from .conf import DEFAULTS, get_config, setting
from .policy import Limit, Policy
from .rates import Rate, parse_rate

__all__ = ["apply_override", "cache", "invalidate", "version_key"]

logger = logging.getLogger("django_gcra")


@dataclass(frozen=True)
class Compiled:
    """One override, ready for the request path."""

    pk: int
    rate: Rate | None
    burst: int | None
    mode: str  # enforce | shadow | off
    expires: float | None  # Unix time

    def live(self, now: float) -> bool:
        return self.expires is None or self.expires > now


# policy -> limit -> [(matched descriptor names, {their values: [Compiled, latest first]})],
# the most specific shape (most names) first: a lookup probes one dict per shape in use.
# A policy absent from the index has no override at all (the limiter then memoizes its plans).
Shape = tuple[tuple[str, ...], dict[tuple[str, ...], list[Compiled]]]
Index = dict[str, dict[str, list[Shape]]]


def version_key() -> str:
    return f"{get_config().prefix}:overrides:version"


def _redis() -> Any:
    from .backends.redis import django_redis_client

    return django_redis_client(get_config().cache_alias)


def _read_stamp() -> bytes | None:
    """The version stamp, read on the request path: through the limiter's own client (its
    tight timeouts), and not at all while the endpoint's circuit breaker is open."""
    from .backends.breaker import CLOSED, breaker_for
    from .backends.clients import endpoint_name, limiter_client

    alias = get_config().cache_alias
    if breaker_for(endpoint_name(alias)).state != CLOSED:
        raise ConnectionError("circuit open")
    return limiter_client(alias).get(version_key())


def _seconds(name: str) -> float:
    """A timing setting; a bad value (system check E031) falls back to the default."""
    value = setting(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return float(DEFAULTS[name])
    return float(value)


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class OverrideCache:
    """The process-local overrides and the logic deciding when to reload them."""

    def __init__(self) -> None:
        self.index: Index = {}
        self.loaded_at: float | None = None  # monotonic
        self.version: bytes | None = None
        self.next_check = 0.0  # monotonic
        self.failing = False
        self.lock = threading.Lock()

    def reset(self) -> None:
        """Forget everything: the next lookup reloads (settings changed, tests)."""
        with self.lock:
            self.index, self.loaded_at, self.version, self.next_check = {}, None, None, 0.0

    def expire(self) -> None:
        """Reload at the next lookup (this process just committed a change)."""
        self.loaded_at, self.next_check = None, 0.0

    def get(self) -> Index:
        if time.monotonic() < self.next_check:
            return self.index
        in_loop = _in_event_loop()
        # One thread refreshes while the others serve the current index; only a process's
        # very first load makes concurrent sync callers wait for it. The refresh reads the
        # stamp within the limiter's TIMEOUT (see _read_stamp), once per OVERRIDE_REFRESH.
        first = self.loaded_at is None and not self.failing and not in_loop
        if not self.lock.acquire(blocking=first):
            return self.index
        if time.monotonic() < self.next_check:  # another thread refreshed while this one waited
            self.lock.release()
            return self.index
        self.next_check = time.monotonic() + _seconds("OVERRIDE_REFRESH")
        if in_loop:
            threading.Thread(target=self._refresh_locked, name="gcra-overrides", daemon=True).start()
        else:
            self._refresh_locked()
        return self.index

    def _refresh_locked(self) -> None:
        try:
            self.refresh()
        finally:
            self.lock.release()

    def refresh(self) -> None:
        try:
            version = _read_stamp()
            stamp_ok = True
        except Exception as exc:  # Redis down: rely on the TTL
            logger.debug("django_gcra: override version unreadable: %s", exc)
            version, stamp_ok = None, False
        stale = self.loaded_at is None or time.monotonic() - self.loaded_at > _seconds("OVERRIDE_TTL")
        if not stale and stamp_ok and version == self.version:
            return
        try:
            index = load_index()
        except Exception as exc:  # never fail a request for the policy plane; keep the last index
            if not self.failing:
                logger.warning("django_gcra: could not load limit overrides (keeping %d): %s",
                               len(self.index), exc)
            self.failing = True
            return
        self.index, self.version, self.loaded_at, self.failing = index, version, time.monotonic(), False


def load_index() -> Index:
    """Every enabled, unexpired override of a configured limit, compiled. One query."""
    from django.utils import timezone

    from .models import LimitOverride

    limits = {(p.name, lim.name) for p in get_config().policies.values() for lim in p.limits}
    rows = (LimitOverride.objects.filter(enabled=True).exclude(expires_at__lte=timezone.now())
            .order_by("-updated_at", "-pk"))
    shapes: dict[tuple[str, str], dict[tuple[str, ...], dict[tuple[str, ...], list[Compiled]]]] = {}
    for row in rows:
        if (row.policy, row.limit) not in limits or not isinstance(row.match, dict):
            continue
        try:
            rate = parse_rate(row.rate) if row.rate else None
        except ValueError as exc:
            logger.warning("django_gcra: override %s ignored: %s", row.pk, exc)
            continue
        names = tuple(sorted(str(k) for k in row.match))
        values = tuple(str(row.match[k]) for k in sorted(row.match, key=str))
        expires = row.expires_at.timestamp() if row.expires_at else None
        compiled = Compiled(row.pk, rate, row.burst, row.mode, expires)
        shapes.setdefault((row.policy, row.limit), {}).setdefault(names, {}).setdefault(values, []).append(compiled)
    index: Index = {}
    for (policy, limit), by_names in shapes.items():
        index.setdefault(policy, {})[limit] = sorted(by_names.items(), key=lambda shape: -len(shape[0]))
    return index


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


cache = OverrideCache()


def apply_override(index: Index, policy: Policy, limit: Limit, values: Mapping[str, str], rate: Rate, burst: int,
                   mode: str) -> tuple[Rate, int, str] | None:
    """The (rate, burst, mode) in force for this limit and these descriptor values, given
    the overrides ``index`` (``cache.get()``); None when an override turns the limit off."""
    found = find(index, policy.name, limit.name, values, time.time())
    if found is None:
        return rate, burst, mode
    if found.mode == "off":
        return None
    new_rate = found.rate or rate
    if found.burst is not None:
        burst = found.burst
    elif found.rate is not None:
        burst = limit.burst_for(new_rate)
    return new_rate, burst, found.mode


def invalidate() -> None:
    """Make every process reload the overrides once the current transaction commits."""
    transaction.on_commit(_bump)


def _bump() -> None:
    cache.expire()
    try:
        _redis().incr(version_key())
    except Exception as exc:  # other processes will see the change within OVERRIDE_TTL
        logger.warning("django_gcra: could not bump the override version in Redis: %s", exc)


def on_override_change(sender: Any, **kwargs: Any) -> None:
    """post_save / post_delete receiver for ``LimitOverride`` (connected in apps.py)."""
    invalidate()


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DJANGO_GCRA", "CACHES"):
        cache.reset()
