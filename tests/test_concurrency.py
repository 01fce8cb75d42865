"""8 processes on one key never admit more than burst + elapsed/interval + 1 (real redis-server)."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from tests.support.workers import hammer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

PROCESSES, DURATION = 8, 3.0
RATE, BURST = 50, 10  # per second
GCRA = {"POLICIES": {"p": {"limits": [{"name": "ip", "key": ["ip"], "rate": f"{RATE}/s", "burst": BURST}]}}}


def run_workers(url: str, gcra: dict, policy: str, descriptors: dict) -> tuple[int, int, float]:
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0  # time for the spawned interpreters to import Django
    with ctx.Pool(PROCESSES) as pool:
        results = pool.starmap(hammer, [(url, gcra, policy, descriptors, start_at, DURATION)] * PROCESSES)
    admitted = sum(r[0] for r in results)
    calls = sum(r[1] for r in results)
    elapsed = max(r[3] for r in results) - min(r[2] for r in results)
    return admitted, calls, elapsed


def test_eight_processes_one_key(redis_server):
    redis_server.client().flushall()
    admitted, calls, elapsed = run_workers(redis_server.url, GCRA, "p", {"ip": "hot"})
    bound = BURST + elapsed * RATE + 1
    print(f"admitted {admitted} of {calls} calls in {elapsed:.2f}s; bound {bound:.1f}")
    assert calls > 4 * admitted  # the key was really contended
    assert admitted <= bound
    assert admitted >= 0.9 * bound
