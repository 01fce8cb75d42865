"""decide() through django-redis's SentinelClient: a real master, replica and three
sentinels; the master is killed, decisions follow each failure policy meanwhile and go
back to Redis (the promoted replica, script reloaded) after the failover."""

from __future__ import annotations

import time

import pytest

from django_gcra import adecide, decide
from django_gcra.backends.redis import SCRIPT_SHA
from django_gcra.engine import current, retire
from tests.support.sentinel import SentinelSet, start_sentinels

pytestmark = [pytest.mark.redis, pytest.mark.slow]

COOLDOWN = 0.3


def policy(on_failure: str) -> dict:
    return {"limits": [{"name": "ip", "key": ["ip"], "rate": "10/h", "burst": 3}], "on_failure": on_failure,
            **({"limits": [{"name": "ip", "key": ["ip"], "rate": "10/h", "burst": 3, "fallback_rate": "2/h"}]}
               if on_failure == "local" else {})}


@pytest.fixture(scope="module")
def group():
    g = start_sentinels()
    yield g
    g.stop()


@pytest.fixture
def on_sentinel(group: SentinelSet, settings, gcra_settings):
    settings.CACHES = {"default": group.caches()}
    gcra_settings(TIMEOUT=250, BREAKER={"failures": 3, "cooldown": COOLDOWN},
                  POLICIES={name: policy(name) for name in ("open", "closed", "local")})
    retire()
    yield group
    retire()


async def test_sync_and_async_decisions_through_sentinel(on_sentinel: SentinelSet):
    assert [decide("closed", {"ip": "s"}).allowed for _ in range(2)] == [True, True]
    assert [(await adecide("closed", {"ip": "s"})).allowed for _ in range(2)] == [True, False]
    assert current().failures.stats.total() == 0


def test_master_killed_failover(on_sentinel: SentinelSet):
    group = on_sentinel
    old_master, replica = group.master.port, group.replica.port
    assert group.master_port() == old_master
    for name in ("open", "closed", "local"):
        assert [decide(name, {"ip": "k"}).allowed for _ in range(2)] == [True, True]
    group.master.client().wait(1, 2000)  # the replica has every TAT before the master dies
    group.master.kill()

    seen: dict[str, list] = {"open": [], "closed": [], "local": []}
    deadline = time.monotonic() + 30
    recovered_at = None
    while time.monotonic() < deadline:
        for name, decisions in seen.items():
            decisions.append(decide(name, {"ip": f"during-{name}"}))
        if group.master_port() == replica and recovered_at is None:
            recovered_at = time.monotonic()
        if recovered_at is not None and not any(seen[n][-1].fallback for n in seen):
            break
        time.sleep(0.02)
    assert recovered_at is not None, "no failover"
    assert time.monotonic() - recovered_at <= COOLDOWN + 2.0  # back to Redis soon after the promotion

    outage = {n: [d for d in seen[n] if d.fallback] for n in seen}
    assert all(outage[n] for n in seen), "the outage was not observed"
    assert all(d.allowed for d in outage["open"])
    assert not any(d.allowed for d in outage["closed"]) and all(d.unavailable for d in outage["closed"])
    assert 1 <= sum(d.allowed for d in outage["local"]) <= 2  # the local 2/h (burst 2), one process

    # The promoted replica serves the same TATs (replicated), with the script reloaded there.
    assert group.replica.client().script_exists(SCRIPT_SHA) == [True]
    for name in ("open", "closed", "local"):
        assert [decide(name, {"ip": "k"}).allowed for _ in range(2)] == [True, False], name
