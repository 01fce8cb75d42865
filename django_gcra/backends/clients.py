"""The limiter's own Redis clients: the server(s) of a django-redis cache client, reached
with tight connect/read timeouts and no retries.

The cache's own client keeps its general timeouts; a rate-limit decision must not wait
seconds for a slow Redis, so it gets a separate pool built from the same connection
settings. Plain URLs, unix sockets, TLS and django-redis's ``SentinelClient`` are
supported, and so is ``django_gcra.backends.cluster.ClusterClient`` (Redis Cluster).
The builders take the cache client and the timeouts; caching them is the caller's job.

Cold start of the asyncio client (``SetUpPool``): a native asyncio client is built per
event loop, so a fresh process meets its first burst of concurrent decisions with no
connection at all. Opening one connection per decision inside the 10 ms read timeout
charged the event loop's own backlog (every other request of the burst being served
meanwhile) to Redis: the connect timeouts opened the circuit breaker on a healthy Redis.
So the asyncio pool

- is bounded (``max_connections``, at most ``ASYNC_MAX_CONNECTIONS``); a decision that
  finds every connection busy waits, first in first served, for one to be released;
- sets connections up one at a time, in a task of its own, outside every decision's
  deadline: TCP connect, TLS, AUTH and SELECT are bounded by ``Timeouts.setup``, the
  command round trip of a decision by ``Timeouts.read`` only. It grows only while
  decisions are waiting, and hands out only connections that are set up and clean;
- reports a failed set-up once (``on_setup_failure``: the caller counts it against the
  endpoint's circuit breaker), however many decisions were waiting for it; they get a
  ``ConnectionSetUpFailed``, which the backend does not count again. A waiting
  decision is answered as soon as there is evidence that Redis is unwell (that failed
  set-up, or the circuit opening), not after a wall-clock wait that would measure the
  event loop's backlog (``_SetUpMixin``);
- skips ``CLIENT SETINFO`` and speaks RESP2 (redis-py 8 would send ``HELLO 3`` while
  connecting), so that a paused Redis (which still accepts TCP connections) costs a
  decision its read timeout and not the set-up budget; and once a round trip has timed
  out (evidence that Redis is unwell), a decision waits for a set-up at most its own read
  timeout, until a round trip or a set-up succeeds again (AUTH and SELECT still need the
  server). Every limiter connection, sync and async, speaks RESP2: one handshake less.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
from redis.backoff import NoBackoff
from redis.sentinel import Sentinel, SentinelConnectionPool

from .cluster import ClusterClient, tight_async_cluster, tight_cluster

__all__ = ["ASYNC_MAX_CONNECTIONS", "ConnectionSetUpFailed", "FairTimer", "SentinelSetUpPool", "SetUpPool", "Timeouts",
           "build_async_client", "build_sync_client", "endpoint_name", "tight_kwargs"]

ASYNC_MAX_CONNECTIONS = 50  # per event loop and alias (redis-py's BlockingConnectionPool default)

# What a native asyncio connection accepts of a sync pool's connection kwargs.
_ASYNC_KWARGS = ("host", "port", "path", "db", "username", "password", "client_name", "credential_provider", "protocol",
                 "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_check_hostname")
# ... and for a Sentinel manager's connections (to the sentinels, and the master's defaults):
# ``ssl`` picks the asyncio TLS connection classes there (the sync pool's class says it).
_ASYNC_SENTINEL_KWARGS = (*_ASYNC_KWARGS, "ssl")
_ASYNC_CONNECTIONS = {redis.Connection: redis.asyncio.Connection,
                      redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
                      redis.SSLConnection: redis.asyncio.SSLConnection}


class Timeouts(NamedTuple):
    read: float  # seconds: a command's round trip
    connect: float  # a sync connection's TCP connect
    setup: float = 0.0  # setting up an asyncio connection, outside any decision's deadline; 0: ``connect``


class ConnectionSetUpFailed(redis.ConnectionError):
    """This decision got no connection: the set-up it waited for failed (and was reported
    once through ``on_setup_failure``), the circuit opened while it waited, or the pool
    made no progress for the set-up budget. Not to be counted against the endpoint again."""


# Explicit None turns CLIENT SETINFO off (``driver_info`` in redis-py 7.1+, where
# lib_name/lib_version are deprecated).
_BASE_CONNECTION = getattr(redis.asyncio.connection, "AbstractConnection", redis.asyncio.Connection)
_NO_SETINFO = ({"driver_info": None} if "driver_info" in inspect.signature(_BASE_CONNECTION.__init__).parameters
               else {"lib_name": None, "lib_version": None})

_TICKS = 32  # turns of the event loop that a set-up budget spans at least (``FairTimer``)
_READ_TICKS = 8  # turns of the event loop a round trip's deadline spans at least
_STALL_TICKS = 8  # ticks (a set-up budget apart / 8) without pool progress after which a waiter gives up


class FairTimer:
    """Calls ``expire()`` once ``budget`` seconds have passed *and* the event loop has
    turned ``ticks`` times since: ``ticks`` timer callbacks ``budget / ticks`` apart,
    each armed when the previous one ran. On a responsive loop that is ``budget``; while
    the loop is busy with other work (a burst of requests, a cold process) or the process
    is not scheduled, the time that passes is not charged to the network. An asyncio
    timeout fires after wall-clock time and cancels even an operation whose answer
    arrived meanwhile but was not read yet because the loop was busy."""

    def __init__(self, loop: asyncio.AbstractEventLoop, budget: float, expire: Callable[[], None],
                 ticks: int = _TICKS) -> None:
        self.loop, self.step, self.left, self.expire = loop, budget / ticks, ticks, expire
        self.handle: asyncio.TimerHandle | None = loop.call_later(self.step, self._tick)

    def _tick(self) -> None:
        self.left -= 1
        if self.left > 0:
            self.handle = self.loop.call_later(self.step, self._tick)
        else:
            self.handle = None
            self.expire()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class _SetUpMixin:
    """The pool logic of ``SetUpPool`` (module docstring), on top of a redis-py asyncio
    ``ConnectionPool`` whose bookkeeping it keeps (``_available_connections``: idle and
    connected; ``_in_use_connections``), so ``disconnect()`` and ``aclose()`` still work.

    A round trip (a command and its reply) is bounded by a ``FairTimer`` of
    ``read_timeout`` (the decision's ``TIMEOUT``), armed when the connection is handed out
    and cancelled when it is released: at least ``read_timeout`` and ``_READ_TICKS``
    turns of the loop, so a reply that arrived while the loop was busy is read, not
    thrown away. On expiry the pending read raises ``redis.TimeoutError`` (through the
    connection's ``StreamReader``) and the socket is aborted.

    Setting a connection up (TCP connect, TLS, AUTH, SELECT; the master lookup on
    Sentinel) runs in a task of its own, without redis-py's wall-clock timeouts, bounded
    by a ``FairTimer`` of ``setup_timeout``. Waiting is not bounded by wall-clock time
    either, which on a busy event loop measures the loop's backlog, not Redis: a waiting
    decision is answered when a connection is handed to it, at once with
    ``ConnectionSetUpFailed`` when the set-up it waits for fails with no other connection
    alive or when ``abandon_waiters()`` is called (the backend does so when the circuit
    opens), and gives up only when, with no set-up in flight, the pool has made no
    progress (no connection handed over, released or set up) for ``_STALL_TICKS`` ticks
    an eighth of the set-up budget apart: a stuck pool, never a merely busy one.
    """

    _available_connections: list[Any]
    _in_use_connections: set[Any]
    max_connections: int

    def __init__(self, *args: Any, setup_timeout: float, read_timeout: float,
                 on_setup_failure: Callable[[BaseException], None] | None = None, **kwargs: Any) -> None:
        # No wall-clock timeout while a connection is set up (the FairTimer bounds it);
        # a set-up connection gets ``read_timeout`` for its round trips.
        kwargs.update(socket_timeout=None, socket_connect_timeout=None, **_NO_SETINFO)
        super().__init__(*args, **kwargs)
        self.setup_timeout, self.read_timeout = setup_timeout, read_timeout
        self.on_setup_failure = on_setup_failure
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._setting_up: asyncio.Task[None] | None = None
        self._deadlines: dict[Any, FairTimer] = {}  # connection in use -> its round trip's deadline
        self._expired: set[Any] = set()  # in use, and its deadline passed: never handed out again
        self.round_trip_timeouts = 0
        self._suspect = False  # a round trip timed out, and none (nor a set-up) has succeeded since
        self._progress = 0  # bumped whenever a connection is handed over, released or set up (or fails to be)
        self.setups = self.setup_failures = self.waits = 0  # connections set up, failed set-ups, decisions that waited
        self.longest_wait = 0.0  # seconds

    def _live(self) -> int:
        return len(self._available_connections) + len(self._in_use_connections)

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A set-up, clean connection: an idle one, else the next one released or set up."""
        while self._available_connections:
            connection = self._available_connections.pop()
            if await self._clean(connection):
                self._in_use_connections.add(connection)
                return self._armed(connection)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        self._waiters.append(waiter)
        self._grow()
        self.waits += 1
        started = loop.time()
        timer = loop.call_later(self.setup_timeout / _STALL_TICKS, self._tick, waiter, self._progress, 0)
        suspect = FairTimer(loop, self.read_timeout, lambda: self._give_up(waiter), _READ_TICKS) \
            if self._suspect else None
        try:
            return self._armed(await waiter)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                connection = waiter.result()  # handed over just as this decision was cancelled: pass it on
                self._in_use_connections.discard(connection)
                self._hand_over(connection)
            raise
        finally:
            timer.cancel()
            if suspect is not None:
                suspect.cancel()
            self.longest_wait = max(self.longest_wait, loop.time() - started)
            try:
                self._waiters.remove(waiter)
            except ValueError:
                pass

    def _armed(self, connection: Any) -> Any:
        """``connection``, with the deadline of the round trip its caller is about to make."""
        self._deadlines[connection] = FairTimer(asyncio.get_running_loop(), self.read_timeout,
                                                lambda: self._timed_out(connection), _READ_TICKS)
        return connection

    def _give_up(self, waiter: asyncio.Future[Any]) -> None:
        """A decision that waited its read timeout for a set-up while Redis is suspect."""
        if not waiter.done():
            waiter.set_exception(ConnectionSetUpFailed(
                f"no connection to Redis within {self.read_timeout * 1000:g} ms after a round trip timed out"))

    def _timed_out(self, connection: Any) -> None:
        """The round trip on ``connection`` outlasted ``read_timeout``: its pending read
        raises ``TimeoutError`` and the socket is closed (a late reply is never read)."""
        self._deadlines.pop(connection, None)
        self._expired.add(connection)
        self._suspect = True
        self.round_trip_timeouts += 1
        where = connection._host_error() if hasattr(connection, "_host_error") else "Redis"
        error = redis.TimeoutError(f"Timeout reading from {where}")
        reader, writer = getattr(connection, "_reader", None), getattr(connection, "_writer", None)
        if reader is not None:
            reader.set_exception(error)
        if writer is not None:
            writer.transport.abort()

    async def release(self, connection: Any) -> None:
        deadline = self._deadlines.pop(connection, None)
        if deadline is not None:
            deadline.cancel()
        self._in_use_connections.discard(connection)
        self._progress += 1
        expired = connection in self._expired
        self._expired.discard(connection)
        if not expired and deadline is not None:
            self._suspect = False  # a round trip ended in time
        should_reconnect = getattr(connection, "should_reconnect", None)
        if connection.is_connected and not expired and not (should_reconnect and should_reconnect()):
            self._hand_over(connection)
            return
        await connection.disconnect(nowait=True)  # a failed command left it unusable: replace it
        self._grow()

    def abandon_waiters(self, reason: str) -> None:
        """Answer every waiting decision now with ``ConnectionSetUpFailed(reason)``."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionSetUpFailed(reason))

    @staticmethod
    async def _clean(connection: Any) -> bool:
        """Connected, with nothing unread and no EOF (a Redis restart closed it): usable."""
        can_read = getattr(connection, "can_read", None) or connection.can_read_destructive  # redis-py < 6
        try:
            if connection.is_connected and not await can_read():
                return True
        except (redis.RedisError, OSError):
            pass
        await connection.disconnect(nowait=True)
        return False

    def _hand_over(self, connection: Any) -> None:
        self._progress += 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_use_connections.add(connection)
                waiter.set_result(connection)
                return
        self._available_connections.append(connection)

    def _tick(self, waiter: asyncio.Future[Any], seen: int, idle: int) -> None:
        if waiter.done():
            return
        idle = idle + 1 if self._progress == seen and self._setting_up is None else 0
        if idle >= _STALL_TICKS:
            waiter.set_exception(ConnectionSetUpFailed(
                f"no connection to Redis: the pool made no progress in {self.setup_timeout * 1000:g} ms"))
            return
        waiter.get_loop().call_later(self.setup_timeout / _STALL_TICKS, self._tick, waiter, self._progress, idle)

    def _grow(self) -> None:
        """Start setting up one more connection if a decision waits and there is room."""
        if self._setting_up is None and any(not w.done() for w in self._waiters) \
                and self._live() < self.max_connections:
            self._setting_up = asyncio.get_running_loop().create_task(self._set_up())

    def _set_up_failed(self, exc: BaseException) -> None:
        self._setting_up = None
        self._progress += 1
        self.setup_failures += 1
        if self.on_setup_failure is not None:
            self.on_setup_failure(exc)  # once, however many decisions wait
        if not self._live():  # nothing else to wait for: every waiting decision fails now
            self.abandon_waiters(f"could not set up a connection to Redis: {type(exc).__name__}: {exc}")

    async def _set_up(self) -> None:
        try:
            connection = self.make_connection()  # type: ignore[attr-defined]
        except Exception as exc:  # kwargs the connection class refuses: a failed set-up, never a stuck pool
            self._set_up_failed(exc)
            return
        loop = asyncio.get_running_loop()
        connecting = loop.create_task(connection.connect())
        ended: asyncio.Future[None] = loop.create_future()

        def end() -> None:
            if not ended.done():
                ended.set_result(None)

        connecting.add_done_callback(lambda _: end())
        timer = FairTimer(loop, self.setup_timeout, end)
        try:
            try:
                await ended
            finally:
                timer.cancel()
                if not connecting.done():
                    connecting.cancel()
                    await asyncio.wait([connecting])
            if connecting.cancelled():
                raise redis.TimeoutError(f"setting up a connection took over {self.setup_timeout * 1000:g} ms")
            connecting.result()  # its error, if any
        except Exception as exc:
            await connection.disconnect(nowait=True)
            self._set_up_failed(exc)
            return
        except BaseException:
            self._setting_up = None
            await connection.disconnect(nowait=True)
            raise
        self._setting_up = None
        self._suspect = False
        self.setups += 1
        # From now on only round trips, each bounded by a FairTimer of ``read_timeout``
        # armed when the connection is handed out (a reconnect redis-py might attempt on
        # its own gets the read timeout as its connect timeout).
        connection.socket_connect_timeout = self.read_timeout
        self._hand_over(connection)
        self._grow()


class SetUpPool(_SetUpMixin, redis.asyncio.ConnectionPool):
    """The limiter's asyncio pool: bounded, connections set up one at a time outside the
    decisions' deadlines (module docstring)."""


class SentinelSetUpPool(_SetUpMixin, redis.asyncio.sentinel.SentinelConnectionPool):
    """``SetUpPool`` for a Sentinel service: the master lookup is part of the set-up."""


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
    """Connection kwargs with the limiter's timeouts and ``retry`` instead of the cache's, and
    RESP2 (no ``HELLO`` on connect; redis-py 8's maintenance notifications need RESP3)."""
    out = {k: v for k, v in kwargs.items()
           if k not in ("connection_pool", "retry_on_error", "retry_on_timeout", "maint_notifications_config")}
    out.update(socket_timeout=timeouts.read, socket_connect_timeout=timeouts.connect, retry=retry, protocol=2)
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
        kwargs = {k: v for k, v in kwargs.items()
                  if k in _ASYNC_SENTINEL_KWARGS or k.startswith("socket_") or k == "retry"}
        connection = {k: v for k, v in connection.items() if k in _ASYNC_SENTINEL_KWARGS}
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


def build_async_client(cache_client: Any, timeouts: Timeouts,
                       on_setup_failure: Callable[[BaseException], None] | None = None) -> Any | None:
    """A native asyncio client on the same servers, on a ``SetUpPool`` (a failed
    connection set-up is reported once to ``on_setup_failure``); None when there is no
    asyncio twin of the connection class (fakeredis, a custom class): the caller then
    uses a thread. On Redis Cluster, redis-py's own cluster client (its nodes connect
    inside the decision, with ``Timeouts.connect``)."""
    if isinstance(cache_client, ClusterClient):
        return tight_async_cluster(cache_client, timeouts.read, timeouts.connect)
    pool = cache_client.get_client(write=True).connection_pool
    retry = redis.asyncio.retry.Retry(NoBackoff(), 0)
    kwargs = tight_kwargs({k: v for k, v in pool.connection_kwargs.items() if k in _ASYNC_KWARGS}, timeouts, retry)
    kwargs = {k: v for k, v in kwargs.items() if k not in ("socket_timeout", "socket_connect_timeout")}
    setup_timeout = timeouts.setup or timeouts.connect
    setup: dict[str, Any] = {"setup_timeout": setup_timeout, "read_timeout": timeouts.read,
             "on_setup_failure": on_setup_failure,
             "max_connections": min(pool.max_connections or ASYNC_MAX_CONNECTIONS, ASYNC_MAX_CONNECTIONS)}
    if isinstance(pool, SentinelConnectionPool):
        # The master lookup only happens while a connection is set up: it gets the set-up budget.
        lookup = Timeouts(setup_timeout, setup_timeout)
        manager = _tight_sentinel(pool.sentinel_manager, lookup, redis.asyncio.sentinel.Sentinel, retry)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("host", "port")}
        if issubclass(pool.connection_class, redis.SSLConnection):  # TLS to the master too
            kwargs["ssl"] = True
        return manager.master_for(pool.service_name, connection_pool_class=SentinelSetUpPool, **setup, **kwargs)
    connection_class = _ASYNC_CONNECTIONS.get(pool.connection_class)
    if connection_class is None:
        return None
    return redis.asyncio.Redis(connection_pool=SetUpPool(connection_class=connection_class, **setup, **kwargs))
