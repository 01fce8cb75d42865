"""EVALSHA on a connection held per thread, for plain (non-Sentinel, non-cluster) pools.

redis-py's command path (pool checkout with a health poll, retry wrapper, observability
hooks, response callbacks) costs about as much client CPU as the script's round trip
itself. A decision needs none of it: one request, one reply, on a connection this thread
owns. redis-py opens the connection (handshake, AUTH, SELECT, TLS); with hiredis
installed, on a plain TCP or Unix socket, the request is then packed in C, written to the
socket and its reply parsed by a hiredis reader of the runner's own, without redis-py's
layers. Any error other than a Redis error reply drops the connection, so a timed-out
reply can never be read as the answer to a later request.
A command can also be sent ahead (``Link.send``), its reply read later.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import deque
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


class Link:
    """One thread's connection. Only that thread sends on it, but any thread may read the
    replies owed to commands sent ahead (``collect``), so every read is under ``lock``."""

    __slots__ = ("connection", "lock", "owed", "pid", "reader", "sock")

    def __init__(self, connection: Any) -> None:
        self.connection, self.pid = connection, os.getpid()
        sock = getattr(connection, "_sock", None) if _pack is not None else None
        # A plain TCP or Unix socket only: TLS (an SSLSocket's own sendall) and test doubles
        # go through redis-py.
        self.sock: Any = sock if type(sock) is socket.socket else None
        self.reader: Any = new_reader() if self.sock is not None else None
        self.lock = threading.Lock()
        self.owed: deque[Callable[[Any], None]] = deque()  # callbacks of the replies sent ahead, in order

    def send(self, args: Sequence[Any], on_reply: Callable[[Any], None]) -> None:
        """Write a command now (from the link's own thread: ``DirectRunner.ahead_link()``);
        its reply, or the error that broke the connection (an exception instance), goes to
        ``on_reply`` when the reply is read (the thread's next call, or ``collect``).
        ``on_reply`` must not call the runner."""
        with self.lock:
            self.owed.append(on_reply)
            try:
                _send(self.sock, _pack(args))
            except BaseException as exc:
                self.broken(exc)  # on_reply has the error
                if not isinstance(exc, Exception):
                    raise

    def hand_out(self) -> None:
        """Read the replies owed to commands sent ahead, each to its callback (``lock``
        held; the read loop of ``DirectRunner.__call__``, which keeps its own copy inline:
        the hot path)."""
        sock, reader, owed = self.sock, self.reader, self.owed
        while owed:
            reply = reader.gets()
            while reply is False:
                data = sock.recv(65536)
                if not data:
                    raise RedisConnectionError(_CLOSED)
                reader.feed(data)
                reply = reader.gets()
            owed.popleft()(reply)

    def collect(self) -> None:
        """Read every reply owed to commands sent ahead on this link (from any thread), and
        hand them out; a broken connection hands them its error instead."""
        with self.lock:
            try:
                self.hand_out()
            except BaseException as exc:
                self.broken(exc)  # the owed callbacks have the error
                if not isinstance(exc, Exception):
                    raise

    def broken(self, exc: BaseException) -> BaseException:
        """Drop the connection after ``exc`` (``lock`` held); the error to raise."""
        if isinstance(exc, socket.timeout):
            exc = RedisTimeoutError("Timeout on the limiter's connection")
        elif isinstance(exc, OSError):
            exc = RedisConnectionError(f"Error on the limiter's connection: {exc}")
        self.drop(exc)
        return exc

    def drop(self, exc: BaseException | None = None) -> None:
        connection, self.connection, self.sock, self.reader, self.pid = self.connection, None, None, None, 0
        owed, self.owed = self.owed, deque()
        if connection is not None:
            connection.disconnect()
        for on_reply in owed:  # their replies are lost with the connection
            on_reply(exc or RedisConnectionError("The limiter's connection was dropped"))


class DirectRunner(threading.local):
    """One connection per thread (and per process, after a fork) to the pool's server.

    A command can also be sent ahead (``ahead_link().send``: a lease's prefetch on the
    thread that will spend it): written now, its reply read by the thread's next call, or by
    ``Link.collect`` from any thread, and handed to its callback then. Replies come in
    the order commands were sent, so a call reads the owed ones first."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.link: Link | None = None

    @property
    def connection(self) -> Any:
        return None if self.link is None else self.link.connection

    @property
    def sock(self) -> Any:
        return None if self.link is None else self.link.sock

    def _connect(self) -> Link:
        connection = self.pool.connection_class(**self.pool.connection_kwargs)
        connection.connect()  # redis-py's handshake; raises its ConnectionError / TimeoutError
        # (after a fork, the parent's link and its owed replies are left: the child forgot its leases)
        self.link = link = Link(connection)
        return link

    def __call__(self, *args: Any) -> Any:
        link = self.link
        if link is None or link.pid != os.getpid():  # (a dropped link's pid is 0)
            link = self._connect()
        sock, reader, lock = link.sock, link.reader, link.lock
        if sock is None:
            return self._through_redis_py(link, args)
        lock.acquire()  # (not ``with``: cheaper)
        try:
            _send(sock, _pack(args))
            if link.owed:  # replies to commands sent ahead come first
                link.hand_out()
            reply = reader.gets()
            while reply is False:
                data = sock.recv(65536)
                if not data:
                    raise RedisConnectionError(_CLOSED)
                reader.feed(data)
                reply = reader.gets()
        except BaseException as exc:
            error = link.broken(exc)
            if error is exc:
                raise
            raise error from exc
        finally:
            lock.release()
        if isinstance(reply, ResponseError):  # a complete error reply: the connection is still in step
            raise reply
        return reply

    def ahead_link(self) -> Link | None:
        """This thread's link if a command can be sent ahead on it (up, on a plain socket), else None."""
        link = self.link
        return link if link is not None and link.sock is not None and link.pid == os.getpid() else None

    def _through_redis_py(self, link: Link, args: Sequence[Any]) -> Any:
        connection = link.connection
        try:
            connection.send_command(*args)
            return connection.read_response()
        except ResponseError:
            raise  # a complete error reply: the connection is still in step
        except BaseException:
            link.drop()
            raise


def new_reader() -> Any:
    """A hiredis reader of replies (never decoded: a decision's replies are numbers) whose
    error replies are redis-py's exceptions, and ``False`` while a reply is incomplete."""
    return _Reader(replyError=_parse_error, notEnoughData=False)


def runner_for(pool: Any) -> DirectRunner | None:
    """A new runner of ``pool``, or None when the pool is not a plain one (Sentinel, TLS,
    Cluster: redis-py's own path). Each ``RedisBackend`` keeps the runner of its client's pool."""
    return DirectRunner(pool) if type(pool) in _PLAIN_POOLS else None


def evalsha(client: Any, runner: DirectRunner | None, sha: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """EVALSHA on ``runner`` (the direct path), else through redis-py's ``client``."""
    if runner is None:
        return client.evalsha(sha, len(keys), *keys, *args)
    return runner("EVALSHA", sha, len(keys), *keys, *args)
