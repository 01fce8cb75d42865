"""The store a decision runs on, composed in one place from the settings.

Which client (the limiter's own, with ``TIMEOUT``/``CONNECT_TIMEOUT``), which circuit
breaker (one per endpoint; on Redis Cluster one per primary), and which lease wrapper
(``leases``). The backends below take plain clients and numbers; everything here is
rebuilt when the settings change.

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
from typing import Any, Protocol

import redis
import redis.cluster
from django.conf import settings as django_settings

from . import leases
from .backends import Backend
from .backends import clock as test_clock
from .backends.breaker import CLOSED, CircuitBreaker, _breakers, breaker_for
from .backends.clients import Timeouts, build_async_client, build_sync_client, endpoint_name
from .backends.cluster import node_of
from .backends.redis import RedisBackend
from .conf import generation, get_settings, on_change
from .policy import PerPolicy, Policy

__all__ = ["backend_for", "backend_for_plan", "cache_connection", "clocked_backend", "deciding_backend", "endpoint_for",
           "in_event_loop", "limiter_async_client", "limiter_client", "read_guarded", "store_backend"]


class StoredPlan(Protocol):
    """What ``backend_for_plan`` reads of a plan and keeps on it (``plan.Plan``)."""

    policy: Policy
    backend: Any
    backend_generation: int


_lock = threading.Lock()
_sync: dict[str, Any] = {}
_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = weakref.WeakKeyDictionary()
_backends: dict[str, RedisBackend] = {}
_clocked: dict[str, RedisBackend] = {}  # alias -> its backend while a test clock is installed (clocked_backend)
_last_loop: list[Any] = [None, None]  # the event loop of the last async call and its clients (_async[loop])
_endpoints: dict[str, str] = {}


# Setting up an asyncio connection is bounded by CONNECT_TIMEOUT, but never by less than
# this (counted by a FairTimer: time the event loop spends on other work is not charged):
# it happens outside the decisions' deadlines and once per connection, and may need a few
# network round trips (TCP, TLS, AUTH, SELECT, a Sentinel lookup).
ASYNC_SETUP_MIN = 0.1  # seconds


def _timeouts() -> Timeouts:
    s = get_settings()
    return Timeouts(s.timeout, s.connect_timeout, max(s.connect_timeout, ASYNC_SETUP_MIN))


def _cache_client(alias: str) -> Any:
    """The django-redis client object of ``alias`` (no network I/O)."""
    from django.core.cache import caches

    return caches[alias].client


def limiter_client(alias: str) -> Any:
    """The sync client (``redis.Redis`` or ``RedisCluster``) the limiter uses for ``alias``."""
    client = _sync.get(alias)
    if client is None:
        built_in = generation()
        with _lock:
            client = _sync.get(alias)
            if client is None:
                client = build_sync_client(_cache_client(alias), _timeouts())
                if built_in == generation():  # not built from settings that changed meanwhile
                    _sync[alias] = client
    return client


def limiter_async_client(alias: str) -> Any | None:
    """A native asyncio client for ``alias``, one per event loop; None: use a thread."""
    loop = asyncio.get_running_loop()
    per_loop = _last_loop[1] if _last_loop[0] is loop else None  # the loop of the last call: no weak lookup
    if per_loop is None:
        per_loop = _async.setdefault(loop, {})
        _last_loop[:] = (loop, per_loop)
    if alias not in per_loop:
        per_loop[alias] = build_async_client(_cache_client(alias), _timeouts(),
                                             functools.partial(_setup_failed, alias))
    return per_loop[alias]


def _setup_failed(alias: str, exc: BaseException) -> None:
    """A failed connection set-up of the asyncio pool counts once against the alias's
    breaker, however many decisions were waiting for it (they are not counted again)."""
    _breaker_of(alias, "").failure(exc)


def _endpoint(alias: str) -> str:
    name = _endpoints.get(alias)
    if name is None:
        name = _endpoints[alias] = endpoint_name(django_settings.CACHES.get(alias, {}))
    return name


def endpoint_for(alias: str, key: str) -> str:
    """The circuit-breaker endpoint of a decision on ``key``: the alias's configured
    server, or on Redis Cluster the primary that serves the key's slot (one dead shard
    does not open the circuit for the others)."""
    client = _sync.get(alias)
    # isinstance(x, redis.Redis) is cheap; RedisCluster's Protocol bases make its check slow.
    if not isinstance(client, redis.Redis) and isinstance(client, redis.cluster.RedisCluster):
        node = node_of(client, key)
        if node is not None:
            return node
    return _endpoint(alias)


# alias -> (its sync client then, the breaker of its configured server): a decision not on
# Redis Cluster finds its breaker with two dict lookups.
_alias_breakers: dict[str, tuple[Any, CircuitBreaker]] = {}


def _breaker_of(alias: str, key: str) -> CircuitBreaker:
    client = _sync.get(alias)
    found = _alias_breakers.get(alias)
    if found is not None and found[0] is client and _breakers.get(found[1].endpoint) is found[1]:
        return found[1]  # same client (or still none), and the breaker not reset since
    config = get_settings().breaker
    endpoint = endpoint_for(alias, key)
    breaker = breaker_for(endpoint, config.failures, config.cooldown)
    if not isinstance(client, redis.cluster.RedisCluster):  # not a cluster node's: the same for every key
        _alias_breakers[alias] = (client, breaker)
    return breaker


def store_backend(alias: str | None = None) -> RedisBackend:
    """The Redis backend of ``alias`` (default: ``CACHE_ALIAS``)."""
    alias = get_settings().cache_alias if alias is None else alias
    backend = _backends.get(alias)
    if backend is None:
        backend = _backends[alias] = RedisBackend(functools.partial(limiter_client, alias),
                                                  functools.partial(limiter_async_client, alias),
                                                  functools.partial(_breaker_of, alias))
    return backend


def deciding_backend(alias: str | None = None) -> RedisBackend:
    """The store of ``alias`` as a decision reaches it now, leases aside: the clocked one
    while a test clock is installed (a settle must read the time its decision read)."""
    return store_backend(alias) if test_clock.active is None else clocked_backend(alias)


def clocked_backend(alias: str | None = None) -> RedisBackend:
    """The store of ``alias`` as decisions see it while a test clock is installed
    (``backends/clock.py``): every script one plain ``EVAL`` that reads the clock, never
    behind a lease (a lease's units and expiry are real time's); concurrency slots are kept
    by the store's own keeper."""
    alias = get_settings().cache_alias if alias is None else alias
    backend = _clocked.get(alias)
    if backend is None:
        store = store_backend(alias)

        def get_async() -> Any:
            client = limiter_async_client(alias)
            return None if client is None else test_clock.AsyncClockedClient(client)

        backend = _clocked[alias] = RedisBackend(lambda: test_clock.ClockedClient(limiter_client(alias)), get_async,
                                                 functools.partial(_breaker_of, alias), keeper=store.keeper)
    return backend


# policy -> (leases.generation, backend): one dict lookup per plan that has no backend yet
# (backend_for_plan).
_for_policy: PerPolicy[tuple[int, Backend]] = PerPolicy()


def backend_for(policy: Policy) -> Backend:
    """The backend that decides ``policy``: the store of its ``cache_alias`` (default
    ``CACHE_ALIAS``), behind local leases when the policy has a ``lease``."""
    found = _for_policy.get(policy)
    if found is None or found[0] != leases.generation:
        found = _built_for(policy)
    return found[1]


def _built_for(policy: Policy) -> tuple[int, Backend]:
    built_in = leases.generation
    if test_clock.active is None:
        backend = leases.leasing_backend(store_backend(policy.cache_alias), policy)
    else:  # django_gcra.testing.limiter_clock (which moves leases.generation as it starts and stops)
        backend = clocked_backend(policy.cache_alias)
    return _for_policy.put(policy, (built_in, backend))


def backend_for_plan(p: StoredPlan) -> Backend:
    """``backend_for(p.policy)``, kept on the plan for the next decision of a memoized plan
    (``p.backend``, read in ``limiter``: valid while ``leases.generation`` is
    ``p.backend_generation``, the one the backend was built in)."""
    policy = p.policy
    found = _for_policy.get(policy)
    if found is None or found[0] != leases.generation:
        found = _built_for(policy)
    p.backend_generation, p.backend = found
    return found[1]


def in_event_loop() -> bool:
    """True in a coroutine's thread: a blocking read there would stall every task of the loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def read_guarded(key: str) -> bytes | None:
    """GET ``key`` with the limiter's tight timeouts, and not at all while the endpoint's
    circuit breaker is open (raises ``ConnectionError``): for reads on the request path."""
    alias = get_settings().cache_alias
    if _breaker_of(alias, key).state != CLOSED:
        raise ConnectionError("circuit open")
    value: bytes | None = limiter_client(alias).get(key)
    return value


def cache_connection(alias: str | None = None) -> Any:
    """The cache's own client (its general timeouts): for commands off the decision path."""
    from django_redis import get_redis_connection

    return get_redis_connection(get_settings().cache_alias if alias is None else alias)


@on_change
def _forget() -> None:
    with _lock:
        _sync.clear()
        _async.clear()
        _last_loop[:] = (None, None)
        _backends.clear()
        _clocked.clear()
        _endpoints.clear()
        _for_policy.clear()
        _alias_breakers.clear()
