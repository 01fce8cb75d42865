"""Multi-region budgets without servers: the share formulas, the scaling of a limit, and
planning under each budget mode (fakeredis as every region's Redis). The real-server
tests (three redis-servers, worker processes, the rebalancer command) are in
test_regions_servers.py."""

from __future__ import annotations

import json

import fakeredis
import pytest

from django_gcra import region_demand, regions
from django_gcra.engine import current, retire
from django_gcra.regions import next_shares, scale


def shares():
    """The share state of the engine in force (built from the settings the test applied)."""
    return current().shares


def home_of(descriptors):
    """A home-region function for the tests: tenants named "us-..." live in us, others in eu."""
    return "us" if descriptors.get("tenant", "").startswith("us-") else "eu"


def test_scale_rounds_towards_admitting_less():
    assert scale(10_000, 30, 1.0) == (10_000, 30)
    assert scale(10_000, 30, 0.5) == (20_000, 15)
    assert scale(10_000, 30, 1 / 3) == (30_000, 10)  # exact thirds stay exact
    assert scale(10_000, 10, 0.25) == (40_000, 3)  # 2.5 rounds up: at most one unit over the share
    assert scale(10_000, 10, 0.01) == (1_000_000, 1)  # never below 1
    assert scale(3, 7, 0.7) == (5, 5)  # 4.29 us and 4.9 units round up


NAMES = ("eu", "us", "ap")


def step(old, wants, reachable=NAMES, floor=0.05, smoothing=0.3, max_step=0.25):
    return next_shares(old, wants, NAMES, reachable, floor, smoothing, max_step)


def test_shares_follow_skewed_demand_within_two_rebalances():
    shares = dict.fromkeys(NAMES, 1 / 3)
    history = []
    for _ in range(6):
        shares = step(shares, {"eu": 900, "us": 100, "ap": 0})
        assert sum(shares.values()) == pytest.approx(1.0)
        assert min(shares.values()) >= 0.05 - 1e-12
        history.append(shares)
    first, second = history[0], history[1]
    assert first["eu"] - 1 / 3 == pytest.approx(0.25)  # the move is bounded by max_step
    assert second["eu"] > 0.7 and second["eu"] > second["us"] + second["ap"]
    target = 0.05 + 0.85 * 0.9
    assert history[-1]["eu"] == pytest.approx(target, abs=0.01)  # converges to floor + spread * wants share
    assert history[-1]["ap"] == pytest.approx(0.05, abs=0.01)


def test_no_demand_keeps_the_shares_and_unreachable_regions_keep_theirs():
    old = {"eu": 0.6, "us": 0.3, "ap": 0.1}
    assert step(old, {}) == pytest.approx(old)
    new = step(old, {"eu": 0, "us": 100}, reachable=("eu", "us"))
    assert new["ap"] == pytest.approx(0.1)  # ap was not reached: it keeps enforcing 0.1
    assert new["us"] > 0.3 and sum(new.values()) == pytest.approx(1.0)
    assert new["eu"] >= 0.05


def test_no_share_moves_more_than_max_step():
    new = step({"eu": 0.9, "us": 0.05, "ap": 0.05}, {"us": 1000}, smoothing=0.0, max_step=0.1)
    assert new["eu"] == pytest.approx(0.8) and new["us"] > 0.05
    assert max(abs(new[r] - o) for r, o in {"eu": 0.9, "us": 0.05, "ap": 0.05}.items()) <= 0.1 + 1e-12


@pytest.fixture
def three_regions(settings, gcra_settings):
    servers = {name: fakeredis.FakeServer() for name in NAMES}
    settings.CACHES = {
        alias: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": f"redis://{name}:6379/0",
                "OPTIONS": {"CONNECTION_POOL_KWARGS": {"connection_class": fakeredis.FakeRedisConnection,
                                                       "server": servers[name]}}}
        for alias, name in (("default", "eu"), ("us-redis", "us"), ("ap-redis", "ap"))}

    def apply(policies, local="eu"):
        gcra_settings(REGIONS={"local": local, "caches": {"eu": "default", "us": "us-redis", "ap": "ap-redis"},
                               "rebalance_interval": 5.0},
                      POLICIES=policies, DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of"})
        retire()
        from django_redis import get_redis_connection

        for alias in ("default", "us-redis", "ap-redis"):  # django-redis keeps pools (and so servers) by URL
            get_redis_connection(alias).flushall()

    yield apply
    retire()


def one(budget=None, rate="300/s", burst=30):
    policy = {"limits": [{"name": "t", "key": ["tenant"], "rate": rate, "burst": burst}]}
    return policy if budget is None else {**policy, "budget": budget}


def spec(policy, tenant="acme"):
    (s,) = current().plan(policy, {"tenant": tenant}).specs
    return s.interval, s.burst


def test_each_mode_scales_the_spec(three_regions):
    three_regions({"shared": one(), "fixed": one("fixed"), "given": one({"fixed": {"eu": 0.5, "us": 0.3, "ap": 0.2}}),
                   "full": one("full"), "home": one({"home": "tests.test_regions.home_of", "away": 0.1})})
    full = (3334, 30)
    assert spec("shared") == (10_002, 10)  # before any rebalance: equal shares
    assert spec("fixed") == (10_002, 10)
    assert spec("given") == (6668, 15)
    assert spec("full") == full
    assert spec("home", "eu-tenant") == full
    assert spec("home", "us-tenant") == (33_340, 3)


def test_shared_specs_follow_the_table_read_from_the_local_redis(three_regions):
    three_regions({"api": one()})
    assert spec("api") == (10_002, 10)
    from django_redis import get_redis_connection

    get_redis_connection("default").hset("rl:regions:shares", mapping={
        "api/t": json.dumps({"eu": 0.8, "us": 0.15, "ap": 0.05}), "_window": 7})
    get_redis_connection("us-redis").hset("rl:regions:shares", "api/t", json.dumps({"eu": 0.1, "us": 0.8, "ap": 0.1}))
    shares().next_sync = 0.0
    shares().tick()
    assert shares().join(5)
    assert shares().window == 7
    assert spec("api") == (4168, 24)  # eu reads only eu's Redis


def test_a_region_s_demand_is_observed_exactly_while_regions_is_set(three_regions, gcra_settings):
    from django_gcra import tally
    from django_gcra.signals import observers

    gcra_settings(POLICIES={"api": one()})
    assert observers == [tally.on_decision]  # without REGIONS: one call less per decision
    three_regions({"api": one()})
    assert observers == [region_demand.on_decision, tally.on_decision]
    three_regions({"api": one()}, local="us")  # a change that keeps REGIONS: observed once
    assert observers == [region_demand.on_decision, tally.on_decision]
    gcra_settings(POLICIES={"api": one()})
    assert observers == [tally.on_decision]


def test_demand_is_counted_per_limit_and_flushed_to_the_local_redis(three_regions):
    from django_redis import get_redis_connection

    from django_gcra import decide

    three_regions({"api": one()})
    for _ in range(5):
        decide("api", {"tenant": "acme"}, cost=2)
    decide("api", {"tenant": None})  # no limit in force: nothing asked of it
    assert shares().demand == {"api/t": 10}
    shares().next_sync = 0.0
    shares().tick()
    assert shares().join(5)
    eu = get_redis_connection("default")
    (key,) = [k for k in eu.keys("rl:regions:demand:*")]
    assert eu.hgetall(key) == {b"api/t": b"10", b"api/t/acme": b"10"} and eu.ttl(key) > 0  # the limit, its busy key
    assert get_redis_connection("us-redis").keys("rl:regions:demand:*") == []
    assert shares().demand == {}
    families = {f.name: f for f in region_demand.RegionCollector().collect()}
    (share,) = families["django_gcra_region_share"].samples
    assert share.labels == {"region": "eu", "policy": "api", "limit": "t"} and share.value == pytest.approx(1 / 3)
    (units,) = families["django_gcra_region_demand_units"].samples
    assert units.value == 10


def test_rebalance_reads_every_region_and_writes_every_region(three_regions, settings):
    from django.core.management import call_command
    from django_redis import get_redis_connection

    three_regions({"api": one(), "pinned": one("full")})
    now = 1_000_000.0
    window = regions.complete_window(now, regions.get_settings().regions)
    aliases = {"eu": "default", "us": "us-redis", "ap": "ap-redis"}
    for name, units in (("eu", 900), ("us", 100), ("ap", 0)):
        get_redis_connection(aliases[name]).hset(f"rl:regions:demand:{window}",
                                                 mapping={"api/t": units, "pinned/t": 5})
    result = regions.rebalance(now)
    assert not result.unreachable and set(result.shares) == {"api/t"}  # "full" has no shares
    first = result.shares["api/t"]
    assert first["eu"] == pytest.approx(1 / 3 + 0.25)
    for alias in aliases.values():
        stored = get_redis_connection(alias).hgetall("rl:regions:shares")
        assert json.loads(stored[b"api/t"]) == pytest.approx(first) and int(stored[b"_window"]) == window
        assert len(get_redis_connection(alias).lrange("rl:regions:log", 0, -1)) == 1
    assert regions.rebalance(now).skipped  # a second run for the same window changes nothing

    def connect(alias):
        if alias == "ap-redis":
            raise ConnectionError("ap is away")
        return get_redis_connection(alias)

    later = now + 5.0
    for name in ("eu", "us"):
        get_redis_connection(aliases[name]).hset(f"rl:regions:demand:{window + 1}", "api/t", 500)
    second = regions.rebalance(later, connect=connect)
    assert second.unreachable == ["ap"] and second.window == window + 1
    assert second.shares["api/t"]["ap"] == pytest.approx(first["ap"])  # ap keeps enforcing its share
    assert json.loads(get_redis_connection("ap-redis").hget("rl:regions:shares", "api/t")) == pytest.approx(first)
    call_command("gcra_rebalance", "--once", "--force")  # the command runs on the real clock: no demand, no move
    import io

    out = io.StringIO()
    call_command("gcra_status", stdout=out)
    text = out.getvalue()
    assert "Regions (local 'eu')" in text and "api: budget shared" in text and "pinned: budget full" in text
    eu_share = json.loads(get_redis_connection("default").hget("rl:regions:shares", "api/t"))["eu"]
    assert f"api/t: share {eu_share:.3f}, demand 0 units" in text and "latest share changes" in text
    print(text)


def test_busy_keys_get_shares_of_their_own(three_regions):
    """Two tenants of one limit, each busy in its own region: the limit's demand is even,
    so its shares stay equal, but each busy key's shares follow its own demand; a key that
    goes quiet keeps its shares for KEY_TTL_WINDOWS windows, then falls back to the limit's."""
    from django_redis import get_redis_connection

    from django_gcra import decide

    three_regions({"api": one()})
    aliases = {"eu": "default", "us": "us-redis", "ap": "ap-redis"}
    for _ in range(30):  # counted per key in this (eu) process too
        decide("api", {"tenant": "eu-t"})
    assert shares().keys == {"api/t/eu-t": 30}
    now = 2_000_000.0
    config = regions.get_settings().regions
    window = regions.complete_window(now, config)
    capacity = 300 * config.rebalance_interval  # units the limit admits in a window
    busy, idle = int(0.9 * capacity), int(0.01 * capacity)
    for step in range(2):
        for name, eu_t, us_t in (("eu", busy, 0), ("us", 0, busy), ("ap", 0, 0)):
            fields = {"api/t": eu_t + us_t, "api/t/eu-t": eu_t, "api/t/us-t": us_t, "api/t/quiet": idle}
            get_redis_connection(aliases[name]).hset(f"rl:regions:demand:{window + step}",
                                                     mapping={k: v for k, v in fields.items() if v})
        result = regions.rebalance(now + step * config.rebalance_interval)
    assert result.shares["api/t"]["eu"] == pytest.approx(result.shares["api/t"]["us"])
    assert result.shares["api/t/eu-t"]["eu"] > 0.6 and result.shares["api/t/us-t"]["us"] > 0.6
    assert "api/t/quiet" not in result.shares  # 1 % of the limit: not busy
    shares().next_sync = 0.0
    shares().tick()
    assert shares().join(5)
    eu_t, base = result.shares["api/t/eu-t"]["eu"], result.shares["api/t"]["eu"]
    assert spec("api", "eu-t") == regions.scale(3334, 30, eu_t)
    assert spec("api", "us-t") == regions.scale(3334, 30, result.shares["api/t/us-t"]["eu"])
    assert spec("api", "other") == regions.scale(3334, 30, base)
    # Quiet for KEY_TTL_WINDOWS + 1 windows: its own shares are dropped everywhere.
    for step in range(2, regions.KEY_TTL_WINDOWS + 4):
        last = regions.rebalance(now + step * config.rebalance_interval)
    assert "api/t/eu-t" not in last.shares
    for alias in aliases.values():
        assert get_redis_connection(alias).hget("rl:regions:shares", "api/t/eu-t") is None


def test_a_forked_worker_forgets_its_parents_demand_and_sync(three_regions):
    import os

    from django_gcra import decide

    three_regions({"api": one()})
    decide("api", {"tenant": "acme"})
    assert shares().demand == {"api/t": 1}
    shares().sync_lock.acquire()  # as if a sync were in flight at the fork
    try:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once
            ok = current().shares.demand == {} and current().shares.sync_lock.acquire(blocking=False)
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(read, 1) == b"1"
        os.close(read)
        os.close(write)
    finally:
        shares().sync_lock.release()
    assert shares().demand == {"api/t": 1}  # the parent keeps its own


def test_a_share_state_reads_the_table_its_own_sync_gives_it(three_regions):
    """The engine's ShareState syncs with ``sync.sync``; another, built with its own
    function, is woken by its own ``tick``, is handed itself, and serves ``share_of`` from
    its own table: nothing of it goes through the engine's."""
    three_regions({"api": one()})
    calls = []

    def fill(s):
        calls.append(s)
        s.shares = {"api/t": {"eu": 0.5, "us": 0.25, "ap": 0.25}}
        s.loaded = True
        s.changed()

    other = regions.ShareState(fill)
    try:
        assert other.tick() is not None and other.join(5)
        assert calls == [other] and other.version == 1
        policy = regions.get_settings().policies["api"]
        (limit,) = policy.limits
        assert other.share_of(policy, limit, {"tenant": "acme"}) == 0.5
        assert shares().share_of(policy, limit, {"tenant": "acme"}) == pytest.approx(1 / 3)  # equal: not synced
    finally:
        other.worker.stop()
