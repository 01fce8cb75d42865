"""decide() against a real redis-server started by the fixtures."""

from __future__ import annotations

import time

import pytest

from django_gcra import decide
from django_gcra.algorithm import gcra
from django_gcra.keys import escape

pytestmark = pytest.mark.redis

POLICIES = {
    "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/s", "burst": 3}]},
    "api": {
        "limits": [
            {"name": "tenant", "key": ["tenant"], "rate": "1000/s", "burst": 200},
            {"name": "user", "key": ["tenant", "user"], "rate": "5/s", "burst": 3},
        ]
    },
    "slow": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/h", "burst": 2}]},
    "hourly": {
        "limits": [
            {"name": "tenant", "key": ["tenant"], "rate": "1000/h", "burst": 100},
            {"name": "user", "key": ["tenant", "user"], "rate": "3/h"},
        ]
    },
}


@pytest.fixture(autouse=True)
def policies(real_redis, gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of"}, POLICIES=POLICIES)
    return real_redis


def test_burst_then_deny(real_redis):
    results = [decide("login", {"ip": "10.0.0.1"}) for _ in range(4)]
    assert [d.allowed for d in results] == [True, True, True, False]
    assert [d.remaining for d in results[:3]] == [2, 1, 0]
    denied = results[3]
    assert denied.limit == "ip" and denied.remaining == 0
    twin = gcra(600_000, 0, 200_000, 3)
    # Redis time moves between calls, so the retry is at most the twin's and within one interval of it.
    assert twin.retry_after / 1e6 - 0.2 <= denied.retry_after <= twin.retry_after / 1e6


def test_waiting_retry_after_admits(real_redis):
    for _ in range(3):
        decide("login", {"ip": "10.0.0.2"})
    denied = decide("login", {"ip": "10.0.0.2"})
    time.sleep(denied.retry_after + 0.002)
    assert decide("login", {"ip": "10.0.0.2"}).allowed


def test_peek_consumes_nothing(real_redis):
    decide("slow", {"ip": "1"})
    peeks = [decide("slow", {"ip": "1"}, cost=0) for _ in range(5)]
    assert all(p.allowed and p.remaining == 1 for p in peeks)
    assert decide("slow", {"ip": "1"}).allowed
    assert not decide("slow", {"ip": "1"}).allowed
    assert decide("slow", {"ip": "1"}, cost=0).remaining == 0


def test_cost_above_burst_is_denied_as_impossible(real_redis):
    decision = decide("slow", {"ip": "2"}, cost=3)
    assert not decision.allowed and decision.impossible and decision.retry_after == float("inf")
    assert real_redis.keys("*") == []


def test_composite_deny_by_user_leaves_tenant_key_byte_identical(real_redis):
    for _ in range(3):
        assert decide("api", {"tenant": "acme", "user": "7"}).allowed
    tenant_key = "rl:{acme}:api:tenant:acme"
    before = real_redis.get(tenant_key)
    denied = decide("api", {"tenant": "acme", "user": "7"})
    assert not denied.allowed and denied.limit == "user"
    assert real_redis.get(tenant_key) == before
    assert decide("api", {"tenant": "acme", "user": "8"}).allowed  # the tenant limit still has room
    assert {k.decode() for k in real_redis.keys("*")} == {
        tenant_key, "rl:{acme}:api:user:acme:7", "rl:{acme}:api:user:acme:8"}


def test_rested_keys_expire(real_redis):
    decide("login", {"ip": "10.0.0.3"})
    key = "rl:{10.0.0.3}:login:ip:10.0.0.3"
    pttl = real_redis.pttl(key)
    assert 0 < pttl <= 201
    time.sleep(0.25)
    assert not real_redis.exists(key)


def test_noscript_recovery_after_script_flush(real_redis):
    assert decide("slow", {"ip": "a"}).allowed
    real_redis.script_flush()
    assert decide("slow", {"ip": "a"}).remaining == 0
    assert real_redis.script_exists(__import__("django_gcra.backends.redis", fromlist=["x"]).SCRIPT_SHA) == [True]


HOSTILE = ["a{b}", "}", "{", "a:b", "a:b:c", "x\ny", "\x00", "ü", "😀", "x" * 10_000, "", "%", "#", "acme", "Acme"]


def test_hostile_descriptor_values_never_collide(real_redis):
    for value in HOSTILE:
        for _ in range(3):
            assert decide("hourly", {"tenant": value, "user": value}).allowed, value
    # every value got its own keys: each user key holds exactly three units
    for value in HOSTILE:
        assert not decide("hourly", {"tenant": value, "user": value}).allowed, value
    assert len(real_redis.keys("*")) == 2 * len(HOSTILE)
    tagged = {k.decode().split("}")[0] for k in real_redis.keys("*")}
    assert tagged == {"rl:{" + escape(v) for v in HOSTILE}


def test_hostile_values_share_one_slot_per_decision(real_redis):
    from redis.crc import key_slot

    for value in HOSTILE:
        decide("hourly", {"tenant": value, "user": "u"})
        keys = real_redis.keys(f"rl:{{{escape(value)}}}:*")
        assert len(keys) == 2 and len({key_slot(k) for k in keys}) == 1


async def test_adecide_uses_a_native_async_client(real_redis):
    from django_gcra import adecide
    from django_gcra.engine import current

    results = [await adecide("login", {"ip": "async"}) for _ in range(4)]
    assert [d.allowed for d in results] == [True, True, True, False]
    assert current().stores.async_client("default") is not None



def test_hiredis_packs_the_bytes_redis_py_would_send():
    from redis.connection import Encoder, PythonRespSerializer

    from django_gcra.backends import direct
    from django_gcra.backends.redis import SCRIPT_SHA

    if direct._pack is None:
        pytest.skip("hiredis is not installed: decisions use redis-py's packer")
    args = ("EVALSHA", SCRIPT_SHA, 2, "rl:{acme}:api:tenant:acme", f"rl:{{acme}}:api:user:acme:{escape('ü 7')}",
            1, 200_000, 3, 1, 1_000, 200, 0, 5)
    python = PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode)
    assert direct._pack(args) == b"".join(python.pack(*args))


def test_decisions_without_hiredis(monkeypatch):
    monkeypatch.setattr("django_gcra.backends.direct._pack", None)
    assert [decide("login", {"ip": "9.9.9.9"}).allowed for _ in range(4)] == [True] * 3 + [False]
