"""``manage.py gcra_check`` against a real server put in each bad state: healthy (exit 0 and
an OK line), an eviction policy that can evict limiter keys, a store it cannot reach, a
slow round trip (a delaying proxy), an ACL user that may not run scripts, a skewed host
clock, and a Redis Cluster (every primary asked, every decision's keys in one slot)."""

from __future__ import annotations

import asyncio
import json
import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from benchmarks.slow_proxy import start_proxy
from django_gcra.management.commands import gcra_check
from tests.support.servers import free_port

pytestmark = pytest.mark.redis

POLICIES = {
    "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "100/s", "burst": 10},
                       {"name": "user", "key": ["tenant", "user"], "rate": "10/s", "burst": 4},
                       {"name": "hourly", "key": ["tenant"], "rate": "1000/h", "algorithm": "sliding_window"}],
            "concurrency": [{"name": "inflight", "key": ["tenant"], "max": 5}], "shard": "tenant"},
    "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 5}]},
}
LIMITER = {"DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"}, "POLICIES": POLICIES}


def check(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("gcra_check", *args, stdout=out)
    except CommandError as exc:
        assert exc.returncode == 1
        return 1, out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def healthy(real_redis, gcra_settings):
    gcra_settings(**LIMITER)
    return real_redis


def test_a_healthy_store_passes_with_a_summary(healthy):
    code, out = check()
    assert code == 0, out
    line = out.strip()
    assert line.startswith("OK default (redis://127.0.0.1:") and "Lua 5.1" in line, out
    assert "maxmemory-policy noeviction" in line and "scripts load" in line


def test_json_reports_the_facts(healthy):
    code, out = check("--json", "--samples", "5")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["problems"] == []
    (store,) = report["stores"]
    server = healthy.info("server")
    name = server.get("server_name", "redis")
    assert store["server"] == f"{name} {server.get(f'{name}_version') or server['redis_version']}"
    assert store["lua"] == healthy.eval("return _VERSION", 0).decode()
    assert store["maxmemory_policy"] == "noeviction" and store["samples"] == 5
    assert store["p99_ms"] > 0 and store["timeout_ms"] > store["p99_ms"]
    assert abs(store["skew_ms"]) < 1000
    assert healthy.keys("*") == []  # the probe only peeks (cost 0): nothing written


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_an_eviction_policy_that_can_evict_limiter_keys_fails(healthy, policy):
    healthy.config_set("maxmemory-policy", policy)
    try:
        code, out = check()
        _, as_json = check("--json")
    finally:
        healthy.config_set("maxmemory-policy", "noeviction")
    assert code == 1
    (line,) = out.strip().splitlines()
    assert line.startswith("default (redis://127.0.0.1:") and f"maxmemory-policy {policy} can evict limiter keys" in line
    report = json.loads(as_json)
    assert report["ok"] is False and report["stores"][0]["maxmemory_policy"] == policy
    assert report["problems"] == [line]


def test_volatile_eviction_passes(healthy):
    healthy.config_set("maxmemory-policy", "volatile-lru")
    try:
        code, out = check()
    finally:
        healthy.config_set("maxmemory-policy", "noeviction")
    assert code == 0 and "maxmemory-policy volatile-lru" in out


def test_an_unreachable_region_store_is_one_problem(healthy, settings, gcra_settings):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings.CACHES = {**settings.CACHES, "us-redis": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": dead}}
    gcra_settings(**LIMITER, REGIONS={"local": "eu", "caches": {"eu": "default", "us": "us-redis"}})
    code, out = check()
    assert code == 1
    (line,) = out.strip().splitlines()
    assert line.startswith(f"us-redis ({dead}): unreachable: ConnectionError"), out


def test_a_paused_store_is_a_problem_within_the_timeout(settings, gcra_settings):
    from tests.support.servers import start_redis

    server = start_redis()
    try:
        settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url}}
        gcra_settings(**LIMITER)
        server.pause()  # SIGSTOP: connects (the kernel's backlog), never answers
        code, out = check("--timeout", "0.5")
    finally:
        server.stop()
    assert code == 1
    (line,) = out.strip().splitlines()
    assert line.startswith(f"default ({server.url}): unreachable: TimeoutError"), out


def test_bad_timeout_is_refused(healthy):
    for bad in ("0", "-1", "601"):
        with pytest.raises(CommandError, match="--timeout must be"):
            call_command("gcra_check", "--timeout", bad, stdout=StringIO())


def test_a_round_trip_slower_than_timeout_fails(healthy, redis_server, settings, gcra_settings):
    port = free_port()
    loop = asyncio.new_event_loop()
    proxy = loop.run_until_complete(start_proxy(port, redis_server.port, lambda: 0.02, upstream=True))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                       "LOCATION": f"redis://127.0.0.1:{port}/0"}}
        gcra_settings(**LIMITER, TIMEOUT=5)  # ms; every call is held 20 ms
        code, out = check("--samples", "10")
    finally:
        async def shut() -> None:  # the proxy and its open connections (the cache's pool keeps one)
            proxy.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert code == 1
    (line,) = out.strip().splitlines()
    assert "script round trip p99" in line and "over 10 calls exceeds TIMEOUT 5 ms" in line, out


def test_a_user_who_may_not_run_scripts_fails(healthy, redis_server, settings):
    healthy.acl_setuser("noscripts", enabled=True, passwords=["+pw"], keys=["*"],
                        commands=["+@all", "-@scripting", "-config"])
    try:
        settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                       "LOCATION": f"redis://noscripts:pw@127.0.0.1:{redis_server.port}/0"}}
        code, out = check()
    finally:
        healthy.acl_deluser("noscripts")
    assert code == 1
    (line,) = out.strip().splitlines()
    assert "the scripts cannot run: NoPermissionError" in line and "pw@" not in line, out


def test_config_refused_is_a_note_not_a_problem(healthy, redis_server, settings):
    healthy.acl_setuser("noconfig", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-config"])
    try:
        settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                       "LOCATION": f"redis://noconfig:pw@127.0.0.1:{redis_server.port}/0"}}
        code, out = check()
    finally:
        healthy.acl_deluser("noconfig")
    assert code == 0, out
    note, ok = out.strip().splitlines()
    assert "note: maxmemory-policy unknown (CONFIG GET refused" in note and "use noeviction or volatile-*" in note
    assert ok.startswith("OK default") and "maxmemory-policy unknown" in ok


@pytest.mark.parametrize("offset", [-3.0, 2.5])
def test_clock_skew_over_a_second_fails(healthy, monkeypatch, offset):
    real = gcra_check.host_time
    monkeypatch.setattr(gcra_check, "host_time", lambda: real() + offset)  # this host's clock, off
    code, out = check()
    assert code == 1
    (line,) = out.strip().splitlines()
    assert f"clock skew {-offset:+.1f} s between this host and the store" in line, out


def test_bad_samples_is_refused(healthy):
    with pytest.raises(CommandError, match="at least 1"):
        call_command("gcra_check", "--samples", "0", stdout=StringIO())


@pytest.mark.slow
def test_on_a_cluster_every_primary_is_asked_and_every_decision_in_one_slot(settings, gcra_settings):
    from tests.support.cluster import start_cluster

    cluster = start_cluster()
    try:
        settings.CACHES = {"default": cluster.caches()}
        gcra_settings(**LIMITER)
        code, out = check("--json", "--samples", "5")
        assert code == 0, out
        report = json.loads(out)
        assert report["stores"][0]["maxmemory_policy"] == "noeviction"
        # The slots the check computes are the slots the servers compute.
        for policy, slots in report["stores"][0]["slots"].items():
            for key, slot in slots.items():
                assert cluster.nodes[0].client().execute_command("CLUSTER", "KEYSLOT", key) == slot, (policy, key)
        cluster.nodes[2].client().config_set("maxmemory-policy", "allkeys-lru")  # one primary of three
        code, out = check("--samples", "5")
        assert code == 1 and "maxmemory-policy allkeys-lru can evict limiter keys" in out, out
    finally:
        cluster.stop()


def test_settings_in_error_are_a_clear_error_not_a_traceback(healthy, gcra_settings):
    gcra_settings(POLICIES={"bad": {"limits": [{"name": "x", "key": ["nowhere"], "rate": "1/s"}]}})
    with pytest.raises(CommandError, match=r"DJANGO_GCRA is in error: .*nowhere.*django_gcra\.E"):
        call_command("gcra_check", stdout=StringIO())


@pytest.mark.slow
def test_behind_sentinel_the_master_is_checked(settings, gcra_settings):
    from tests.support.sentinel import start_sentinels

    group = start_sentinels()
    try:
        # A database no other test's Sentinel cache uses: django-redis keeps one connection pool
        # per URL for the process, and test_sentinel.py's (its sentinels stopped) is redis://mymaster/0.
        settings.CACHES = {"default": {**group.caches(), "LOCATION": "redis://mymaster/5"}}
        gcra_settings(**LIMITER)
        code, out = check("--json", "--samples", "5")
        assert code == 0, out
        (store,) = json.loads(out)["stores"]
        assert store["endpoint"] == "redis://mymaster/5" and store["maxmemory_policy"] == "noeviction"
        group.master.client().config_set("maxmemory-policy", "allkeys-lfu")
        code, out = check("--samples", "5")
        assert code == 1 and "maxmemory-policy allkeys-lfu can evict limiter keys" in out, out
    finally:
        group.stop()
