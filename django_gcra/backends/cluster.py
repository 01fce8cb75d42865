"""Redis Cluster: a django-redis client class on redis-py's ``RedisCluster``.

django-redis has no cluster client, so name this one in the cache alias the limiter uses::

    CACHES = {"default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"],   # startup nodes
        "OPTIONS": {"CLIENT_CLASS": "django_gcra.backends.cluster.ClusterClient"},
    }}

Every key of one decision carries the same hash tag (``keys.py``), so the composite
script runs on one node. ``RedisCluster`` follows MOVED (slot moved) and ASK/TRYAGAIN
(slot migrating) redirections; on NOSCRIPT the script is loaded on every primary, so it
is present wherever a slot moves.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
from django_redis.client import DefaultClient
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError

__all__ = ["ClusterClient", "is_cluster_client", "node_of", "startup_nodes", "tight_async_cluster", "tight_cluster"]

_clients: dict[tuple[Any, ...], redis.cluster.RedisCluster] = {}
_lock = threading.Lock()


def startup_nodes(urls: Any) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """(host, port) of every ``redis://`` URL, and the credentials of the first; ``ValueError``
    names a URL that is not one."""
    urls = urls if isinstance(urls, (list, tuple)) else str(urls).split(",")
    nodes: list[tuple[str, int]] = []
    auth: dict[str, Any] = {}
    for url in urls:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError(f"Redis Cluster startup node {url!r} is not a redis:// URL.")
        nodes.append((parts.hostname, parts.port or 6379))
        if not auth and (parts.username or parts.password):
            auth = {"username": unquote(parts.username or "") or None, "password": unquote(parts.password or "")}
        if parts.scheme == "rediss":
            auth["ssl"] = True
    return nodes, auth


class ClusterClient(DefaultClient):
    """A django-redis client whose one "server" is the whole cluster named by LOCATION."""

    def get_next_client_index(self, write: bool = True, tried: list[int] | None = None) -> int:
        return 0  # one cluster client; replicas are the cluster's business

    @property
    def locations(self) -> Any:
        """The configured startup node URL(s)."""
        return self._server

    def cluster_kwargs(self) -> dict[str, Any]:
        _, auth = startup_nodes(self._server)
        kwargs: dict[str, Any] = {**auth, **self._options.get("CONNECTION_POOL_KWARGS", {})}
        for option, name in (("SOCKET_TIMEOUT", "socket_timeout"),
                             ("SOCKET_CONNECT_TIMEOUT", "socket_connect_timeout")):
            if option in self._options:
                kwargs[name] = self._options[option]
        return kwargs

    def connect(self, index: int = 0) -> redis.cluster.RedisCluster:
        nodes, _ = startup_nodes(self._server)
        kwargs = self.cluster_kwargs()
        key = (tuple(nodes), repr(sorted(kwargs.items())))
        with _lock:  # one cluster client (and topology) per process, as django-redis shares pools
            if key not in _clients:
                _clients[key] = redis.cluster.RedisCluster(
                    startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in nodes], **kwargs)
            return _clients[key]

    def disconnect(self, index: int = 0, client: Any = None) -> None:
        client = client or self._clients[index]
        if client is not None:
            client.close()


def is_cluster_client(client_class: Any) -> bool:
    """True when a cache's ``CLIENT_CLASS`` option (a class or a dotted path) is ``ClusterClient``."""
    return client_class in (ClusterClient, f"{ClusterClient.__module__}.{ClusterClient.__name__}")


def _tight(client: ClusterClient, read: float, connect: float) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    nodes, _ = startup_nodes(client.locations)
    kwargs = {k: v for k, v in client.cluster_kwargs().items()
              if k not in ("connection_pool", "retry", "retry_on_error", "retry_on_timeout")}
    kwargs.update(socket_timeout=read, socket_connect_timeout=connect, protocol=2)  # RESP2: no HELLO on connect
    return nodes, kwargs


def tight_cluster(client: ClusterClient, read: float, connect: float) -> redis.cluster.RedisCluster:
    """The limiter's own cluster client: same nodes, tight timeouts, no retries.

    Connects to the cluster to read its topology: raises ``RedisClusterException`` (not
    a ``RedisError``) when no startup node answers.
    """
    nodes, kwargs = _tight(client, read, connect)
    return redis.cluster.RedisCluster(startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in nodes],
                                      retry=redis.retry.Retry(NoBackoff(), 0), **kwargs)


def tight_async_cluster(client: ClusterClient, read: float, connect: float) -> redis.asyncio.cluster.RedisCluster:
    nodes, kwargs = _tight(client, read, connect)
    return redis.asyncio.cluster.RedisCluster(
        startup_nodes=[redis.asyncio.cluster.ClusterNode(h, p) for h, p in nodes],
        retry=redis.asyncio.retry.Retry(NoBackoff(), 0), **kwargs)


def node_of(client: Any, key: str) -> str | None:
    """``host:port`` of the primary serving ``key``'s slot, if the client knows it yet."""
    try:
        node = client.get_node_from_key(key)
    except (RedisClusterException, RedisError, LookupError, AttributeError):  # topology not loaded yet
        return None
    return None if node is None else f"{node.host}:{node.port}"
