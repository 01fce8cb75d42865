"""4 processes hammering one sliding key (real redis-server), judged by the Redis clock of
each admitted decision: the log never admits more than N in any rolling period; the
weighted window never more than 2N, and about N per period under steady overload."""

from __future__ import annotations

import bisect
import multiprocessing
import time

import pytest

from tests.support.workers import hammer_times

pytestmark = [pytest.mark.redis, pytest.mark.slow]

PROCESSES, DURATION = 4, 3.0
N, PERIOD_US = 40, 1_000_000  # 40 per second


def run(url: str, algorithm: str) -> tuple[list[int], int]:
    gcra = {"POLICIES": {"p": {"limits": [{"name": "ip", "key": ["ip"], "rate": f"{N}/s", "algorithm": algorithm}]}}}
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0  # time for the spawned interpreters to import Django
    with ctx.Pool(PROCESSES) as pool:
        results = pool.starmap(hammer_times, [(url, gcra, "p", {"ip": "hot"}, start_at, DURATION)] * PROCESSES)
    return sorted(t for times, _ in results for t in times), sum(calls for _, calls in results)


def most_in_any_period(times: list[int]) -> int:
    """The most admissions in any window (t - period, t] (the densest window ends at an admission)."""
    return max(i + 1 - bisect.bisect_right(times, t - PERIOD_US) for i, t in enumerate(times))


def test_sliding_log_never_more_than_n_in_any_rolling_period(redis_server):
    redis_server.client().flushall()
    times, calls = run(redis_server.url, "sliding_log")
    print(f"sliding log: {len(times)} admitted of {calls} calls; densest period {most_in_any_period(times)}")
    assert calls > 4 * len(times)  # the key was really contended
    assert most_in_any_period(times) == N  # reached, never passed


def test_weighted_window_at_most_2n_and_about_n_per_period(redis_server):
    redis_server.client().flushall()
    times, calls = run(redis_server.url, "sliding_window")
    densest = most_in_any_period(times)
    span = (times[-1] - times[0]) / PERIOD_US
    print(f"weighted window: {len(times)} admitted of {calls} calls over {span:.2f} periods; densest {densest}")
    assert calls > 4 * len(times)
    assert N <= densest <= 2 * N
    # Steady overload: the admissions after the first period average about N per period.
    settled = [t for t in times if t >= times[0] + PERIOD_US]
    per_period = len(settled) / ((times[-1] - times[0] - PERIOD_US) / PERIOD_US)
    assert 0.8 * N <= per_period <= 1.25 * N, per_period
