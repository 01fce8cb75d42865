"""Is the direct runner worth its code? decide() with it against decide() through redis-py.

    .venv/bin/python -m benchmarks.bench_paths [--ops 4000] [--rounds 7] [--seconds 120]

The sync store path writes the decision's EVALSHA with hiredis on the connection's socket
and parses the reply with a hiredis reader of its own (``backends/direct.py``); without
it, the same EVALSHA goes through redis-py's ``Redis.evalsha`` on the same pool. Both
contenders decide one hot key and 10,000 keys (one GCRA limit, unleased) on one loopback
redis-server, alternating in rounds (their order swapped every round), bounded in count
and time. Prints decisions per second (medians) and the ratio direct / redis-py; the
project keeps a path that bypasses redis-py only while this ratio is above 1.05.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tests.support.servers import start_redis
from tests.support.workers import setup_django

POLICIES = {"one": {"limits": [{"name": "user", "key": ["user"], "rate": "100000/s", "burst": 1000}]}}
N_KEYS = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=4000, help="decisions per round and contender")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=120.0, help="a bound on the whole run")
    args = parser.parse_args()

    server = start_redis()
    try:
        setup_django(server.url, {"POLICIES": POLICIES})
        from django_gcra import decide
        from django_gcra.backends import direct

        with_runner = direct.runner_for

        def through_redis_py(pool):
            return None  # evalsha() then calls redis-py's Redis.evalsha

        def run(path: str, keys: str) -> float:
            from django_gcra.engine import retire

            retire()  # a new engine, whose backend looks its runner up again
            direct.runner_for = with_runner if path == "direct" else through_redis_py
            try:
                decide("one", {"user": "warm"})  # (its runner made now)
                start = time.perf_counter()
                for i in range(args.ops):
                    decide("one", {"user": "hot" if keys == "hot" else f"u{i % N_KEYS}"})
                return args.ops / (time.perf_counter() - start)
            finally:
                direct.runner_for = with_runner

        for path in ("direct", "redis-py"):  # connect, load the script
            run(path, "hot")
        rates: dict[tuple[str, str], list[float]] = {}
        deadline = time.monotonic() + args.seconds
        for r in range(args.rounds):
            order = ["direct", "redis-py"] if r % 2 == 0 else ["redis-py", "direct"]
            for keys in ("hot", "10k keys"):
                for path in order:
                    rates.setdefault((path, keys), []).append(run(path, keys))
            if time.monotonic() > deadline:
                break
        print(f"redis-server on 127.0.0.1, {len(rates[('direct', 'hot')])} rounds x {args.ops} decisions, "
              "medians of decisions/s")
        for keys in ("hot", "10k keys"):
            d, p = (statistics.median(rates[(path, keys)]) for path in ("direct", "redis-py"))
            print(f"{keys:9}  direct runner {d:9,.0f}   through redis-py {p:9,.0f}   direct / redis-py {d / p:5.2f}x")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
