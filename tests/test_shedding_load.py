"""Load shedding under a real 2x overload: gunicorn (gthread) on loopback serving a view
whose latency grows with the requests in flight (50 ms + 25 ms per request in flight,
counted inside it), through LoadSheddingMiddleware.

Each attempt measures the unloaded p99 (4 clients, under any cap) on the same server,
then sends 16 clients: twice the fixed cap of 8. Admitted requests' p99 must stay under
``bound(unloaded)`` while the rest get fast 503s with Retry-After (their median under half
the unloaded median), the exempt health path
is never shed, and the view never sees more than the cap. The control runs the same
overload without the middleware and shows that the same bound then fails: even the
median of admitted requests is over it.

Latency on a shared machine only ever gains noise, so the timing claims get up to
``ATTEMPTS`` measurements and hold if one of them shows them (the best of several runs,
as benchmarks take); everything else must hold in every attempt. Without shedding the
admitted median is about 450 ms against a bound of about 350 ms.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.support.shedload import ShedServer, get, load, p99, percentile

pytestmark = pytest.mark.slow

CAP = 8
CLIENTS = 2 * CAP
SETTLE = 2.0  # seconds of the overload phase before latencies count (the adaptive limit falls meanwhile)
# A sample window of the adaptive limit holds about ten completions at these latencies
# (docs/howto/shedding.md: fewer make its median noisy and the limit jump).
SAMPLE_INTERVAL = 0.5
ATTEMPTS = 3


def bound(unloaded_p99: float) -> float:
    """Near the unloaded p99: under twice it, plus 50 ms for a loaded machine.

    Unloaded (4 in flight) is about 150 ms, so the bound is about 350 ms; at the cap of 8
    admitted requests take about 250 ms; with all 16 in flight, about 450 ms.
    """
    return 2 * unloaded_p99 + 0.050


def attempt(server: ShedServer) -> dict:
    unloaded = load(server.port, 4, 4.0)
    server.json("/health/peak/?reset=1")
    before = server.json("/health/stats/")
    health: list[int] = []
    stop = threading.Event()

    def probe() -> None:
        for _ in range(500):  # at most 500 probes, 20 ms apart
            if stop.is_set():
                return
            health.append(get(server.port, "/health/")[0])
            time.sleep(0.02)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    over = load(server.port, CLIENTS, SETTLE + 3.0)
    stop.set()
    prober.join(15)
    after = server.json("/health/stats/")
    unloaded_ok = [r.latency for r in unloaded if r.status == 200]
    return {"unloaded": unloaded, "over": over, "health": health, "peak": server.json("/health/peak/")["peak"],
            "shed_counted": after["shed"] - before["shed"], "stats": after, "unloaded_p99": p99(unloaded_ok),
            "unloaded_p50": percentile(unloaded_ok, 0.5),
            "admitted": [r.latency for r in over if r.status == 200 and r.at >= SETTLE],
            "shed": [r for r in over if r.status == 503]}


@pytest.mark.parametrize("mode, max_in_flight", [("fixed", CAP), ("adaptive", CLIENTS)])
def test_admitted_p99_stays_near_unloaded_and_the_rest_are_fast_503s(mode, max_in_flight):
    # adaptive: max_in_flight alone would shed nothing at 16 clients; the gradient limit must.
    seen_timing = []
    with ShedServer(mode, max_in_flight, sample_interval=SAMPLE_INTERVAL) as server:
        load(server.port, 4, 1.5)  # warm up (the adaptive limit measures its minRTT here)
        for _ in range(ATTEMPTS):
            seen = attempt(server)
            unloaded, over, shed = seen["unloaded"], seen["over"], seen["shed"]
            assert {r.status for r in unloaded} == {200}, "the unloaded phase was shed"
            assert {r.status for r in over} <= {200, 503}
            assert len(seen["admitted"]) >= 20 and len(shed) >= len(over) // 10, (len(seen["admitted"]), len(shed))
            assert all(r.retry_after == "1" and json.loads(r.body)["error"] == "overloaded" for r in shed)
            assert seen["health"] and set(seen["health"]) == {200}  # exempt: never shed
            assert seen["peak"] <= max_in_flight  # measured inside the view
            assert seen["shed_counted"] == len(shed) and seen["stats"]["in_flight"] == 0
            if mode == "adaptive":
                assert seen["stats"]["min_rtt"] is not None and seen["stats"]["limit"] < max_in_flight
            timing = (p99(seen["admitted"]), seen["unloaded_p99"],
                      percentile([r.latency for r in shed], 0.5), seen["unloaded_p50"])
            seen_timing.append(timing)
            if timing[0] < bound(timing[1]) and timing[2] < timing[3] / 2:  # a 503 costs no view
                return
    pytest.fail(f"(admitted p99, unloaded p99, 503 p50, unloaded p50) in every attempt: {seen_timing}")


def test_without_shedding_the_same_overload_breaks_the_bound():
    # The median, not the p99, of admitted requests: noise cannot push it over the bound.
    seen_timing = []
    with ShedServer("off", CAP) as server:
        load(server.port, 4, 1.5)
        for _ in range(ATTEMPTS):
            seen = attempt(server)
            assert {r.status for r in seen["over"]} == {200}
            assert seen["peak"] > CAP
            timing = (percentile(seen["admitted"], 0.5), seen["unloaded_p99"])
            seen_timing.append(timing)
            if timing[0] > bound(timing[1]):
                return
    pytest.fail(f"(admitted p50, unloaded p99) in every attempt: {seen_timing}")
