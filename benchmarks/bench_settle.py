"""What settling a metered cost costs, against a plain decision, in one run.

    .venv/bin/python benchmarks/bench_settle.py [--requests 2000] [--max-seconds 20]

Starts a redis-server on loopback. For each case, ``--requests`` requests on fresh keys
(spread over 100 tenants; one hot tenant for the leased cases), measured by Redis itself (``INFO commandstats``: calls
and usec of EVALSHA) and by the client's wall clock:

- plain: ``decide(cost=1)``, nothing settled (the baseline);
- settled: ``decide(cost=50)`` then ``settle(actual)`` with an actual that differs (a
  refund, one more script call);
- settled, estimate right: ``settle(50)`` on a decision of ``cost=50`` (no call at all);
- quota + rate: the same, on a policy of a GCRA limit and a calendar quota (both moved
  by one settle call);
- leased: a leased single-limit policy on one hot key, ``decide()`` then ``settle(0)``:
  decisions are served from the lease, the settle goes to the store.

Printed: per request, round trips (script calls), Redis time in us, client wall time in
us, and each as a ratio to the plain decision. Bounded by --requests and --max-seconds
per case (the cases interleaved in 10 rounds).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.servers import start_redis  # noqa: E402
from tests.support.workers import setup_django  # noqa: E402

POLICIES = {
    "plain": {"limits": [{"name": "tpm", "key": ["tenant"], "rate": "100000/m", "burst": 100000}]},
    "quota": {"limits": [{"name": "tpm", "key": ["tenant"], "rate": "100000/m", "burst": 100000},
                         {"name": "month", "key": ["tenant"], "algorithm": "quota", "quota": 10**9,
                          "period": "month", "tz": "Europe/Paris"}]},
    "leased": {"limits": [{"name": "k", "key": ["tenant"], "rate": "100000/s", "burst": 10000}],
               "lease": {"size": 100, "ttl": 1.0}},
}


def evalsha(client) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return stats.get("calls", 0), stats.get("usec", 0)


def run_case(client, name: str, policy: str, cost: int, actual: int | None, requests: int,
             max_seconds: float) -> dict:
    from django_gcra import decide

    tenants = ["hot"] if policy == "leased" else [f"t{i}" for i in range(100)]  # a lease serves a hot key
    for tenant in tenants:  # connections and scripts loaded, plans memoized
        d = decide(policy, {"tenant": tenant}, cost=cost)
        if actual is not None:
            d.settle(actual)
    client.config_resetstat()
    calls0, usec0 = evalsha(client)
    start = time.perf_counter()
    deadline = start + max_seconds
    done = 0
    while done < requests and time.perf_counter() < deadline:
        decision = decide(policy, {"tenant": tenants[done % len(tenants)]}, cost=cost)
        if actual is not None:
            decision.settle(actual)
        done += 1
    wall = time.perf_counter() - start
    calls, usec = evalsha(client)
    return {"case": name, "requests": done, "calls": (calls - calls0) / done, "redis_us": (usec - usec0) / done,
            "wall_us": wall / done * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    args = parser.parse_args()
    server = start_redis()
    try:
        setup_django(server.url, {"POLICIES": POLICIES, "DESCRIPTORS": {"tenant": "benchmarks.bench_settle.tenant"}})
        rows = compare(server.client(), args.requests, args.max_seconds)
    finally:
        server.stop()
    print(table(rows))


CASES = [
    ("plain decision", "plain", 1, None),
    ("decision + settle (refund)", "plain", 50, 20),
    ("decision + settle (estimate right)", "plain", 50, 50),
    ("quota + rate, plain", "quota", 1, None),
    ("quota + rate, + settle", "quota", 50, 20),
    ("leased, plain", "leased", 1, None),
    ("leased, + settle", "leased", 1, 0),
]


def compare(client, requests: int, max_seconds: float, rounds: int = 10) -> list[dict]:
    """Every case of ``CASES``, interleaved in ``rounds`` rounds (a shared machine's load
    then weighs on every case alike), on the configured store (``client``: its INFO)."""
    totals: dict[str, dict] = {}
    for _ in range(rounds):
        for name, policy, cost, actual in CASES:
            row = run_case(client, name, policy, cost, actual, max(1, requests // rounds), max_seconds / rounds)
            total = totals.setdefault(name, {"case": name, "requests": 0, "calls": 0.0, "redis_us": 0.0,
                                             "wall_us": 0.0})
            n = row["requests"]
            total["requests"] += n
            for field in ("calls", "redis_us", "wall_us"):
                total[field] += row[field] * n
    for total in totals.values():
        for field in ("calls", "redis_us", "wall_us"):
            total[field] /= total["requests"]
    return list(totals.values())


def table(rows: list[dict]) -> str:
    base = rows[0]
    lines = [(f"{'case':38} {'n':>6} {'calls/req':>10} {'redis us/req':>13} {'wall us/req':>12} "
             f"{'x calls':>8} {'x redis':>8} {'x wall':>7}")]
    for row in rows:
        lines.append(f"{row['case']:38} {row['requests']:>6} {row['calls']:>10.2f} {row['redis_us']:>13.1f} "
                     f"{row['wall_us']:>12.1f} {row['calls'] / base['calls']:>8.2f} "
                     f"{row['redis_us'] / max(base['redis_us'], 1e-9):>8.2f} "
                     f"{row['wall_us'] / base['wall_us']:>7.2f}")
    return "\n".join(lines)


def tenant(request):  # (the descriptor the settings name; decide() is called with its value)
    return None


if __name__ == "__main__":
    main()
