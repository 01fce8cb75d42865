"""Metered costs and calendar quotas through decide() on a real redis-server: settle and
asettle on every algorithm (owed, refunded, bounded both ways, once), what never settles,
a leased key, quotas (same call as the rates, exact Retry-After, headers, peeks, tiers,
overrides) and a month quota across a month boundary and a DST change (fake clock)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from django_gcra import decide
from django_gcra.algorithm import QUOTA
from django_gcra.decision import Decision
from django_gcra.engine import current, retire
from django_gcra.models import LimitOverride
from django_gcra.periods import Calendar
from tests.support.servers import start_redis

pytestmark = pytest.mark.redis

TENANT = "tests.support.descriptors.tenant_of"


def lim(name, rate, **extra):
    return {"name": name, "key": ["tenant"], "rate": rate, **extra}


def quota(name, units, period="month", tz="Europe/Paris", **extra):
    return {"name": name, "key": ["tenant"], "algorithm": "quota", "quota": units, "period": period, "tz": tz,
            **extra}


POLICIES = {
    "tokens": {"limits": [lim("tpm", "10/m", burst=10)]},
    "log": {"limits": [lim("l", "10/h", algorithm="sliding_log")]},
    "win": {"limits": [lim("w", "10/h", algorithm="sliding_window")]},
    "llm": {"limits": [lim("tpm", "100/m", burst=100), quota("month", 150)]},
    "monthly": {"limits": [quota("month", 3)]},
    "daily": {"limits": [quota("day", 5, period="day", tz="UTC")]},
    "tiered": {"limits": [quota("month", {"free": 2, "paid": 4})]},
    "shadow": {"limits": [lim("s", "1/h")], "mode": "shadow"},
    "leased": {"limits": [lim("k", "1000/s", burst=200)], "lease": {"size": 10, "ttl": 1.0}},
    "conc": {"limits": [lim("r", "10/m", burst=10)], "concurrency": [{"name": "c", "key": ["tenant"], "max": 2}]},
}


@pytest.fixture(autouse=True)
def policies(real_redis, gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": TENANT, "tier": "tests.support.descriptors.tier_of"}, POLICIES=POLICIES)
    retire()  # a fresh engine: fresh settle counters
    yield real_redis
    retire()


def peek(policy, tenant="a", **more):
    return decide(policy, {"tenant": tenant, **more}, cost=0)


def test_a_refund_returns_units_and_never_more_than_a_full_burst():
    d = decide("tokens", {"tenant": "a"}, cost=6)
    assert d.allowed and d.remaining == 4
    assert d.settle(2) is True  # 4 units back
    assert peek("tokens").remaining == 8
    d = decide("tokens", {"tenant": "a"}, cost=2)
    assert d.settle(0) is True
    assert peek("tokens").remaining == 8
    d = decide("tokens", {"tenant": "b"}, cost=1)
    assert d.settle(0) is True  # a refund to a rested key leaves it rested, not above its burst
    assert peek("tokens", "b").remaining == 10
    decide("tokens", {"tenant": "c"}, cost=10)
    assert decide("tokens", {"tenant": "c"}, cost=1).allowed is False


def test_more_than_the_estimate_is_owed_at_once_with_an_exact_retry_after():
    d = decide("tokens", {"tenant": "a"}, cost=1)
    assert d.settle(13) is True  # 13 used of a burst of 10: 3 units owed beyond full use
    denied = decide("tokens", {"tenant": "a"})
    assert not denied.allowed
    interval = 6.0  # 10/m
    assert 4 * interval - 1 < denied.retry_after <= 4 * interval  # 3 owed, then one unit for this request
    assert denied.headers()["Retry-After"] == "24"


def test_debt_is_bounded_by_one_burst_beyond_full_use():
    d = decide("tokens", {"tenant": "a"}, cost=1)
    d.settle(1_000_000)
    denied = decide("tokens", {"tenant": "a"})
    assert 11 * 6.0 - 1 < denied.retry_after <= 11 * 6.0  # at most 10 beyond full use, then one


def test_a_decision_settles_once_and_refuses_bad_actuals():
    d = decide("tokens", {"tenant": "a"}, cost=2)
    with pytest.raises(ValueError):
        d.settle(-1)
    with pytest.raises(TypeError):
        d.settle(1.5)
    assert d.settle(2) is True  # the estimate was right: no call needed, still settled
    with pytest.raises(RuntimeError):
        d.settle(1)
    with pytest.raises(ValueError):
        Decision(allowed=False, retry_after=1.0, remaining=0, limit="x", policy="p").settle(-3)


def test_what_never_settles_returns_false(gcra_settings):
    decide("tokens", {"tenant": "z"}, cost=10)
    denied = decide("tokens", {"tenant": "z"})
    assert denied.settle(0) is False and denied.settle(0) is False
    shadow = [decide("shadow", {"tenant": "a"}) for _ in range(2)][1]
    assert shadow.allowed and shadow.shadow and shadow.settle(0) is False
    assert Decision(allowed=True, retry_after=0.0, remaining=0, limit="", policy="p", disabled=True).settle(5) is False
    assert Decision(allowed=True, retry_after=0.0, remaining=0, limit="", policy="p", exempt=True).settle(5) is False



def test_a_fallback_decision_never_settles(gcra_settings, settings):
    server = start_redis()
    try:
        settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url}}
        gcra_settings(DESCRIPTORS={"tenant": TENANT}, POLICIES=POLICIES, TIMEOUT=50)
        assert decide("tokens", {"tenant": "a"}).settlement is not None
    finally:
        server.stop()
    fallback = decide("tokens", {"tenant": "a"})
    assert fallback.allowed and fallback.fallback and fallback.settle(0) is False


@pytest.mark.parametrize("policy", ["log", "win"])
def test_sliding_limits_owe_and_refund(policy):
    d = decide(policy, {"tenant": "a"}, cost=5)
    assert d.remaining == 5
    assert d.settle(1) is True
    assert peek(policy).remaining == 9
    d = decide(policy, {"tenant": "a"}, cost=1)
    assert d.settle(9) is True  # 8 owed: 1 + 9 = 10 used
    assert peek(policy).remaining == 0
    assert decide(policy, {"tenant": "a"}).allowed is False
    d = decide(policy, {"tenant": "b"}, cost=1)
    d.settle(0)
    assert peek(policy, "b").remaining == 10


def test_async_settle(real_redis):
    async def run():
        from django_gcra import adecide

        d = await adecide("tokens", {"tenant": "a"}, cost=5)
        assert await d.asettle(1) is True
        with pytest.raises(RuntimeError):
            await d.asettle(1)
        denied = await adecide("tokens", {"tenant": "q"}, cost=11)
        assert await denied.asettle(0) is False

    asyncio.run(run())
    assert peek("tokens").remaining == 9
    assert current().settler.stats.snapshot()[("tokens", "applied")] == 1


def test_a_composite_settles_every_rate_and_quota_limit_in_one_call(real_redis):
    decide("llm", {"tenant": "warm"}, cost=2).settle(1)  # the scripts loaded
    before = real_redis.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    d = decide("llm", {"tenant": "a"}, cost=50)
    assert d.settle(20) is True
    after = real_redis.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    assert after - before == 2  # the decision and the settle
    states = {s.name: s.remaining for s in peek("llm").limits}
    assert states == {"tpm": 80, "month": 130}


def test_concurrency_slots_are_not_settled():
    d = decide("conc", {"tenant": "a"}, cost=4)
    assert d.settle(1) is True
    assert {s.name: s.remaining for s in peek("conc").limits} == {"r": 9, "c": 1}
    d.release()


def test_a_leased_key_settles_on_the_store_once(real_redis):
    decisions = [decide("leased", {"tenant": "a"}) for _ in range(30)]  # a lease is taken once the key is hot
    key = current().plan("leased", {"tenant": "a"}).specs[0].key
    tat_before = int(real_redis.get(key))
    assert decisions[-1].settle(0) is True
    assert tat_before - int(real_redis.get(key)) == 1000  # one unit (1 ms at 1000/s) back to the store, once
    with pytest.raises(RuntimeError):
        decisions[-1].settle(0)


# ---------------------------------------------------------------- calendar quotas

def next_month_start(tz: str) -> float:
    now = datetime.now(ZoneInfo(tz))
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return datetime(year, month, 1, tzinfo=ZoneInfo(tz)).timestamp()


def test_a_quota_is_decided_with_the_rates_and_retries_at_the_next_period():
    assert [decide("monthly", {"tenant": "a"}).allowed for _ in range(4)] == [True, True, True, False]
    denied = decide("monthly", {"tenant": "a"})
    expected = next_month_start("Europe/Paris") - time.time()
    assert expected - 2 < denied.retry_after <= expected + 1
    headers = denied.headers()
    month_seconds = Calendar("month", "Europe/Paris").length()
    assert headers["RateLimit-Policy"] == f'"month";q=3;w={month_seconds}'
    assert 28 * 86400 - 3600 <= month_seconds <= 31 * 86400 + 3600
    assert peek("monthly").remaining == 0 and peek("monthly", "b").remaining == 3


def test_all_or_nothing_with_the_rates():
    assert decide("llm", {"tenant": "a"}, cost=100).allowed  # tpm burst 100, month 150
    denied = decide("llm", {"tenant": "a"}, cost=40)  # tpm denies: the quota is not charged
    assert not denied.allowed and denied.limit == "tpm"
    assert {s.name: s.remaining for s in peek("llm").limits}["month"] == 50
    assert decide("llm", {"tenant": "b"}, cost=151).allowed is False  # never satisfiable by the quota
    assert decide("llm", {"tenant": "b"}, cost=151).impossible


def test_a_day_quota_key_expires_when_its_period_ends(real_redis):
    decide("daily", {"tenant": "a"}, cost=2)
    key = current().plan("daily", {"tenant": "a"}).specs[0].key
    day_end = (int(time.time()) // 86400 + 1) * 86400
    assert 0 < real_redis.pttl(key) / 1000 <= day_end - time.time() + 1
    assert real_redis.get(key).endswith(b":2")


def test_tiers_and_overrides_change_the_quota(django_capture_on_commit_callbacks, db):
    assert [decide("tiered", {"tenant": "f", "tier": "free"}).allowed for _ in range(3)] == [True, True, False]
    assert [decide("tiered", {"tenant": "p", "tier": "paid"}).allowed for _ in range(5)] == [True] * 4 + [False]
    with django_capture_on_commit_callbacks(execute=True):
        LimitOverride.objects.create(policy="monthly", limit="month", match={"tenant": "big"}, quota=5)
    assert [decide("monthly", {"tenant": "big"}).allowed for _ in range(6)] == [True] * 5 + [False]
    assert decide("monthly", {"tenant": "big"}, cost=0).headers()["RateLimit-Policy"].startswith('"month";q=5;w=')


def test_a_store_clock_outside_the_boundaries_is_followed(real_redis):
    """The store's time far from this host's (a test clock, a stepped clock): the decision is
    sent once more with the boundaries around the store's time, which are then kept."""
    spec = current().plan("monthly", {"tenant": "a"}).specs[0]
    assert spec.algorithm == QUOTA
    spec.calendar.offset = -400 * 86400 * 1_000_000  # this host "thinks" the store is 400 days behind
    spec.calendar.bounds_for(spec.calendar.expected_now())
    assert decide("monthly", {"tenant": "a"}).allowed
    assert abs(spec.calendar.offset) < 5_000_000
    assert peek("monthly").remaining == 2


# ---- across a month boundary and a daylight-saving change, on the script, with a fake clock

def us(dt: datetime) -> int:
    return int(dt.timestamp()) * 1_000_000


def run(script, key, cal, now, cost=1, units=3):
    args = [cost, "%d:%d:%d:%d" % cal.bounds_for(now), units, 9]
    return script(keys=[key], args=[*args, now // 1_000_000, now % 1_000_000])


def test_a_month_quota_across_a_month_boundary_and_a_dst_change(clocked):
    client, script = clocked
    client.flushall()
    paris = ZoneInfo("Europe/Paris")
    cal = Calendar("month", "Europe/Paris")
    # March 2026 holds the change to summer time (29 March, 02:00 CET -> 03:00 CEST): 31 days less an hour.
    start = us(datetime(2026, 3, 1, tzinfo=paris))
    end = us(datetime(2026, 4, 1, tzinfo=paris))
    assert end - start == (31 * 86400 - 3600) * 1_000_000
    assert cal.bounds_for(start)[1:3] == (start, end)
    # Used up on 1 March: denied until the first instant of April, Paris time, to the us.
    assert [run(script, "m:{a}", cal, start + k)[0] for k in range(4)] == [1, 1, 1, 0]
    denied = run(script, "m:{a}", cal, start + 10)
    assert denied[2] == end - start - 10
    after_dst = us(datetime(2026, 3, 30, 12, tzinfo=paris))
    assert run(script, "m:{a}", cal, after_dst)[:3] == [0, 0, end - after_dst]
    assert run(script, "m:{a}", cal, end - 1)[0] == 0  # the last us of March
    assert run(script, "m:{a}", cal, end)[0:1] == [1]  # 1 April 00:00 CEST: a new period
    assert client.get("m:{a}") == b"%d:1" % end
    assert run(script, "m:{a}", cal, end, cost=0)[5] == 2  # two left in April


def test_day_quotas_last_23_and_25_hours_across_dst_changes(clocked):
    client, script = clocked
    client.flushall()
    paris = ZoneInfo("Europe/Paris")
    cal = Calendar("day", "Europe/Paris")
    for day, hours in (((2026, 3, 29), 23), ((2026, 10, 25), 25), ((2026, 6, 1), 24)):
        start = us(datetime(*day, tzinfo=paris))
        b = cal.bounds_for(start + 3_600_000_000)
        assert b[1] == start and b[2] - b[1] == hours * 3_600_000_000
        key = "d:{%d}" % start
        assert [run(script, key, cal, start + 5, units=1)[0] for _ in range(2)] == [1, 0]
        assert run(script, key, cal, start + 5, units=1)[2] == hours * 3_600_000_000 - 5


def test_week_and_year_periods():
    utc = ZoneInfo("UTC")
    thursday = us(datetime(2026, 1, 1, 15, tzinfo=utc))  # 1 January 2026 is a Thursday
    b = Calendar("week", "UTC").bounds_for(thursday)
    assert b[1] == us(datetime(2025, 12, 29, tzinfo=utc)) and b[2] == us(datetime(2026, 1, 5, tzinfo=utc))
    b = Calendar("year", "UTC").bounds_for(thursday)
    assert b[1:3] == (us(datetime(2026, 1, 1, tzinfo=utc)), us(datetime(2027, 1, 1, tzinfo=utc)))
    kolkata = Calendar("hour", "Asia/Kolkata").bounds_for(us(datetime(2026, 1, 1, 10, 50, tzinfo=utc)))
    assert kolkata[1] == us(datetime(2026, 1, 1, 10, 30, tzinfo=utc))  # 16:00 in India (+05:30)
