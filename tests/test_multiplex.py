"""Async multiplexing (``backends/multiplex.py``) on a real redis-server: concurrent
``adecide()`` calls of one event loop share at most ``ASYNC_LANES`` connections, each is
still one EVALSHA with its own reply, NOSCRIPT and error replies stay their caller's own,
and a timed-out batch never hands a late reply to anyone."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ResponseError

from django_gcra import adecide
from django_gcra.backends.multiplex import ASYNC_LANES
from django_gcra.engine import current, retire

pytestmark = [pytest.mark.redis]

POLICIES = {
    "exact": {"limits": [{"name": "k", "key": ["ip"], "rate": "1/m", "burst": 64}], "on_failure": "open"},
    "wide": {"limits": [{"name": "k", "key": ["ip"], "rate": "1000000/s", "burst": 1000000}], "on_failure": "open"},
}


@pytest.fixture
def policies(gcra_settings):
    gcra_settings(POLICIES=POLICIES)
    retire()
    yield
    retire()


def evalsha_calls(client) -> int:
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def script_loads(client) -> int:
    return sum(v["calls"] for k, v in client.info("commandstats").items() if k.startswith("cmdstat_script"))


def mux():
    """The multiplexer the decisions of this event loop go through (the store backend's)."""
    stores = current().stores
    found = stores.backend().multiplexer(stores.async_client("default"))
    assert found is not None
    return found


async def test_a_burst_shares_at_most_the_lanes_and_every_caller_gets_its_own_reply(real_redis, policies):
    await adecide("exact", {"ip": "warm"})  # connected, script loaded
    calls, connections = evalsha_calls(real_redis), real_redis.info("stats")["total_connections_received"]
    decisions = await asyncio.wait_for(asyncio.gather(*[adecide("exact", {"ip": "one"}) for _ in range(64)]), 30)
    assert not any(d.fallback for d in decisions)
    # burst 64, nothing refills: each caller was answered by its own script call
    assert sorted(d.remaining for d in decisions) == list(range(64))
    assert evalsha_calls(real_redis) - calls == 64
    assert real_redis.info("stats")["total_connections_received"] - connections <= ASYNC_LANES
    pool = current().stores.async_client("default").connection_pool
    assert len(pool._available_connections) + len(pool._in_use_connections) <= ASYNC_LANES
    assert mux().largest > 1  # sent together
    assert not (await adecide("exact", {"ip": "one"})).allowed


async def test_replies_are_matched_to_their_callers(real_redis, policies):
    await adecide("exact", {"ip": "warm"})
    costs = [1 + i % 7 for i in range(48)]
    decisions = await asyncio.wait_for(
        asyncio.gather(*[adecide("exact", {"ip": f"k{i}"}, cost=c) for i, c in enumerate(costs)]), 30)
    assert [d.remaining for d in decisions] == [64 - c for c in costs]


async def test_a_lone_decision_goes_out_alone(real_redis, policies):
    await adecide("wide", {"ip": "warm"})
    m = mux()
    batches, commands = m.batches, m.commands
    assert (await adecide("wide", {"ip": "alone"})).allowed
    assert (m.batches - batches, m.commands - commands) == (1, 1)


async def test_noscript_is_handled_per_command(real_redis, policies):
    await adecide("wide", {"ip": "warm"})
    real_redis.script_flush()  # a restart or failover lost the script
    loads = script_loads(real_redis)
    decisions = await asyncio.wait_for(asyncio.gather(*[adecide("wide", {"ip": f"n{i}"}) for i in range(32)]), 30)
    assert not any(d.fallback for d in decisions) and current().failures.stats.total() == 0
    assert script_loads(real_redis) - loads == 1  # one load for the whole batch that met NOSCRIPT


async def test_an_error_reply_is_its_callers_only(real_redis, policies):
    await adecide("wide", {"ip": "warm"})
    real_redis.set("text", "not a number")
    m = mux()
    good = [m.execute("INCR", f"n{i}") for i in range(8)]
    results = await asyncio.gather(m.execute("INCR", "text"), *good, return_exceptions=True)
    assert isinstance(results[0], ResponseError) and results[1:] == [1] * 8
    assert await m.execute("INCR", "n0") == 2  # the connection is still in step


async def test_a_cancelled_caller_leaves_the_others_their_replies(real_redis, policies):
    await adecide("wide", {"ip": "warm"})
    m = mux()
    tasks = [asyncio.ensure_future(m.execute("INCR", "c")) for _ in range(10)]
    await asyncio.sleep(0)
    tasks[3].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[3], asyncio.CancelledError)
    values = [r for i, r in enumerate(results) if i != 3]
    assert len(set(values)) == 9 and all(isinstance(v, int) for v in values)
    assert await m.execute("GET", "c") in (b"9", b"10")  # sent (10) or skipped while queued (9)


async def test_a_timed_out_batch_never_hands_a_late_reply_to_anyone(redis_server, real_redis, gcra_settings):
    gcra_settings(TIMEOUT=10, POLICIES=POLICIES)
    retire()
    try:
        await adecide("exact", {"ip": "warm"})
        redis_server.pause()
        try:
            late = await asyncio.wait_for(asyncio.gather(*[adecide("exact", {"ip": "late"}) for _ in range(16)]), 10)
        finally:
            redis_server.resume()
        assert all(d.fallback for d in late)  # timed out: each caller fails open, by its own policy
        current().stores.breaker_of("default", "").success()  # the timeouts opened the circuit: close it (the clients stay)
        # Whatever the resumed server ran of the late scripts, their replies went to aborted
        # sockets: a new burst gets exactly its own replies, eight consecutive counts.
        decisions = await asyncio.wait_for(asyncio.gather(*[adecide("exact", {"ip": "late"}) for _ in range(8)]), 10)
        assert not any(d.fallback for d in decisions)
        remaining = sorted(d.remaining for d in decisions)
        assert remaining == list(range(remaining[0], remaining[0] + 8)) and 64 - 16 - 8 <= remaining[0] <= 64 - 8
        assert (await adecide("exact", {"ip": "late"}, cost=0)).remaining == remaining[0]
    finally:
        retire()


async def test_a_cancelled_lane_cancels_its_callers_and_the_next_command_is_served(real_redis, policies):
    await adecide("wide", {"ip": "warm"})
    m = mux()
    callers = [asyncio.ensure_future(m.execute("INCR", "lane")) for _ in range(5)]
    for _ in range(3):
        await asyncio.sleep(0)  # the lane takes them and writes
    assert m._tasks
    for task in list(m._tasks):
        task.cancel()  # what closing the loop does to it
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, (asyncio.CancelledError, int)) for r in results)
    assert any(isinstance(r, asyncio.CancelledError) for r in results)
    assert await asyncio.wait_for(m.execute("PING"), 10) == b"PONG"  # a new lane, a clean connection
