"""Load shedding (django_gcra/shedding.py): the gradient controller with an injected
clock, the shedder's counters, and LoadSheddingMiddleware through the test clients, sync
and async. The real-server overload test is tests/test_shedding_load.py; the settings'
checks, tests/test_shedding_checks.py."""

from __future__ import annotations

import asyncio
import json
import math
import threading

import pytest
from django.test import AsyncClient, Client
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from django_gcra import shedding
from django_gcra.shedding import FixedLimit, GradientLimit, Shedder, get_shedder
from tests.shedding_urls import gate

MIDDLEWARE = "django_gcra.middleware.LoadSheddingMiddleware"


def gradient(**kwargs):
    params = {"max_limit": 64, "min_limit": 3, "sample_interval": 0.1, "min_rtt_interval": 60.0,
              "min_rtt_samples": 10, "buffer": 0.25, "jitter": 0.0, "now": 100.0, "rand": lambda: 0.5}
    return GradientLimit(**{**params, **kwargs})


def complete(limit, now, rtt, count):
    """``count`` requests that started at ``now - rtt`` complete at ``now``."""
    for _ in range(count):
        limit.on_sample(now - rtt, rtt, now)


def windows(limit, start, rtt, count, per_window=5):
    """``count`` sample windows of ``per_window`` completions, each at ``rtt``; the limits."""
    seen, now = [], start
    for _ in range(count):
        complete(limit, now + limit.sample_interval / 2, rtt, per_window)
        now += limit.sample_interval + 0.001  # the window closes on the next event after it is due
        limit.tick(now)
        seen.append(limit.limit)
    return seen, now


def measured(**kwargs):
    """A GradientLimit past its first minRTT window (minRTT 10 ms)."""
    limit = gradient(**kwargs)
    complete(limit, 100.1, 0.010, limit.min_rtt_samples)
    return limit


# --- the gradient controller -----------------------------------------------------------

def test_starts_pinned_to_the_floor_until_min_rtt_is_measured():
    limit = gradient()
    assert limit.measuring and limit.limit == 3 and limit.min_rtt is None
    complete(limit, 100.1, 0.010, 9)
    assert limit.measuring and limit.min_rtt is None
    limit.on_sample(100.1 - 0.030, 0.030, 100.1)  # the 10th: p50 of nine 10 ms and one 30 ms
    assert not limit.measuring and limit.min_rtt == pytest.approx(0.010)
    assert limit.limit == 3  # back to its value before the window (the floor at start)


def test_samples_from_before_the_window_are_not_min_rtt_samples():
    limit = gradient()
    complete(limit, 100.1, 0.5, 20)  # started at 99.6, before the window opened at 100
    assert limit.measuring and limit.min_rtt is None


def test_grows_while_latency_stays_at_min_rtt_and_stops_at_max():
    limit = measured()
    seen, _ = windows(limit, 100.1, 0.010, 12)
    # Envoy's calculateNewLimit at gradient 1.25: int(l * 1.25 + sqrt(l * 1.25))
    expected, current = [], 3
    for _ in range(12):
        scaled = current * 1.25
        current = min(64, int(scaled + math.sqrt(scaled)))
        expected.append(current)
    assert seen == expected
    assert seen[:4] == [5, 8, 13, 20] and seen[-1] == 64


def test_falls_when_latency_rises_and_never_below_the_floor():
    limit = measured()
    _, now = windows(limit, 100.1, 0.010, 12)
    assert limit.limit == 64
    seen, now = windows(limit, now, 0.040, 7)  # 4x minRTT: the gradient is clamped at 0.5
    assert seen == [37, 22, 14, 9, 6, 4, 3]  # int(l / 2 + sqrt(l / 2)), then the floor
    assert limit.sample_rtt == pytest.approx(0.040)


def test_a_milder_slowdown_settles_above_the_floor():
    limit = measured()
    _, now = windows(limit, 100.1, 0.010, 12)
    seen, _ = windows(limit, now, 0.020, 20)  # 2x minRTT: gradient 0.625
    assert seen[-1] == seen[-2] == 4  # int(4 * .625 + sqrt(2.5)) == 4: a fixed point


def test_five_updates_at_the_floor_measure_min_rtt_again():
    limit = measured()
    seen, now = windows(limit, 100.1, 0.100, 4)  # 10x minRTT for good (a slower dependency)
    assert seen == [3, 3, 3, 3] and not limit.measuring
    seen, now = windows(limit, now, 0.100, 1)
    assert seen == [3] and limit.measuring
    complete(limit, now + 0.2, 0.100, 10)
    assert not limit.measuring and limit.min_rtt == pytest.approx(0.100)  # the new normal


def test_min_rtt_is_measured_again_after_the_interval_with_jitter():
    limit = measured(jitter=0.5, rand=lambda: 0.5)  # next at 100.1 + 60 * 1.25 = 175.1
    _, now = windows(limit, 100.1, 0.010, 12)
    limit.tick(175.0)
    assert not limit.measuring and limit.limit == 64
    limit.tick(175.2)
    assert limit.measuring and limit.limit == 3
    complete(limit, 175.3, 0.012, 10)
    assert not limit.measuring and limit.limit == 64 and limit.min_rtt == pytest.approx(0.012)


def test_no_samples_in_a_window_leave_the_limit_alone():
    limit = measured()
    _, now = windows(limit, 100.1, 0.010, 3)
    before = limit.limit
    limit.tick(now + 1.0)
    assert limit.limit == before


@hsettings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(0.0001, 5.0), st.integers(0, 8)), max_size=60),
       st.integers(1, 10), st.integers(1, 200))
def test_the_limit_stays_between_floor_and_max(steps, floor, ceiling):
    limit = gradient(min_limit=min(floor, ceiling), max_limit=ceiling, min_rtt_samples=3)
    now = 100.0
    for gap, rtt, completions in steps:
        now += gap
        limit.tick(now)
        complete(limit, now, rtt, completions)
        assert min(floor, ceiling) <= limit.limit <= ceiling


# --- the shedder: one per process, thread-safe ----------------------------------------

def test_fixed_cap_sheds_the_one_over_and_counts():
    shedder = Shedder(FixedLimit(2), clock=lambda: 1.0)
    a, b = shedder.try_acquire(), shedder.try_acquire()
    assert a is not None and b is not None and shedder.try_acquire() is None
    a.release()
    a.release()  # idempotent
    c = shedder.try_acquire()
    assert c is not None
    assert shedder.stats() == shedding.SheddingStats(admitted=3, shed=1, in_flight=2, limit=2, min_rtt=None,
                                                     sample_rtt=None)
    b.cancel()
    c.release()
    assert shedder.stats().in_flight == 0


def test_threads_never_exceed_the_cap():
    shedder = Shedder(FixedLimit(5))
    inside, peak, lock, barrier = [0], [0], threading.Lock(), threading.Barrier(16, timeout=10)

    def worker():
        barrier.wait()
        for _ in range(300):
            slot = shedder.try_acquire()
            if slot is None:
                continue
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            with lock:
                inside[0] -= 1
            slot.release()

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    stats = shedder.stats()
    assert peak[0] <= 5 and stats.in_flight == 0 and stats.admitted + stats.shed == 16 * 300


def test_one_shedder_per_process_rebuilt_when_settings_change(gcra_settings):
    gcra_settings(SHEDDING={"max_in_flight": 7, "adaptive": False})
    first = get_shedder()
    assert get_shedder() is first and first.algorithm.limit == 7
    gcra_settings(SHEDDING={"max_in_flight": 9})
    second = get_shedder()
    assert second is not first and isinstance(second.algorithm, GradientLimit)
    assert second.algorithm.max_limit == 9 and second.algorithm.limit == 3


# --- the middleware ----------------------------------------------------------------------

@pytest.fixture
def shed(settings, gcra_settings):
    """LoadSheddingMiddleware alone, over tests/shedding_urls.py; ``shed(**SHEDDING)``."""
    settings.ROOT_URLCONF = "tests.shedding_urls"
    settings.MIDDLEWARE = [MIDDLEWARE]
    gate.reset()

    def apply(**values):
        gcra_settings(SHEDDING={"adaptive": False, **values})
        return get_shedder()

    return apply


def test_over_the_cap_a_503_with_retry_after_and_a_json_body(shed):
    shedder = shed(max_in_flight=1, retry_after=2)
    held = shedder.try_acquire()
    response = Client().get("/fast/")
    assert response.status_code == 503
    assert response["Retry-After"] == "2" and response["Cache-Control"] == "no-store"
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {"error": "overloaded", "retry_after_seconds": 2,
                                            "message": "The server is overloaded; retry in 2 s."}
    held.release()
    assert Client().get("/fast/").status_code == 200
    stats = shedder.stats()
    assert (stats.shed, stats.admitted, stats.in_flight) == (1, 2, 0)


def test_exempt_paths_are_never_shed_nor_counted(shed):
    shedder = shed(max_in_flight=1, exempt=[r"^/health/"])
    held = shedder.try_acquire()
    assert Client().get("/health/").status_code == 200
    assert Client().get("/fast/").status_code == 503
    held.release()
    assert shedder.stats().admitted == 1


def test_a_streamed_body_holds_its_slot_until_the_last_chunk(shed):
    shedder = shed(max_in_flight=1)
    response = Client().get("/stream/")
    assert response.status_code == 200 and shedder.stats().in_flight == 1
    assert Client().get("/fast/").status_code == 503
    assert b"".join(response.streaming_content) == b"abc"  # the test client closes it after the last chunk
    assert shedder.stats().in_flight == 0


def test_a_failing_view_releases(shed):
    shedder = shed(max_in_flight=1)
    with pytest.raises(RuntimeError):
        Client().get("/boom/")
    assert shedder.stats().in_flight == 0


def test_adaptive_limit_through_the_middleware_learns_min_rtt(shed):
    shedder = shed(max_in_flight=10, adaptive=True, min_rtt_samples=5)
    assert shedder.stats().limit == 3
    for _ in range(5):
        assert Client().get("/fast/").status_code == 200
    stats = shedder.stats()
    assert stats.min_rtt is not None and stats.min_rtt > 0 and stats.in_flight == 0


async def test_async_tasks_never_exceed_the_cap_and_the_rest_are_shed(shed):
    shedder = shed(max_in_flight=5)
    client = AsyncClient()

    async def open_gate_when_shed():
        for _ in range(500):  # at most 5 s
            if shedder.stats().shed >= 15:
                break
            await asyncio.sleep(0.01)
        gate.event.set()

    responses = await asyncio.wait_for(asyncio.gather(*[client.get("/gated/") for _ in range(20)],
                                                      open_gate_when_shed()), timeout=20)
    statuses = sorted(r.status_code for r in responses[:-1])
    assert statuses == [200] * 5 + [503] * 15
    assert gate.peak == 5 and shedder.stats().in_flight == 0
    assert all(r["Retry-After"] == "1" for r in responses[:-1] if r.status_code == 503)


async def test_async_disconnect_releases(shed):
    shedder = shed(max_in_flight=2)
    task = asyncio.ensure_future(AsyncClient().get("/gated/"))
    for _ in range(500):
        if gate.inside:
            break
        await asyncio.sleep(0.01)
    assert shedder.stats().in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert shedder.stats().in_flight == 0


def test_never_touches_redis_nor_the_rate_limit_audit(shed, monkeypatch):
    import redis

    from django_gcra import audit, signals

    def refuse(*args, **kwargs):
        raise AssertionError("load shedding called Redis")

    monkeypatch.setattr(redis.Redis, "execute_command", refuse)
    seen = []
    signals.decision.connect(seen.append, weak=False, dispatch_uid="shed-test")
    monkeypatch.setattr(signals, "observers", [*signals.observers, lambda *a, **k: seen.append(k)])
    monkeypatch.setattr(audit.recorder, "record", lambda *a, **k: seen.append(a))
    try:
        shedder = shed(max_in_flight=1)
        held = shedder.try_acquire()
        assert Client().get("/fast/").status_code == 503
        held.release()
        assert Client().get("/fast/").status_code == 200
    finally:
        signals.decision.disconnect(dispatch_uid="shed-test")
    assert seen == []  # no decision, no signal, no audit record


def test_prometheus_counts_shed_and_admitted_and_shows_the_limit(shed):
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.REGISTRY

    def value(name):
        return registry.get_sample_value(name) or 0.0

    shedder = shed(max_in_flight=1)
    before_shed, before_admitted = value("django_gcra_shed_total"), value("django_gcra_shed_admitted_total")
    held = shedder.try_acquire()  # not through the middleware: not counted by Prometheus
    assert Client().get("/fast/").status_code == 503
    assert value("django_gcra_shed_limit") == 1 and value("django_gcra_shed_in_flight") == 1
    held.release()
    assert Client().get("/fast/").status_code == 200
    assert value("django_gcra_shed_total") == before_shed + 1
    assert value("django_gcra_shed_admitted_total") == before_admitted + 1


def test_a_shed_request_is_not_an_error_log_line_each_but_one_count_per_interval(shed, caplog):
    shedder = shed(max_in_flight=1)
    held = shedder.try_acquire()
    with caplog.at_level("WARNING"):
        for _ in range(3):
            assert Client().get("/fast/").status_code == 503
    held.release()
    assert not [r for r in caplog.records if r.name == "django.request"]  # no ERROR (and no mail) per 503
    assert [r.getMessage() for r in caplog.records if r.name == "django_gcra"] == [
        "django_gcra: load shedding answered 1 request(s) 503 (limit 1, 1 in flight)"]


def test_the_shed_count_is_logged_once_per_interval(caplog):
    now = [0.0]
    shedder = Shedder(FixedLimit(1), clock=lambda: now[0])
    held = shedder.try_acquire()
    with caplog.at_level("WARNING", logger="django_gcra"):
        for _ in range(5):
            assert shedder.try_acquire() is None
        now[0] = shedding.LOG_INTERVAL - 0.1
        assert shedder.try_acquire() is None
        now[0] = shedding.LOG_INTERVAL
        assert shedder.try_acquire() is None
    held.release()
    assert [r.getMessage() for r in caplog.records] == [
        "django_gcra: load shedding answered 1 request(s) 503 (limit 1, 1 in flight)",
        "django_gcra: load shedding answered 6 request(s) 503 (limit 1, 1 in flight)"]
