"""64 concurrent ``adecide()`` on one event loop against one EVALSHA per task through
``redis.asyncio``, on a loopback redis-server this script starts; a hot key and 10,000 keys.

    .venv/bin/python benchmarks/bench_async.py [--tasks 64] [--rounds 5] [--seconds 0.5]

Both sides run the project's script with the same arguments, so Redis does the same
work; they differ in the client. The baseline is what an async view would write by
hand: ``await client.evalsha(...)`` per decision on a ``redis.asyncio.Redis`` (its own
pool: one connection per concurrent task). ``adecide`` is the whole decision (plan,
keys, the multiplexed EVALSHA, Decision) on the limiter's pool, pipelined over at most
``ASYNC_LANES`` connections. Connections: the connections Redis accepted during the
round (``total_connections_received``), and the most the limiter's pool held at once.
Every round is bounded in decisions and in time; the cases alternate within each round,
and the medians and ranges of the rounds are shown, with the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.servers import start_redis
from tests.support.workers import setup_django

KEYS = 10_000
POLICIES = {"wide": {"limits": [{"name": "k", "key": ["ip"], "rate": "1000000/s", "burst": 1000000}]}}


def key_of(case: str, i: int) -> str:
    return "hot" if case == "hot" else f"u{i % KEYS}"


async def run_tasks(one, tasks: int, seconds: float, max_decisions: int) -> tuple[int, float]:
    """``tasks`` coroutines, each deciding in a loop until the shared budget is spent."""
    done = 0
    deadline = time.perf_counter() + seconds
    per_task = max_decisions // tasks

    async def worker(w: int) -> None:
        nonlocal done
        for n in range(per_task):
            if n % 16 == 0 and time.perf_counter() > deadline:
                return
            await one(w * per_task + n)
            done += 1

    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(tasks))), seconds + 30)
    return done, time.perf_counter() - start


async def measure(url: str, args) -> dict:
    import redis.asyncio

    from django_gcra import adecide
    from django_gcra.backends.multiplex import ASYNC_LANES
    from django_gcra.backends.redis import SCRIPT, SCRIPT_SHA, script_args
    from django_gcra.engine import current

    sync = redis.Redis.from_url(url)
    raw = redis.asyncio.Redis.from_url(url)
    await raw.script_load(SCRIPT)
    results: dict[tuple[str, str], list[tuple[float, int]]] = {}
    peak = 0
    for _ in range(args.rounds):
        for case in ("hot", "10k"):
            # the same keys and arguments the limiter sends for these decisions
            specs = {i: current().plan("wide", {"ip": key_of(case, i)}).specs for i in range(1 if case == "hot" else KEYS)}

            async def baseline(i: int, case: str = case, specs: dict = specs) -> None:
                s = specs[0 if case == "hot" else i % KEYS]
                await raw.evalsha(SCRIPT_SHA, 1, s[0].key, *script_args(s, 1))

            async def limiter(i: int, case: str = case) -> None:
                decision = await adecide("wide", {"ip": key_of(case, i)})
                assert not decision.fallback, "a fallback decision: Redis did not answer"

            for name, one in (("redis.asyncio", baseline), ("adecide", limiter)):
                await one(0)  # connect, off the clock
                before = sync.info("stats")["total_connections_received"]
                n, elapsed = await run_tasks(one, args.tasks, args.seconds, args.max_decisions)
                opened = sync.info("stats")["total_connections_received"] - before
                results.setdefault((name, case), []).append((n / elapsed, opened))
            pool = current().stores.async_client("default").connection_pool
            peak = max(peak, len(pool._available_connections) + len(pool._in_use_connections))
    await raw.aclose()
    return {"results": results, "peak": peak, "lanes": ASYNC_LANES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="per case and round")
    parser.add_argument("--max-decisions", type=int, default=100_000, help="per case and round")
    args = parser.parse_args()
    server = start_redis()
    try:
        setup_django(server.url, {"POLICIES": POLICIES})
        r = asyncio.run(measure(server.url, args))
    finally:
        server.stop()
    res = r["results"]
    print(f"redis-server on 127.0.0.1; {args.tasks} concurrent tasks on one event loop; {args.rounds} rounds of "
          f"{args.seconds}s or {args.max_decisions} decisions per case; median [min-max] of the rounds")
    print(f"{'case':<5}{'client':<15}{'decisions/s':>12}{'[min-max]':>20}{'connections':>13}")
    for (name, case), rows in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0] != "redis.asyncio")):
        rates = [x for x, _ in rows]
        print(f"{case:<5}{name:<15}{statistics.median(rates):>12,.0f}{f'[{min(rates):,.0f}-{max(rates):,.0f}]':>20}"
              f"{max(o for _, o in rows):>13}")
    for case in ("hot", "10k"):
        ratios = [a / b for (a, _), (b, _) in zip(res[("adecide", case)], res[("redis.asyncio", case)])]
        print(f"adecide / redis.asyncio ({case}): {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] "
              "(target >= 3x)")
    print(f"connections: the most opened in one round (Redis's count); the limiter's pool held at most "
          f"{r['peak']} (lanes: {r['lanes']}; target <= 4)")


if __name__ == "__main__":
    main()
