"""The limiter's own Redis clients: the server(s) of a django-redis cache client, reached
with tight connect/read timeouts and no retries.

The cache's own client keeps its general timeouts; a rate-limit decision must not wait
seconds for a slow Redis, so it gets a separate pool built from the same connection
settings. Plain URLs, unix sockets, TLS and django-redis's ``SentinelClient`` are
supported, and so is ``django_gcra.backends.cluster.ClusterClient`` (Redis Cluster).
The builders take the cache client and the timeouts; caching them is the caller's job.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
from redis.backoff import NoBackoff
from redis.sentinel import Sentinel, SentinelConnectionPool

from .cluster import ClusterClient, tight_async_cluster, tight_cluster

__all__ = ["Timeouts", "build_async_client", "build_sync_client", "endpoint_name", "tight_kwargs"]

# What a native asyncio connection accepts of a sync pool's connection kwargs.
_ASYNC_KWARGS = ("host", "port", "path", "db", "username", "password", "client_name", "credential_provider",
                 "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_check_hostname")
_ASYNC_CONNECTIONS = {redis.Connection: redis.asyncio.Connection,
                      redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
                      redis.SSLConnection: redis.asyncio.SSLConnection}


class Timeouts(NamedTuple):
    read: float  # seconds
    connect: float


def endpoint_name(config: dict[str, Any]) -> str:
    """The configured endpoint(s) of a cache configuration, without credentials: one breaker each."""
    location = config.get("LOCATION", "")
    urls = location if isinstance(location, (list, tuple)) else str(location).split(",")
    names = []
    for url in urls:
        parts = urlsplit(url)
        names.append(f"{parts.scheme}://{parts.hostname or ''}{':' + str(parts.port) if parts.port else ''}"
                     f"{parts.path}" if parts.scheme else url)
    return ",".join(names)


def tight_kwargs(kwargs: dict[str, Any], timeouts: Timeouts, retry: Any) -> dict[str, Any]:
    """Connection kwargs with the limiter's timeouts and ``retry`` instead of the cache's."""
    out = {k: v for k, v in kwargs.items() if k not in ("connection_pool", "retry_on_error", "retry_on_timeout")}
    out.update(socket_timeout=timeouts.read, socket_connect_timeout=timeouts.connect, retry=retry)
    return out


def _no_retry() -> Any:
    return redis.retry.Retry(NoBackoff(), 0)


def _tight_sentinel(manager: Sentinel, timeouts: Timeouts, cls: type = Sentinel, retry: Any = None) -> Any:
    """A Sentinel manager on the same sentinels whose master lookups are tight too."""
    addrs = [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
             for s in manager.sentinels]
    kwargs = tight_kwargs(dict(manager.sentinel_kwargs), timeouts, retry or _no_retry())
    connection = {k: v for k, v in manager.connection_kwargs.items() if not k.startswith("socket_")}
    if cls is not Sentinel:  # asyncio: only what an asyncio connection understands
        kwargs = {k: v for k, v in kwargs.items() if k in _ASYNC_KWARGS or k.startswith("socket_") or k == "retry"}
        connection = {k: v for k, v in connection.items() if k in _ASYNC_KWARGS}
    return cls(addrs, min_other_sentinels=manager.min_other_sentinels, sentinel_kwargs=kwargs, **connection)


def build_sync_client(cache_client: Any, timeouts: Timeouts) -> Any:
    """A ``redis.Redis`` (or ``RedisCluster``) on the servers of a django-redis client."""
    if isinstance(cache_client, ClusterClient):
        return tight_cluster(cache_client, timeouts.read, timeouts.connect)
    pool = cache_client.get_client(write=True).connection_pool
    common = {"connection_class": pool.connection_class, "max_connections": pool.max_connections,
              **tight_kwargs(pool.connection_kwargs, timeouts, _no_retry())}
    if isinstance(pool, SentinelConnectionPool):
        return redis.Redis(connection_pool=SentinelConnectionPool(
            pool.service_name, _tight_sentinel(pool.sentinel_manager, timeouts), is_master=pool.is_master,
            check_connection=pool.check_connection, **common))
    return redis.Redis(connection_pool=redis.ConnectionPool(**common))


def build_async_client(cache_client: Any, timeouts: Timeouts) -> Any | None:
    """A native asyncio client on the same servers; None when there is no asyncio twin
    of the connection class (fakeredis, a custom class): the caller then uses a thread."""
    if isinstance(cache_client, ClusterClient):
        return tight_async_cluster(cache_client, timeouts.read, timeouts.connect)
    pool = cache_client.get_client(write=True).connection_pool
    retry = redis.asyncio.retry.Retry(NoBackoff(), 0)
    kwargs = tight_kwargs({k: v for k, v in pool.connection_kwargs.items() if k in _ASYNC_KWARGS}, timeouts, retry)
    if isinstance(pool, SentinelConnectionPool):
        manager = _tight_sentinel(pool.sentinel_manager, timeouts, redis.asyncio.sentinel.Sentinel, retry)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("host", "port")}
        return manager.master_for(pool.service_name, **kwargs)
    connection_class = _ASYNC_CONNECTIONS.get(pool.connection_class)
    if connection_class is None:
        return None
    return redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(
        connection_class=connection_class, max_connections=pool.max_connections, **kwargs))
