"""EVALSHA on a connection held per thread, for plain (non-Sentinel, non-cluster) pools.

redis-py's command path (pool checkout with a health poll, retry wrapper, observability
hooks, response callbacks) costs about as much client CPU as the script's round trip
itself. A decision needs none of it: one request (packed by hiredis when installed), one
reply, on a connection this thread owns. Any error other than a Redis error reply drops
the connection, so a timed-out reply can never be read as the answer to a later request.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

_pack: Callable[..., bytes] | None
try:  # hiredis packs a command in C; redis-py's packer adds Python checks per argument
    from hiredis import pack_command as _pack
except ImportError:  # redis-py's own packer then
    _pack = None

_PLAIN_POOLS = (redis.ConnectionPool, redis.BlockingConnectionPool)
_runners: weakref.WeakKeyDictionary[Any, DirectRunner | None] = weakref.WeakKeyDictionary()


class DirectRunner(threading.local):
    """One connection per thread (and per process, after a fork) to the pool's server."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.connection: Any = None
        self.pid = os.getpid()

    def __call__(self, *args: Any) -> Any:
        if self.connection is None or self.pid != os.getpid():
            self.connection = self.pool.connection_class(**self.pool.connection_kwargs)
            self.pid = os.getpid()
        connection = self.connection
        try:
            if _pack is None:
                connection.send_command(*args)
            else:
                connection.send_packed_command([_pack(args)])
            return connection.read_response()
        except ResponseError:
            raise  # a complete error reply: the connection is still in step
        except BaseException:
            self.connection = None
            connection.disconnect()
            raise


def direct_runner(client: Any) -> DirectRunner | None:
    """The runner for ``client``'s pool, or None when the pool is not a plain one."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return None
    try:
        return _runners[pool]
    except KeyError:
        runner = DirectRunner(pool) if type(pool) in _PLAIN_POOLS else None
        _runners[pool] = runner
        return runner


def evalsha(client: Any, sha: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    runner = direct_runner(client)
    if runner is None:
        return client.evalsha(sha, len(keys), *keys, *args)
    return runner("EVALSHA", sha, len(keys), *keys, *args)
