"""The stores decisions run on, composed in one place from the settings: ``Stores``.

Which client (the limiter's own, with ``TIMEOUT``/``CONNECT_TIMEOUT``), which circuit
breaker (one per endpoint; on Redis Cluster one per primary), and which backend of a cache
alias. The engine (``engine.py``) owns one ``Stores``; the backends below take plain
clients and numbers.

The asyncio client of each event loop sets its connections up outside the decisions'
deadlines, within ``max(CONNECT_TIMEOUT, ASYNC_SETUP_MIN)``, and a failed set-up counts
once against the endpoint's breaker (``_setup_failed``; ``backends/clients.py``, "Cold
start", and docs/operations.md).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from typing import Any

import redis
import redis.cluster
from django.conf import settings as django_settings

from .backends import clock as test_clock
from .backends.breaker import CLOSED, Breakers, CircuitBreaker
from .backends.clients import Timeouts, build_async_client, build_sync_client, endpoint_name
from .backends.cluster import node_of
from .backends.redis import RedisBackend
from .backends.slots import SlotBook
from .conf import Settings, get_settings

__all__ = ["ASYNC_SETUP_MIN", "Stores", "cache_connection", "in_event_loop"]

# Setting up an asyncio connection is bounded by CONNECT_TIMEOUT, but never by less than
# this (counted by a FairTimer: time the event loop spends on other work is not charged):
# it happens outside the decisions' deadlines and once per connection, and may need a few
# network round trips (TCP, TLS, AUTH, SELECT, a Sentinel lookup).
ASYNC_SETUP_MIN = 0.1  # seconds


def _cache_client(alias: str) -> Any:
    """The django-redis client object of ``alias`` (no network I/O)."""
    from django.core.cache import caches

    return caches[alias].client


class Stores:
    """The limiter's clients, backends and circuit breakers, by cache alias, built on first
    use from ``settings`` (and ``slots``: the concurrency slots' book of the same engine)."""

    def __init__(self, settings: Settings, slots: SlotBook, clock: test_clock.ScriptClock | None = None) -> None:
        self.settings, self.slots = settings, slots
        self.clock = clock  # django_gcra.testing.limiter_clock's, when built under it: every decision clocked
        self.timeouts = Timeouts(settings.timeout, settings.connect_timeout,
                                 max(settings.connect_timeout, ASYNC_SETUP_MIN))
        self.breakers = Breakers()
        self._lock = threading.Lock()
        self._sync: dict[str, Any] = {}
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
            weakref.WeakKeyDictionary())
        self._last_loop: tuple[Any, Any] = (None, None)  # the event loop of the last async call, its clients
        self._backends: dict[str, RedisBackend] = {}
        self._clocked: dict[str, RedisBackend] = {}  # alias -> its backend under a test clock (clocked)
        self._endpoints: dict[str, str] = {}
        # alias -> (its sync client then, the breaker of its configured server): a decision
        # not on Redis Cluster finds its breaker with two dict lookups.
        self._alias_breakers: dict[str, tuple[Any, CircuitBreaker]] = {}

    def _alias(self, alias: str | None) -> str:
        return self.settings.cache_alias if alias is None else alias

    def client(self, alias: str) -> Any:
        """The sync client (``redis.Redis`` or ``RedisCluster``) the limiter uses for ``alias``."""
        client = self._sync.get(alias)
        if client is None:
            with self._lock:
                client = self._sync.get(alias)
                if client is None:
                    client = self._sync[alias] = build_sync_client(_cache_client(alias), self.timeouts)
        return client

    def async_client(self, alias: str) -> Any | None:
        """A native asyncio client for ``alias``, one per event loop; None: use a thread."""
        loop = asyncio.get_running_loop()
        last_loop, per_loop = self._last_loop  # the loop of the last call: no weak lookup
        if last_loop is not loop:
            per_loop = self._async.setdefault(loop, {})
            self._last_loop = (loop, per_loop)
        if alias not in per_loop:
            per_loop[alias] = build_async_client(_cache_client(alias), self.timeouts,
                                                 functools.partial(self._setup_failed, alias))
        return per_loop[alias]

    def async_clients(self) -> list[Any]:
        """Every asyncio client made so far, of every event loop (tests, diagnostics)."""
        return [client for clients in list(self._async.values()) for client in clients.values()]

    def _setup_failed(self, alias: str, exc: BaseException) -> None:
        """A failed connection set-up of the asyncio pool counts once against the alias's
        breaker, however many decisions were waiting for it (they are not counted again)."""
        self.breaker_of(alias, "").failure(exc)

    def _endpoint(self, alias: str) -> str:
        name = self._endpoints.get(alias)
        if name is None:
            name = self._endpoints[alias] = endpoint_name(django_settings.CACHES.get(alias, {}))
        return name

    def endpoint_for(self, alias: str, key: str) -> str:
        """The circuit-breaker endpoint of a decision on ``key``: the alias's configured
        server, or on Redis Cluster the primary that serves the key's slot (one dead shard
        does not open the circuit for the others)."""
        client = self._sync.get(alias)
        # isinstance(x, redis.Redis) is cheap; RedisCluster's Protocol bases make its check slow.
        if not isinstance(client, redis.Redis) and isinstance(client, redis.cluster.RedisCluster):
            node = node_of(client, key)
            if node is not None:
                return node
        return self._endpoint(alias)

    def breaker_of(self, alias: str, key: str) -> CircuitBreaker:
        client = self._sync.get(alias)
        found = self._alias_breakers.get(alias)
        if found is not None and found[0] is client:
            return found[1]  # same client (or still none)
        config = self.settings.breaker
        breaker = self.breakers.of(self.endpoint_for(alias, key), config.failures, config.cooldown)
        if not isinstance(client, redis.cluster.RedisCluster):  # not a cluster node's: the same for every key
            self._alias_breakers[alias] = (client, breaker)
        return breaker

    def backend(self, alias: str | None = None) -> RedisBackend:
        """The Redis backend of ``alias`` (default: ``CACHE_ALIAS``)."""
        alias = self._alias(alias)
        backend = self._backends.get(alias)
        if backend is None:
            with self._lock:
                backend = self._backends.get(alias)
                if backend is None:
                    backend = self._backends[alias] = RedisBackend(
                        functools.partial(self.client, alias), functools.partial(self.async_client, alias),
                        functools.partial(self.breaker_of, alias), slots=self.slots)
        return backend

    def clocked(self, alias: str | None = None) -> RedisBackend:
        """The store of ``alias`` as decisions see it while a test clock is installed
        (``backends/clock.py``): every script one plain ``EVAL`` that reads the clock, never
        behind a lease (a lease's units and expiry are real time's); concurrency slots are kept
        by the store's own keeper."""
        alias = self._alias(alias)
        backend = self._clocked.get(alias)
        if backend is None:
            store = self.backend(alias)

            def get_async() -> Any:
                client = self.async_client(alias)
                return None if client is None else test_clock.AsyncClockedClient(client)

            backend = self._clocked[alias] = RedisBackend(
                lambda: test_clock.ClockedClient(self.client(alias)), get_async,
                functools.partial(self.breaker_of, alias), slots=self.slots, keeper=store.keeper)
        return backend

    def deciding(self, alias: str | None = None) -> RedisBackend:
        """The store of ``alias`` as a decision reaches it now, leases aside: the clocked one
        while a test clock is installed (a settle must read the time its decision read)."""
        return self.backend(alias) if self.clock is None else self.clocked(alias)

    def read_guarded(self, key: str) -> bytes | None:
        """GET ``key`` with the limiter's tight timeouts, and not at all while the endpoint's
        circuit breaker is open (raises ``ConnectionError``): for reads on the request path."""
        alias = self.settings.cache_alias
        if self.breaker_of(alias, key).state != CLOSED:
            raise ConnectionError("circuit open")
        value: bytes | None = self.client(alias).get(key)
        return value


def in_event_loop() -> bool:
    """True in a coroutine's thread: a blocking read there would stall every task of the loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def cache_connection(alias: str | None = None) -> Any:
    """The cache's own client (its general timeouts): for commands off the decision path."""
    from django_redis import get_redis_connection

    return get_redis_connection(get_settings().cache_alias if alias is None else alias)
