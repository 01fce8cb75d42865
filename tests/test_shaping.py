"""Shaping: ``decide(..., max_wait=...)``, ``adecide``, ``pace``/``apace`` and
``@ratelimit(max_wait=...)`` on a real redis-server."""

from __future__ import annotations

import asyncio
import bisect
import multiprocessing
import statistics
import time

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from django_gcra import SlotRefused, adecide, apace, decide, pace
from django_gcra.decorators import ratelimit
from django_gcra.engine import current
from django_gcra.metrics import outcome_of
from tests.support.workers import pace_times

pytestmark = pytest.mark.redis

TENANT = {"tenant": "tests.support.descriptors.tenant_of"}
ONE = {"limits": [{"name": "k", "key": ["tenant"], "rate": "10/s", "burst": 1}]}  # one slot every 100 ms


def tats(policy: str, descriptors: dict) -> list[int | None]:
    p = current().plan(policy, descriptors)
    return current().backend_for(p.policy).read_tats([s.key for s in p.specs])


@pytest.fixture
def shaped(real_redis, gcra_settings):
    gcra_settings(AUDIT={"ENABLED": False}, DESCRIPTORS=TENANT, POLICIES={
        "one": ONE,
        "slow": {"limits": [{"name": "k", "key": ["tenant"], "rate": "1/10s", "burst": 1}]},
        "two": {"limits": [{"name": "fast", "key": ["tenant"], "rate": "10/s", "burst": 1},
                           {"name": "slow", "key": ["tenant"], "rate": "2/s", "burst": 1}]},
        "shadowed": {"limits": [{"name": "k", "key": ["tenant"], "rate": "10/s", "burst": 5},
                                {"name": "watch", "key": ["tenant"], "rate": "1/m", "burst": 1, "mode": "shadow"}]},
        "log": {"limits": [{"name": "k", "key": ["tenant"], "rate": "1/s", "algorithm": "sliding_log"}]},
        "held": {"limits": [{"name": "k", "key": ["tenant"], "rate": "1/s", "burst": 1}],
                 "concurrency": [{"name": "c", "key": ["tenant"], "max": 5, "ttl": 30}]},
        "leased": {"limits": [{"name": "k", "key": ["tenant"], "rate": "10/s", "burst": 5}],
                   "lease": {"size": 2, "ttl": 1.0}},
    })
    return real_redis


def test_a_denied_request_waits_for_its_own_slot(shaped):
    d = {"tenant": "a"}
    assert decide("one", d).waited == 0.0
    assert not decide("one", d).allowed  # without max_wait: refused as ever
    started = time.monotonic()
    decision = decide("one", d, max_wait=2.0)
    elapsed = time.monotonic() - started
    assert decision.allowed and not decision.fallback
    assert 0 < decision.waited <= 0.1
    assert elapsed >= decision.waited  # it returned only once its slot had come
    assert outcome_of(decision) == "waited"


def test_waiters_get_distinct_slots_one_interval_apart(shaped):
    d = {"tenant": "b"}
    decide("one", d)
    p = current().plan("one", d)
    backend = current().backend_for(p.policy)
    outcomes = [backend.evaluate(p.specs, 1, 5_000_000) for _ in range(5)]  # no sleeping: the slots themselves
    slots = [o.now + o.waited for o in outcomes]
    assert all(o.allowed for o in outcomes)
    gaps = [b - a for a, b in zip(slots, slots[1:])]
    assert all(95_000 <= g <= 105_000 for g in gaps), gaps  # 100 ms apart (less the calls' own time)


def test_a_wait_beyond_max_wait_is_refused_and_consumes_nothing(shaped):
    d = {"tenant": "c"}
    decide("slow", d)
    before = tats("slow", d)
    started = time.monotonic()
    decision = decide("slow", d, max_wait=0.5)  # the next slot is 10 s away
    assert not decision.allowed and decision.waited == 0.0
    assert 9 < decision.retry_after <= 10
    assert time.monotonic() - started < 0.5  # refused at once, no waiting
    assert tats("slow", d) == before  # nothing reserved
    with pytest.raises(SlotRefused) as refused:
        pace("slow", d, max_wait=0.5)
    assert refused.value.decision.retry_after == pytest.approx(decision.retry_after, abs=0.5)
    assert "beyond max_wait" in str(refused.value)
    assert tats("slow", d) == before
    assert outcome_of(decision) == "denied"


def test_composite_reserves_all_or_nothing(shaped):
    d = {"tenant": "d"}
    decide("two", d)
    before = tats("two", d)
    refused = decide("two", d, max_wait=0.2)  # fast has a slot in 0.1 s, slow only in 0.5 s
    assert not refused.allowed and refused.limit == "slow"
    assert tats("two", d) == before  # neither limit moved
    p = current().plan("two", d)
    reserved = current().backend_for(p.policy).evaluate(p.specs, 1, 1_000_000)  # the reservation, without the sleep
    assert reserved.allowed and 300_000 < reserved.waited <= 500_000  # the largest wait over the limits
    after = tats("two", d)
    assert after[0] == before[0] + 100_000 and after[1] == before[1] + 500_000  # both limits hold it
    waited = decide("two", d, max_wait=2.0)  # the next slot: slow's, 0.5 s after the reserved one
    assert waited.allowed and 0.5 < waited.waited <= 1.0


def test_shadow_limits_never_make_a_caller_wait(shaped):
    d = {"tenant": "e"}
    decide("shadowed", d)
    second = decide("shadowed", d, max_wait=5)  # the shadow limit would deny for a minute
    assert second.allowed and second.shadow and second.waited == 0.0


def test_sliding_limits_never_wait(shaped):
    d = {"tenant": "f"}
    assert decide("log", d).allowed
    started = time.monotonic()
    decision = decide("log", d, max_wait=5)
    assert not decision.allowed and decision.waited == 0.0
    assert time.monotonic() - started < 0.5


def test_a_policy_holding_slots_never_waits(shaped):
    d = {"tenant": "h"}
    first = decide("held", d)
    assert first.allowed and first.slots is not None
    started = time.monotonic()
    decision = decide("held", d, max_wait=5)  # the rate denies; a wait would hold a slot idle
    assert not decision.allowed and decision.waited == 0.0 and decision.slots is None
    assert decision.limit == "k" and decision.retry_after > 0
    assert time.monotonic() - started < 0.5
    first.release()


def test_leases_serve_what_they_hold_and_wait_at_the_store(shaped):
    d = {"tenant": "g"}
    results = [decide("leased", d, max_wait=2.0) for _ in range(10)]
    assert all(r.allowed for r in results)
    assert sum(r.waited > 0 for r in results) >= 3  # burst 5 (some leased): the rest waited for slots
    assert max(r.waited for r in results) <= 0.25
    stats = current().backend_for(current().plan("leased", d).policy).stats()
    assert stats.leased_units > 0  # a lease was taken and served from


def test_bad_max_wait_is_a_clear_error(shaped):
    for bad in (-1, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError, match="max_wait"):
            decide("one", {"tenant": "h"}, max_wait=bad)


def test_fallback_never_waits(settings, gcra_settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0"}}  # nothing listens there
    gcra_settings(AUDIT={"ENABLED": False}, DESCRIPTORS=TENANT, TIMEOUT=50, POLICIES={
        "open": {**ONE, "on_failure": "open"}, "closed": {**ONE, "on_failure": "closed"}})
    started = time.monotonic()
    assert decide("open", {"tenant": "x"}, max_wait=3).fallback
    with pytest.raises(SlotRefused, match="unavailable"):
        pace("closed", {"tenant": "x"}, max_wait=3)
    assert time.monotonic() - started < 2.5


def test_pace_as_a_call_and_as_a_context_manager(shaped):
    d = {"tenant": "i"}
    assert pace("one", d).decision.waited == 0.0
    with pace("one", d, max_wait=1) as decision:
        assert decision.allowed and decision.waited > 0


def test_async_pacing_does_not_block_the_event_loop(shaped):
    d = {"tenant": "j"}

    async def main() -> tuple[int, float, bool]:
        await adecide("slow", d)  # the next slot is 10 s away
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        async with apace("one", d):
            pass
        paced = await apace("one", d, max_wait=2)  # waits up to 100 ms with asyncio.sleep
        try:
            await apace("slow", d, max_wait=0.5)
        except SlotRefused:
            refused = True
        else:
            refused = False
        stop = True
        await task
        return ticks, paced.waited, refused

    ticks, waited, refused = asyncio.run(main())
    assert waited > 0.02 and refused
    assert ticks >= 2  # the ticker ran while the paced call waited


def test_ratelimit_views_wait_sync_and_async(shaped):
    factory = RequestFactory()

    @ratelimit(key="ip", rate="10/s", burst=1, max_wait=1.0)
    def view(request):
        return HttpResponse("ok")

    @ratelimit(key="ip", rate="10/s", burst=1, max_wait=1.0)
    async def aview(request):
        return HttpResponse("ok")

    @ratelimit(key="ip", rate="10/s", burst=1)
    def impatient(request):
        return HttpResponse("ok")

    for _ in range(3):
        request = factory.get("/", REMOTE_ADDR="10.0.0.1")
        assert view(request).status_code == 200
    assert request.ratelimit.waited > 0
    for _ in range(3):
        request = factory.get("/", REMOTE_ADDR="10.0.0.2")
        assert asyncio.run(aview(request)).status_code == 200
    assert request.ratelimit.waited > 0
    statuses = [impatient(factory.get("/", REMOTE_ADDR="10.0.0.3")).status_code for _ in range(2)]
    assert statuses == [200, 429]


PROCESSES, THREADS, CALLS, RATE, BURST = 4, 4, 10, 20, 20


@pytest.mark.slow
def test_sixteen_pacers_through_one_limit_keep_the_rate_evenly(redis_server):
    """4 processes x 4 threads pacing through one 20/s limit (burst 20), max_wait large:
    all finish, none is refused, the starts (by Redis time) never run ahead of
    burst + elapsed x rate + 1, and after the burst they are spread evenly."""
    redis_server.client().flushall()
    gcra = {"DESCRIPTORS": TENANT,
            "POLICIES": {"partner": {"limits": [{"name": "p", "key": ["tenant"], "rate": f"{RATE}/s"}]}}}
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0  # time for the spawned interpreters to import Django
    with ctx.Pool(PROCESSES) as pool:
        results = pool.starmap(pace_times, [(redis_server.url, gcra, "partner", {"tenant": "t"}, start_at,
                                             THREADS, CALLS, 60.0)] * PROCESSES)
    t0 = min(first for first, _, _, _ in results)
    starts = sorted(s for _, times, _, _ in results for s in times)
    refused = sum(r for _, _, r, _ in results)
    total = PROCESSES * THREADS * CALLS
    assert refused == 0 and len(starts) == total
    for k, s in enumerate(starts, 1):  # admitted by s: never more than the limit lets through
        assert k <= BURST + (s - t0) / 1e6 * RATE + 1, (k, (s - t0) / 1e6)
    paced = starts[BURST:]
    span = (paced[-1] - paced[0]) / 1e6
    gaps = [b - a for a, b in zip(paced, paced[1:])]
    median = statistics.median(gaps) / 1e6
    assert 0.5 / RATE <= median <= 2 / RATE, median  # one interval apart, typically
    window = 250_000  # 5 slots' worth: no bunching at slot (or second) edges
    densest = max(bisect.bisect_right(paced, s + window - 1) - i for i, s in enumerate(paced))
    print(f"pacing: {total} starts, span {span:.2f} s, median gap {median * 1e3:.1f} ms, densest 250 ms {densest}")
    assert densest <= 12, densest


def test_audit_records_the_refusal_and_not_the_wait(shaped):
    from django_gcra.audit import AuditRecorder

    recorder = AuditRecorder(autostart=False)
    d = {"tenant": "k"}
    decide("slow", d)
    refused = decide("slow", d, max_wait=0.2)
    decide("one", d)
    waited = decide("one", d, max_wait=1)
    assert (outcome_of(refused), outcome_of(waited)) == ("denied", "waited")
    recorder.record(waited)
    assert recorder.buffer == {}  # admitted after a wait: not a denial
    recorder.record(refused)
    assert [bucket[3] for bucket in recorder.buffer] == ["denied"]
