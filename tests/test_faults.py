"""Faults of a real redis-server for each on_failure: killed, paused (SIGSTOP), restarted,
scripts flushed. Decisions stay within the timeout, never over-admit beyond the fallback's
promise, and go back to Redis within a cool-down after it returns."""

from __future__ import annotations

import asyncio
import time

import pytest

from django_gcra import adecide, decide
from django_gcra.engine import current, retire
from django_gcra.fallback import status
from tests.support.servers import RedisServer, start_redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]

TIMEOUT_MS, COOLDOWN = 50, 0.5
MARGIN = 0.25  # seconds of scheduling noise allowed on a shared machine (exact numbers: the benchmark)
MAX_WAIT = (2 * TIMEOUT_MS) / 1000 + MARGIN  # connect + read timeouts, plus the margin
RATE, BURST, PROCESSES = 10, 4, 2  # local fallback: 5/s, burst 2 per process


def policy(on_failure: str) -> dict:
    return {"limits": [{"name": "ip", "key": ["ip"], "rate": f"{RATE}/s", "burst": BURST}], "on_failure": on_failure}


@pytest.fixture
def server(settings, gcra_settings):
    """A redis-server of this test's own (it will be killed or paused), and the limiter on it."""
    srv = start_redis()
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": srv.url}}
    gcra_settings(TIMEOUT=TIMEOUT_MS, BREAKER={"failures": 3, "cooldown": COOLDOWN}, FALLBACK_PROCESSES=PROCESSES,
                  POLICIES={name: policy(name) for name in ("open", "closed", "local")})
    retire()
    yield srv
    srv.stop()
    retire()


def timed(on_failure: str, ip: str, n: int) -> list[tuple[float, object]]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        decision = decide(on_failure, {"ip": ip})
        out.append((time.perf_counter() - start, decision))
    return out


def check_fallback(on_failure: str, results: list[tuple[float, object]], elapsed: float) -> None:
    assert max(t for t, _ in results) <= MAX_WAIT
    decisions = [d for _, d in results]
    assert all(d.fallback for d in decisions)
    admitted = sum(d.allowed for d in decisions)
    if on_failure == "open":
        assert admitted == len(decisions)
    elif on_failure == "closed":
        assert admitted == 0 and all(d.unavailable for d in decisions)
    else:  # the local GCRA: its burst plus its rate over the elapsed time, +1 for the edge
        local_burst, local_rate = BURST // PROCESSES, RATE / PROCESSES
        assert 1 <= admitted <= local_burst + elapsed * local_rate + 1
        assert not any(d.unavailable for d in decisions)
    assert current().failures.stats.total(on_failure) == len(decisions)


def back_to_redis(on_failure: str, ip: str, limit: float) -> float:
    """Seconds until a decision is answered by Redis again (bounded by ``limit``)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if not decide(on_failure, {"ip": ip}).fallback:
            return time.monotonic() - start
        time.sleep(0.01)
    return float("inf")


ON_FAILURE = ["open", "closed", "local"]


@pytest.mark.parametrize("on_failure", ON_FAILURE)
def test_killed_then_restarted(server: RedisServer, on_failure):
    assert not any(d.fallback for _, d in timed(on_failure, "a", 2))
    server.kill()
    start = time.monotonic()
    results = timed(on_failure, "a", 40)
    check_fallback(on_failure, results, time.monotonic() - start)
    assert [b["state"] for b in status()["breakers"]] == ["open"]
    server.start()  # same port, empty data, no scripts loaded
    assert back_to_redis(on_failure, "b", COOLDOWN + 1.0) <= COOLDOWN + MARGIN + 0.5
    assert [b["state"] for b in status()["breakers"]] == ["closed"]


@pytest.mark.parametrize("on_failure", ON_FAILURE)
def test_paused(server: RedisServer, on_failure):
    assert not any(d.fallback for _, d in timed(on_failure, "a", 1))
    server.pause()
    try:
        start = time.monotonic()
        results = timed(on_failure, "p", 30)
        check_fallback(on_failure, results, time.monotonic() - start)
        waited = sorted(t for t, _ in results)
        assert waited[len(waited) // 2] < TIMEOUT_MS / 1000  # once open, the breaker answers at once
    finally:
        server.resume()
    assert back_to_redis(on_failure, "q", COOLDOWN + 1.0) <= COOLDOWN + MARGIN + 0.5


@pytest.mark.parametrize("on_failure", ON_FAILURE)
async def test_paused_async(server: RedisServer, on_failure):
    await adecide(on_failure, {"ip": "a"})  # opens the asyncio connection (may time out on a loaded host)
    current().failures.stats.reset()  # count only the decisions made while paused
    server.pause()
    try:
        start = time.monotonic()
        results = []
        for _ in range(20):
            t0 = time.perf_counter()
            decision = await asyncio.wait_for(adecide(on_failure, {"ip": "x"}), 5)
            results.append((time.perf_counter() - t0, decision))
        check_fallback(on_failure, results, time.monotonic() - start)
    finally:
        server.resume()


@pytest.mark.parametrize("on_failure", ON_FAILURE)
def test_scripts_flushed_mid_traffic(server: RedisServer, on_failure, settings):
    """SCRIPT FLUSH (or a restart, or a failover) is invisible: the script is reloaded."""
    # Not a timing test: a rate that refills nothing while it runs (at 10/s a loaded machine
    # spending 100 ms on the five decisions let a fifth through), and a TIMEOUT no reload
    # on a loaded machine reaches (the tight one is the fault tests' above).
    slow = {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/m", "burst": BURST}], "on_failure": on_failure}
    settings.DJANGO_GCRA = {**settings.DJANGO_GCRA, "TIMEOUT": 2000, "POLICIES": {on_failure: slow}}
    client = server.client()
    first = [d.allowed for _, d in timed(on_failure, "f", 2)]
    client.script_flush()
    rest = [d for _, d in timed(on_failure, "f", 3)]
    assert first + [d.allowed for d in rest] == [True] * BURST + [False]
    assert not any(d.fallback for d in rest) and current().failures.stats.total() == 0
    assert client.script_exists(__import__("django_gcra.backends.redis").backends.redis.SCRIPT_SHA) == [True]


def test_fallback_is_logged_at_a_bounded_rate(server: RedisServer, caplog, gcra_settings, settings):
    settings.DJANGO_GCRA = {**settings.DJANGO_GCRA, "FALLBACK_LOG_INTERVAL": 60}
    server.kill()
    with caplog.at_level("WARNING", logger="django_gcra"):
        timed("open", "l", 25)
    lines = [r for r in caplog.records if "on_failure=open" in r.getMessage()]
    assert len(lines) == 1 and "(1 fallback decision" in lines[0].getMessage()
    assert current().failures.stats.total("open", allowed=True) == 25
    report = status()
    assert report["fallback"]["decisions"] == [{"policy": "open", "on_failure": "open", "allowed": True, "count": 25}]
    assert report["fallback"]["last_error"] and report["breakers"][0]["state"] == "open"


def test_timeouts_are_the_limiters_not_the_caches(server: RedisServer, settings):
    """The cache keeps its own (long) timeouts; only the limiter's calls are tight."""
    from django_redis import get_redis_connection

    settings.CACHES = {"default": {**settings.CACHES["default"], "OPTIONS": {"SOCKET_TIMEOUT": 5}}}
    cache_kwargs = get_redis_connection("default").connection_pool.connection_kwargs
    limiter_kwargs = current().stores.client("default").connection_pool.connection_kwargs
    assert cache_kwargs["socket_timeout"] == 5
    assert limiter_kwargs["socket_timeout"] == limiter_kwargs["socket_connect_timeout"] == TIMEOUT_MS / 1000
    retry = limiter_kwargs["retry"]
    assert (retry.get_retries() if hasattr(retry, "get_retries") else retry._retries) == 0  # (redis-py 5.0: no getter)


@pytest.mark.django_db
@pytest.mark.parametrize("failures", [3, 10_000])  # with the breaker opening, and with it never opening
def test_paused_redis_never_stalls_the_override_refresh(server: RedisServer, settings, gcra_settings, failures):
    # The cache's own timeout is 5 s: the override stamp must be read within the limiter's.
    settings.CACHES = {"default": {**settings.CACHES["default"], "OPTIONS": {"SOCKET_TIMEOUT": 5}}}
    gcra_settings(TIMEOUT=TIMEOUT_MS, BREAKER={"failures": failures, "cooldown": COOLDOWN}, OVERRIDE_REFRESH=0.05,
                  POLICIES={"open": policy("open")})
    assert not decide("open", {"ip": "s"}).fallback  # overrides loaded, stamp read once
    server.pause()
    try:
        waits = []
        for _ in range(8):  # each a refresh interval apart, so every decision is due to re-read the stamp
            time.sleep(0.06)
            start = time.perf_counter()
            assert decide("open", {"ip": "s"}).fallback
            waits.append(time.perf_counter() - start)
    finally:
        server.resume()
    assert max(waits) <= MAX_WAIT


def _limiter_clients(server: RedisServer, own_id: int) -> list[dict]:
    return [c for c in server.client().client_list() if int(c["id"]) != own_id and c.get("cmd") != "client|list"]


async def test_async_connections_speak_resp2(server: RedisServer):
    """redis-py 8 connects asyncio clients with RESP3 (``HELLO 3`` inside the set-up, which a
    paused Redis holds for the whole set-up budget): the limiter's own connections speak RESP2."""
    assert not (await adecide("open", {"ip": "r"})).fallback
    assert not decide("open", {"ip": "r"}).fallback
    watcher = server.client()
    clients = _limiter_clients(server, watcher.client_id())
    assert clients and all(c["resp"] == "2" for c in clients), clients


@pytest.mark.parametrize("password", [None, "s3cret"])
async def test_paused_async_costs_a_decision_its_timeout_not_the_set_up_budget(settings, gcra_settings, password):
    """A set-up budget 40x TIMEOUT: a decision waiting for a connection set-up on a paused
    Redis would take it. Each decision is answered within its own TIMEOUT (plus margin) until
    the breaker opens, also when the set-up needs the server (AUTH with a password: the
    breaker then opens when that set-up fails, after its budget)."""
    srv = start_redis()
    if password:
        srv.client().config_set("requirepass", password)
    auth = f":{password}@" if password else ""
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://{auth}127.0.0.1:{srv.port}/0"}}
    gcra_settings(TIMEOUT=TIMEOUT_MS, CONNECT_TIMEOUT=2000, BREAKER={"failures": 3, "cooldown": 30},
                  POLICIES={"open": policy("open")})
    retire()
    try:
        assert not (await adecide("open", {"ip": "a"})).fallback
        srv.pause()
        try:
            waited = []
            for _ in range(8):
                t0 = time.perf_counter()
                decision = await asyncio.wait_for(adecide("open", {"ip": "x"}), 10)
                waited.append(time.perf_counter() - t0)
                assert decision.fallback and decision.allowed
            assert max(waited) < 1.0, waited  # the set-up budget is 2 s
            if not password:  # connections set up at once (TCP only): their round trips time out and count
                assert [b["state"] for b in status()["breakers"]] == ["open"]
        finally:
            srv.resume()
    finally:
        srv.stop()
        retire()
