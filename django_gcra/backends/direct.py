"""EVALSHA on a connection held per thread, for plain (non-Sentinel, non-cluster) pools.

redis-py's command path (pool checkout with a health poll, retry wrapper, observability
hooks, response callbacks) costs about as much client CPU as the script's round trip
itself. A decision needs none of it: one request, one reply, on a connection this thread
owns. redis-py opens the connection (handshake, AUTH, SELECT, TLS); with hiredis
installed, on a plain TCP or Unix socket, the request is then packed in C, written to the
socket and its reply parsed by a hiredis reader of the runner's own, without redis-py's
layers. Any error other than a Redis error reply drops the connection, so a timed-out
reply can never be read as the answer to a later request.
"""

from __future__ import annotations

import os
import socket
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

_pack: Any  # hiredis.pack_command, or None
_Reader: Any  # hiredis.Reader, or None
try:  # hiredis packs a command in C and parses a reply in C
    from hiredis import Reader as _Reader
    from hiredis import pack_command as _pack
except ImportError:  # redis-py's own packer and parser then
    _Reader = _pack = None
try:  # the error reply -> exception mapping redis-py uses (NOSCRIPT -> NoScriptError, ...)
    from redis._parsers.base import BaseParser

    _parse_error: Callable[[str], Exception] = BaseParser.parse_error
except ImportError:  # pragma: no cover (a redis-py without it: every error reply a ResponseError)
    _parse_error = ResponseError

# Every write of a request goes through this name (``benchmarks.wire`` counts them here).
_send: Callable[[Any, bytes], None] = socket.socket.sendall
_CLOSED = "Connection closed by server."
_PLAIN_POOLS = (redis.ConnectionPool, redis.BlockingConnectionPool)
_runners: weakref.WeakKeyDictionary[Any, DirectRunner | None] = weakref.WeakKeyDictionary()
# The last pool looked up and its runner (one tuple, replaced whole: safe across threads),
# so the usual lookup is two identity checks, not a weak dictionary's. It keeps that one
# pool alive.
_last: tuple[Any, DirectRunner | None] = (None, None)


class DirectRunner(threading.local):
    """One connection per thread (and per process, after a fork) to the pool's server."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.connection: Any = None
        self.sock: Any = None
        self.reader: Any = None
        self.pid = os.getpid()

    def _connect(self) -> None:
        connection = self.pool.connection_class(**self.pool.connection_kwargs)
        connection.connect()  # redis-py's handshake; raises its ConnectionError / TimeoutError
        self.connection, self.pid = connection, os.getpid()
        sock = getattr(connection, "_sock", None) if _pack is not None else None
        # A plain TCP or Unix socket only: TLS (an SSLSocket's own sendall) and test doubles
        # go through redis-py.
        self.sock = sock if type(sock) is socket.socket else None
        if self.sock is not None:
            self.reader = new_reader()

    def __call__(self, *args: Any) -> Any:
        if self.connection is None or self.pid != os.getpid():
            self._connect()
        if self.sock is None:
            return self._through_redis_py(args)
        sock, reader = self.sock, self.reader
        try:
            _send(sock, _pack(args))
            reply = reader.gets()
            while reply is False:
                data = sock.recv(65536)
                if not data:
                    raise RedisConnectionError(_CLOSED)
                reader.feed(data)
                reply = reader.gets()
        except BaseException as exc:
            self.drop()
            if isinstance(exc, socket.timeout):
                raise RedisTimeoutError("Timeout on the limiter's connection") from exc
            if isinstance(exc, OSError):
                raise RedisConnectionError(f"Error on the limiter's connection: {exc}") from exc
            raise
        if isinstance(reply, ResponseError):  # a complete error reply: the connection is still in step
            raise reply
        return reply

    def _through_redis_py(self, args: Sequence[Any]) -> Any:
        connection = self.connection
        try:
            connection.send_command(*args)
            return connection.read_response()
        except ResponseError:
            raise  # a complete error reply: the connection is still in step
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        connection, self.connection, self.sock, self.reader = self.connection, None, None, None
        if connection is not None:
            connection.disconnect()


def new_reader() -> Any:
    """A hiredis reader of replies (never decoded: a decision's replies are numbers) whose
    error replies are redis-py's exceptions, and ``False`` while a reply is incomplete."""
    return _Reader(replyError=_parse_error, notEnoughData=False)


def direct_runner(client: Any) -> DirectRunner | None:
    """The runner for ``client``'s pool, or None when the pool is not a plain one."""
    global _last
    pool = getattr(client, "connection_pool", None)
    last = _last
    if last[0] is pool:
        return last[1]
    if pool is None:
        return None
    runner = _runners.get(pool)
    if runner is None and pool not in _runners:
        runner = DirectRunner(pool) if type(pool) in _PLAIN_POOLS else None
        _runners[pool] = runner
    _last = (pool, runner)
    return runner


def evalsha(client: Any, sha: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    runner = direct_runner(client)
    if runner is None:
        return client.evalsha(sha, len(keys), *keys, *args)
    return runner("EVALSHA", sha, len(keys), *keys, *args)
