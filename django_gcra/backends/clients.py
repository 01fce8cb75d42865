"""The limiter's own Redis clients: the server(s) of a django-redis cache alias, reached
with tight connect/read timeouts (``TIMEOUT``, ``CONNECT_TIMEOUT``) and no retries.

The cache's own client keeps its general timeouts; a rate-limit decision must not wait
seconds for a slow Redis, so it gets a separate pool built from the same connection
settings. Plain URLs, unix sockets, TLS and django-redis's ``SentinelClient`` are
supported, and so is ``django_gcra.backends.cluster.ClusterClient`` (Redis Cluster).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
from redis.backoff import NoBackoff
from redis.sentinel import Sentinel, SentinelConnectionPool

from .settings import memo, timeouts

__all__ = ["limiter_client", "limiter_async_client", "endpoint_name", "endpoint_for", "cache_client"]

_lock = threading.Lock()
_sync: dict[tuple[Any, ...], Any] = {}
_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()

# What a native asyncio connection accepts of a sync pool's connection kwargs.
_ASYNC_KWARGS = ("host", "port", "path", "db", "username", "password", "client_name", "credential_provider",
                 "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_check_hostname")
_ASYNC_CONNECTIONS = {redis.Connection: redis.asyncio.Connection,
                      redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
                      redis.SSLConnection: redis.asyncio.SSLConnection}


def cache_client(alias: str) -> Any:
    """The django-redis client object of ``alias`` (no network I/O)."""
    from django.core.cache import caches

    return caches[alias].client


def endpoint_name(alias: str) -> str:
    """The configured endpoint(s) of ``alias``, without credentials: one breaker each."""
    return _endpoint_names().get(alias, alias)


@memo
def _endpoint_names() -> dict[str, str]:
    from django.conf import settings

    return {alias: _endpoint_name(config) for alias, config in settings.CACHES.items()}


def _endpoint_name(config: dict[str, Any]) -> str:
    location = config.get("LOCATION", "")
    urls = location if isinstance(location, (list, tuple)) else str(location).split(",")
    names = []
    for url in urls:
        parts = urlsplit(url)
        names.append(f"{parts.scheme}://{parts.hostname or ''}{':' + str(parts.port) if parts.port else ''}"
                     f"{parts.path}" if parts.scheme else url)
    return ",".join(names)


def _tight(kwargs: dict[str, Any], retry: Any) -> dict[str, Any]:
    read, connect = timeouts()
    out = {k: v for k, v in kwargs.items() if k not in ("connection_pool", "retry_on_error", "retry_on_timeout")}
    out.update(socket_timeout=read, socket_connect_timeout=connect, retry=retry)
    return out


def _no_retry() -> Any:
    return redis.retry.Retry(NoBackoff(), 0)


def _tight_sentinel(manager: Sentinel, cls: type = Sentinel, retry: Any = None) -> Any:
    """A Sentinel manager on the same sentinels whose master lookups are tight too."""
    addrs = [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
             for s in manager.sentinels]
    kwargs = _tight(dict(manager.sentinel_kwargs), retry or _no_retry())
    connection = {k: v for k, v in manager.connection_kwargs.items() if not k.startswith("socket_")}
    if cls is not Sentinel:  # asyncio: only what an asyncio connection understands
        kwargs = {k: v for k, v in kwargs.items() if k in _ASYNC_KWARGS or k.startswith("socket_") or k == "retry"}
        connection = {k: v for k, v in connection.items() if k in _ASYNC_KWARGS}
    return cls(addrs, min_other_sentinels=manager.min_other_sentinels, sentinel_kwargs=kwargs, **connection)


def _build_sync(alias: str) -> Any:
    from .cluster import ClusterClient, tight_cluster

    client = cache_client(alias)
    if isinstance(client, ClusterClient):
        return tight_cluster(client)
    pool = client.get_client(write=True).connection_pool
    common = {"connection_class": pool.connection_class, "max_connections": pool.max_connections,
              **_tight(pool.connection_kwargs, _no_retry())}
    if isinstance(pool, SentinelConnectionPool):
        return redis.Redis(connection_pool=SentinelConnectionPool(
            pool.service_name, _tight_sentinel(pool.sentinel_manager), is_master=pool.is_master,
            check_connection=pool.check_connection, **common))
    return redis.Redis(connection_pool=redis.ConnectionPool(**common))


def _key(alias: str) -> tuple[Any, ...]:
    # A new client when the alias's configuration or the (live) timeouts change.
    return (alias, _configs().get(alias), timeouts())


@memo
def _configs() -> dict[str, str]:
    from django.conf import settings

    return {alias: repr(config) for alias, config in settings.CACHES.items()}


def limiter_client(alias: str) -> Any:
    """The sync client (``redis.Redis`` or ``RedisCluster``) the limiter uses for ``alias``."""
    key = _key(alias)
    client = _sync.get(key)
    if client is None:
        with _lock:
            client = _sync.get(key)
            if client is None:
                client = _sync[key] = _build_sync(alias)
    return client


def _build_async(alias: str) -> Any | None:
    from .cluster import ClusterClient, tight_async_cluster

    client = cache_client(alias)
    if isinstance(client, ClusterClient):
        return tight_async_cluster(client)
    pool = client.get_client(write=True).connection_pool
    retry = redis.asyncio.retry.Retry(NoBackoff(), 0)
    kwargs = _tight({k: v for k, v in pool.connection_kwargs.items() if k in _ASYNC_KWARGS}, retry)
    if isinstance(pool, SentinelConnectionPool):
        manager = _tight_sentinel(pool.sentinel_manager, redis.asyncio.sentinel.Sentinel, retry)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("host", "port")}
        return manager.master_for(pool.service_name, **kwargs)
    connection_class = _ASYNC_CONNECTIONS.get(pool.connection_class)
    if connection_class is None:  # fakeredis or a custom class: no asyncio twin, use a thread
        return None
    return redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(
        connection_class=connection_class, max_connections=pool.max_connections, **kwargs))


def limiter_async_client(alias: str) -> Any | None:
    """A native asyncio client for ``alias``, one per event loop; None: use a thread."""
    per_loop = _async.setdefault(asyncio.get_running_loop(), {})
    key = _key(alias)
    if key not in per_loop:
        per_loop[key] = _build_async(alias)
    return per_loop[key]


def endpoint_for(alias: str, key: str) -> str:
    """The circuit-breaker endpoint of a decision on ``key``: the alias's configured
    server, or on Redis Cluster the primary that serves the key's slot (one dead shard
    does not open the circuit for the others)."""
    client = _sync.get(_key(alias))
    # isinstance(x, redis.Redis) is cheap; RedisCluster's Protocol bases make its check slow.
    if not isinstance(client, redis.Redis) and isinstance(client, redis.cluster.RedisCluster):
        from .cluster import node_of

        node = node_of(client, key)
        if node is not None:
            return node
    return endpoint_name(alias)
