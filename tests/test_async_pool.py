"""The limiter's asyncio pool (``backends/clients.py``, ``SetUpPool``) against a real
redis-server, with the default ``TIMEOUT`` of 10 ms: a burst of concurrent decisions on a
fresh event loop shares a bounded pool, a failed set-up counts once against the circuit
breaker, and a reply that arrived while the event loop was busy is used, not thrown away.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio

from django_gcra import adecide
from django_gcra.backends.clients import ASYNC_MAX_CONNECTIONS
from django_gcra.engine import current, retire
from django_gcra.fallback import status
from tests.support.servers import free_port, start_redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]

POLICIES = {"wide": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1000000/s", "burst": 1000000}],
                     "on_failure": "open"}}


@pytest.fixture
def defaults(gcra_settings):
    """The default TIMEOUT and CONNECT_TIMEOUT (gcra_settings would make TIMEOUT generous)."""
    gcra_settings(TIMEOUT=10, CONNECT_TIMEOUT=None, POLICIES=POLICIES)
    retire()
    yield
    retire()


def connections_received(client) -> int:
    return client.info("stats")["total_connections_received"]


async def test_a_burst_on_a_fresh_loop_shares_a_bounded_pool(real_redis, defaults):
    before = connections_received(real_redis)
    decisions = await asyncio.wait_for(
        asyncio.gather(*[adecide("wide", {"ip": f"10.0.0.{i % 200}"}) for i in range(300)]), 30)
    opened = connections_received(real_redis) - before
    assert not any(d.fallback for d in decisions) and current().failures.stats.total() == 0
    assert 1 <= opened <= ASYNC_MAX_CONNECTIONS + 1  # the limiter's pool (+ the sync override stamp read)
    assert [b["failures"] for b in status()["breakers"]] == [0]


async def test_a_failed_set_up_counts_once_however_many_decisions_wait(settings, defaults):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}  # nobody listens
    decisions = await asyncio.wait_for(asyncio.gather(*[adecide("wide", {"ip": "10.0.0.1"}) for _ in range(64)]), 30)
    assert all(d.fallback and d.allowed for d in decisions) and current().failures.stats.total() == 64
    [breaker] = status()["breakers"]
    assert breaker["failures"] <= 2  # one per failed set-up (one, unless a decision came late), not 64
    assert breaker["state"] == "closed"  # 5 consecutive failures open it; one burst is one


async def test_a_reply_that_arrived_while_the_loop_was_busy_is_used(real_redis, defaults, monkeypatch):
    await adecide("wide", {"ip": "10.0.0.1"})  # connected, script loaded
    send = redis.asyncio.Connection.send_packed_command

    async def send_then_hog(self, *args, **kwargs):
        await send(self, *args, **kwargs)
        # Right after the command is sent, the event loop is busy for 5 x TIMEOUT with
        # other work (a blocking call, other requests): the reply arrives meanwhile.
        asyncio.get_running_loop().call_soon(time.sleep, 0.05)

    monkeypatch.setattr(redis.asyncio.Connection, "send_packed_command", send_then_hog)
    decisions = [await asyncio.wait_for(adecide("wide", {"ip": "10.0.0.1"}), 10) for _ in range(5)]
    assert not any(d.fallback for d in decisions) and current().failures.stats.total() == 0


async def test_a_paused_redis_still_times_out_and_opens_the_circuit(redis_server, real_redis, defaults):
    await adecide("wide", {"ip": "10.0.0.1"})
    redis_server.pause()
    try:
        start = time.monotonic()
        burst = asyncio.gather(*[adecide("wide", {"ip": "10.0.0.2"}) for _ in range(64)])
        decisions = await asyncio.wait_for(burst, 10)
        elapsed = time.monotonic() - start
        later = [await asyncio.wait_for(adecide("wide", {"ip": "10.0.0.2"}), 10) for _ in range(20)]
    finally:
        redis_server.resume()
    assert all(d.fallback and d.allowed for d in decisions + later)
    assert elapsed < 5  # bounded by the read timeout and the breaker, not by the paused server
    assert [b["state"] for b in status()["breakers"]] == ["open"]


async def test_killed_then_restarted_back_to_redis_within_a_cool_down(settings, gcra_settings):
    """The pool's connections die with the server; once it is back, the half-open probe
    sets a new one up and the process does not stay in fail-open."""
    server = start_redis()
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url}}
    gcra_settings(TIMEOUT=10, CONNECT_TIMEOUT=None, POLICIES=POLICIES, BREAKER={"failures": 5, "cooldown": 0.5})
    retire()
    try:
        burst = [adecide("wide", {"ip": f"10.0.1.{i}"}) for i in range(64)]
        assert not any(d.fallback for d in await asyncio.wait_for(asyncio.gather(*burst), 10))
        server.kill()
        down = [await asyncio.wait_for(adecide("wide", {"ip": "10.0.1.1"}), 10) for _ in range(20)]
        assert all(d.fallback for d in down) and [b["state"] for b in status()["breakers"]] == ["open"]
        server.start()
        back, deadline = None, time.monotonic() + 5
        while back is None and time.monotonic() < deadline:
            burst = [adecide("wide", {"ip": f"10.0.1.{i}"}) for i in range(64)]
            if not any(d.fallback for d in await asyncio.wait_for(asyncio.gather(*burst), 10)):
                back = time.monotonic()
            await asyncio.sleep(0.05)
        assert back is not None  # a whole burst answered by Redis again
        assert [b["state"] for b in status()["breakers"]] == ["closed"]
    finally:
        server.stop()
        retire()
