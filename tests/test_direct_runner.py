"""The direct runner on a real redis-server: its own socket path keeps every reply in step.

Error replies raise redis-py's own exception classes and leave the connection usable; a
reply that times out, or a connection the server closed, drops the connection, so the
next call gets its own answer, never a late one.
"""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_gcra.backends import direct

pytestmark = pytest.mark.redis


@pytest.fixture
def runner(redis_server):
    pool = redis.ConnectionPool.from_url(redis_server.url, socket_timeout=0.2)
    yield direct.DirectRunner(pool)
    pool.disconnect()


def test_the_socket_path_is_taken_with_hiredis(runner):
    assert runner("PING") == b"PONG"
    assert (runner.sock is not None) == (direct._pack is not None)


def test_error_replies_are_redis_py_exceptions_and_keep_the_connection(runner, real_redis):
    real_redis.set("text", "abc")
    with pytest.raises(NoScriptError):
        runner("EVALSHA", "0" * 40, 0)
    with pytest.raises(ResponseError, match="not an integer"):
        runner("INCR", "text")
    connection = runner.connection
    assert runner("ECHO", "next") == b"next"
    assert runner.connection is connection  # the same connection, still in step


def test_a_timed_out_reply_is_never_read_by_the_next_call(runner, real_redis):
    assert runner("PING") == b"PONG"
    with pytest.raises(RedisTimeoutError):
        runner("BLPOP", "empty-list", 1)  # the server answers (nil) after 1 s; the socket waits 0.2 s
    assert runner.connection is None
    real_redis.rpush("empty-list", "late")
    assert runner("ECHO", "mine") == b"mine"


def test_a_connection_the_server_closed_fails_once_then_reconnects(runner, real_redis):
    assert runner("CLIENT", "SETNAME", "gcra-direct") == b"OK"
    (mine,) = [c for c in real_redis.client_list() if c.get("name") == "gcra-direct"]
    real_redis.client_kill(mine["addr"])
    with pytest.raises(RedisConnectionError):
        runner("PING")
    assert runner.connection is None
    assert runner("PING") == b"PONG"
