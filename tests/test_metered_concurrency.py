"""8 processes reserving and settling on one key never have more than the burst out at
any instant (real redis-server): each reserves a unit, then refunds it (``settle(0)``, as
``count_when`` false does) or keeps it (``settle(1)``). The rate is one a day, so over the
run only the burst (and refunds) admit."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from tests.support.workers import reserve_and_settle

pytestmark = [pytest.mark.redis, pytest.mark.slow]

PROCESSES, DURATION, BURST = 8, 2.0, 5
GCRA = {"POLICIES": {"p": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/d", "burst": BURST}]}}}


def test_eight_processes_reserving_and_settling_never_exceed_the_burst(redis_server):
    client = redis_server.client()
    client.flushall()
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0  # time for the spawned interpreters to import Django
    with ctx.Pool(PROCESSES) as pool:
        results = pool.starmap(reserve_and_settle, [(redis_server.url, GCRA, "p", {"ip": "hot"}, start_at,
                                                     DURATION, seed) for seed in range(PROCESSES)])
    admitted = sum(r[0] for r in results)
    kept = sum(r[1] for r in results)
    most = max(r[2] for r in results)
    calls = sum(r[3] for r in results)
    print(f"admitted {admitted} of {calls} calls, kept {kept}, most outstanding {most}")
    assert kept <= BURST  # what was kept never exceeds the burst
    assert most <= BURST  # nor, at any instant, what was out (reserved or kept)
    assert admitted > 2 * BURST  # refunds admitted others: the key was really shared
    assert calls > admitted  # and contended
    # The store agrees: as many units out as were kept.
    from django_gcra.algorithm import gcra

    [key] = client.keys("rl:*:p:ip:*")  # the limit's key (the policy p, its limit ip)
    tat = int(client.get(key))
    now_s, now_us = client.time()
    now = now_s * 1_000_000 + now_us
    assert BURST - gcra(tat, now, 86_400_000_000, BURST, 0).remaining == kept
