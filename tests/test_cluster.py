"""decide() on a real 3-master Redis Cluster through django_gcra's ClusterClient."""

from __future__ import annotations

import multiprocessing
import time

import pytest
from redis.crc import key_slot

from django_gcra import adecide, decide
from django_gcra.engine import current, retire
from django_gcra.fallback import status
from tests.support.cluster import Cluster, hammer, start_cluster, tenants_in_slots

pytestmark = [pytest.mark.redis, pytest.mark.slow]

POLICIES = {
    "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "1000/h", "burst": 5},
                       {"name": "user", "key": ["tenant", "user"], "rate": "10/h", "burst": 3}],
            "on_failure": "closed"},
    "hot": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "50/s", "burst": 10}], "on_failure": "closed"},
    "rolling": {"limits": [{"name": "g", "key": ["tenant"], "rate": "1000/h", "burst": 5},
                           {"name": "log", "key": ["tenant", "user"], "rate": "2/h", "algorithm": "sliding_log"},
                           {"name": "win", "key": ["tenant"], "rate": "3/h", "algorithm": "sliding_window"}],
                "on_failure": "closed"},
}
DESCRIPTORS = {"tenant": "tests.support.descriptors.tenant_of"}
PROCESSES, DURATION, RATE, BURST = 8, 3.0, 50, 10


@pytest.fixture(scope="module")
def cluster():
    c = start_cluster()
    yield c
    c.stop()


@pytest.fixture
def on_cluster(cluster: Cluster, settings, gcra_settings):
    settings.CACHES = {"default": cluster.caches()}
    for node in cluster.nodes:
        node.client().flushall()
    gcra_settings(DESCRIPTORS=DESCRIPTORS, POLICIES=POLICIES)
    retire()
    return cluster


def composite_round(tenant: str) -> list[tuple[bool, str]]:
    """3 for user a (the 4th hits the user limit), then user b until the tenant limit."""
    calls = [("a", 4), ("b", 3)]
    return [(d.allowed, d.limit) for user, n in calls for d in (decide("api", {"tenant": tenant, "user": user})
                                                                 for _ in range(n))]


EXPECTED = [(True, "user"), (True, "user"), (True, "user"), (False, "user"),
            (True, "tenant"), (True, "tenant"), (False, "tenant")]


def test_many_tenants_across_slots(on_cluster: Cluster):
    tenants = [f"tenant-{i}" for i in range(90)]
    for tenant in tenants:
        assert composite_round(tenant) == EXPECTED, tenant
    assert current().failures.stats.total() == 0
    sizes = [node.client().dbsize() for node in on_cluster.nodes]
    assert all(size > 0 for size in sizes) and sum(sizes) == 3 * len(tenants)  # tenant, user a, user b
    # Every node serves its tenants, each tenant's keys on one node; the breakers are per node.
    ports = {f"127.0.0.1:{n.port}" for n in on_cluster.nodes}
    assert ports <= {b["endpoint"] for b in status()["breakers"]}


def test_mixed_algorithms_across_slots(on_cluster: Cluster):
    """GCRA, the sliding log and the weighted window in one script call on whichever node
    serves each tenant's slot (the ZSET and the counter share the tenant's hash tag)."""
    for i in range(30):
        tenant = f"tenant-{i}"
        rounds = [(d.allowed, d.limit) for user in ("a", "a", "a", "b", "b")
                  for d in [decide("rolling", {"tenant": tenant, "user": user})]]
        assert [allowed for allowed, _ in rounds] == [True, True, False, True, False], tenant
        assert (rounds[2][1], rounds[4][1]) == ("log", "win")
    assert current().failures.stats.total() == 0
    assert sum(node.client().dbsize() for node in on_cluster.nodes) == 30 * 4  # g, log a, log b, win


def test_the_alias_is_also_a_django_cache(on_cluster: Cluster):
    from django.core.cache import cache

    for i in range(20):  # keys in many slots
        cache.set(f"k{i}", {"n": i}, 30)
    assert [cache.get(f"k{i}")["n"] for i in range(20)] == list(range(20))
    assert cache.add("k-counter", 1) and cache.incr("k-counter") == 2


async def test_async_decisions_on_the_cluster(on_cluster: Cluster):
    for tenant in ("x1", "x2", "x3", "x4"):
        got = [(await adecide("api", {"tenant": tenant, "user": "a"})).allowed for _ in range(4)]
        assert got == [True, True, True, False]
    assert current().failures.stats.total() == 0


def run(urls, gcra, descriptors, processes, duration, during=None):
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0  # time for the spawned interpreters to import Django
    with ctx.Pool(processes) as pool:
        pending = pool.starmap_async(hammer, [(urls, gcra, "hot", descriptors, start_at, duration)] * processes)
        if during is not None:
            during()
        results = pending.get(timeout=60)
    admitted, calls, fallbacks = (sum(r[i] for r in results) for i in (0, 1, 4))
    first, last = min(r[2] for r in results), max(r[3] for r in results)
    return admitted, calls, fallbacks, last - first, (first, last)


GCRA = {"DESCRIPTORS": DESCRIPTORS, "POLICIES": POLICIES}


def test_eight_processes_one_key(on_cluster: Cluster):
    admitted, calls, fallbacks, elapsed, _ = run(on_cluster.urls, GCRA, {"tenant": "hot"}, PROCESSES, DURATION)
    bound = BURST + elapsed * RATE + 1
    print(f"cluster: admitted {admitted} of {calls} calls ({fallbacks} fallback) in {elapsed:.2f}s; bound {bound:.1f}")
    assert calls > 4 * admitted
    assert admitted <= bound
    assert admitted >= 0.9 * bound


def test_slot_migrated_under_load(on_cluster: Cluster):
    """``redis-cli --cluster reshard`` moves the hot tenant's slot (and 300 other keys)
    while 4 processes hammer it: no over-admission, state moves with the keys."""
    source = on_cluster.owner(0)
    target = next(n.port for n in on_cluster.nodes if n.port != source)
    moved = range(30)  # reshard takes the source's lowest slots first
    assert all(on_cluster.owner(s) == source for s in moved)
    hot, *others = tenants_in_slots(moved, 101)
    for tenant in others:  # consume each other tenant's whole user burst before the move
        assert [decide("api", {"tenant": tenant, "user": "a"}).allowed for _ in range(3)] == [True] * 3

    resharded = []

    def reshard() -> None:
        key, client = f"rl:{{{hot}}}:hot:tenant:{hot}", on_cluster.client()
        deadline = time.monotonic() + 20
        while not client.exists(key) and time.monotonic() < deadline:  # the workers are deciding
            time.sleep(0.02)
        time.sleep(0.3)
        start = time.time()
        on_cluster.reshard(source, target, len(moved))
        resharded.extend([start, time.time()])

    admitted, calls, fallbacks, elapsed, (first, last) = run(on_cluster.urls, GCRA, {"tenant": hot}, 4, 4.0,
                                                             during=reshard)
    bound = BURST + elapsed * RATE + 1
    print(f"reshard: admitted {admitted} of {calls} calls ({fallbacks} fallback) in {elapsed:.2f}s; bound {bound:.1f}")
    assert on_cluster.owner(key_slot(hot.encode())) == target
    print(f"reshard took {resharded[1] - resharded[0]:.2f}s, from {resharded[0] - first:.2f}s into the load")
    assert first < resharded[0] < last  # the migration started (and mostly ran) under load
    assert admitted <= bound
    assert admitted >= 0.8 * bound and fallbacks <= 0.05 * calls
    # The migrated state is intact: every other tenant's user a is still out of burst.
    assert not any(decide("api", {"tenant": t, "user": "a"}).allowed for t in others)
    assert current().failures.stats.total() == 0


def test_concurrency_slots_on_a_cluster(on_cluster, gcra_settings):
    """Rates and slots of one policy share a hash tag (one script call in one cluster slot);
    the keeper's pipelined releases and heartbeats reach keys of every master."""
    gcra_settings(DESCRIPTORS=DESCRIPTORS, POLICIES={
        "conc": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "1000/h", "burst": 50}],
                 "concurrency": [{"name": "running", "key": ["tenant"], "max": 1, "ttl": 1}],
                 "on_failure": "closed"}})
    tenants = [tenants_in_slots(range(lo, lo + 5000), 1, "c")[0] for lo in (0, 5600, 11000)]
    assert len({on_cluster.owner(key_slot(t.encode())) for t in tenants}) == 3  # one tenant per master
    held = [decide("conc", {"tenant": t}) for t in tenants]
    assert all(d.allowed for d in held)
    assert not any(decide("conc", {"tenant": t}).allowed for t in tenants)
    time.sleep(1.5)  # more than a ttl: the heartbeat (one pipeline over three masters) kept them
    assert not any(decide("conc", {"tenant": t}).allowed for t in tenants)
    assert status()["slots"]["extend_failures"] == 0
    for d in held:
        d.release()
    again = [decide("conc", {"tenant": t}) for t in tenants]
    assert all(d.allowed for d in again)
    for d in again:
        d.release()
    assert status()["slots"]["release_failures"] == 0


async def test_the_test_clock_and_the_resets_on_a_cluster(on_cluster: Cluster):
    """limiter_clock drives sync and async decisions on every master; reset() clears a key
    on its master; reset_limits() scans and clears every master."""
    from asgiref.sync import sync_to_async

    from django_gcra import areset, reset
    from django_gcra.testing import limiter_clock, reset_limits

    tenants = [t for third in (range(5461), range(5461, 10923), range(10923, 16384))
               for t in tenants_in_slots(third, 1, prefix="clock")]
    with limiter_clock(start=1_700_000_000) as clock:
        for tenant in tenants:
            who = {"tenant": tenant, "user": "a"}
            got = [await sync_to_async(decide)("api", who) for _ in range(3)] + [await adecide("api", who)]
            assert [d.allowed for d in got] == [True, True, True, False]
            assert got[-1].retry_after == 360.0  # 10/h: one unit every 6 minutes, exactly
        clock.advance(360)
        assert [(await adecide("api", {"tenant": t, "user": "a"})).allowed for t in tenants] == [True] * 3
    assert await sync_to_async(reset)("api", {"tenant": tenants[0], "user": "a"}) == 2
    assert await areset("api", {"tenant": tenants[1]}, limit="tenant") == 1
    keys = sum(len(node.client().keys("rl:*")) for node in on_cluster.nodes)
    assert keys == 3 and await sync_to_async(reset_limits)() == 3  # 6 keys, 3 reset above
    assert all(node.client().keys("rl:*") == [] for node in on_cluster.nodes)
    with limiter_clock() as clock:  # from a primary's TIME
        assert abs(clock.now - time.time()) < 60
