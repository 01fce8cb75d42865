"""Leases on a hot key: store commands per decision and decisions per second, leased
against unleased and against the bare script (the seed's, one EVALSHA per decision
through redis-py), measured in the same run on a loopback redis-server this script
starts; and a leased policy on 10,000 cold keys against the unleased one.

    .venv/bin/python benchmarks/bench_leases.py [--seconds 1.5] [--max-decisions 50000] [--cold-only] [--full-memo]

Store commands are the EVALSHA calls counted by the server (INFO commandstats deltas);
that count is server-side, so it includes any NOSCRIPT retry (the script is loaded
before timing starts, so there are none). Each path runs one thread, bounded in count
and time, calling ``decide()`` (plan, keys, backend, Decision) exactly as a view would.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_core import BARE_SCRIPT
from tests.support.servers import start_redis
from tests.support.workers import setup_django

UNDER = {"rate": "1000000/s", "burst": 1000}  # the hot key stays under its limit
OVER = {"rate": "2000/s", "burst": 100}  # the hot key is far over its limit
LIMITS = {"under": UNDER, "over": OVER}
# path -> (lease size, low_water); size None is the unleased path
PATHS = {"plain": (None, 0), "L=10": (10, 0), "L=10+pre": (10, 3), "L=50": (50, 0), "L=50+pre": (50, 10)}
COLD_KEYS = 10_000  # the cold scenario: every decision on the next of these keys, round robin


def policies() -> dict:
    out = {}
    for scenario, limit in LIMITS.items():
        for path, (size, low_water) in PATHS.items():
            policy: dict = {"limits": [{"name": "k", "key": ["ip"], **limit}]}
            if size:
                policy["lease"] = {"size": size, "ttl": 1.0, "low_water": low_water}
            out[f"{scenario}-{path.replace('=', '').replace('+', '-')}"] = policy
    out["under-plain2"] = dict(out["under-plain"])  # the A/A control of the interleaved cold keys
    return out


def evalsha(client) -> int:
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def run(client, policy: str, key: str, seconds: float, max_decisions: int, cold: bool = False
        ) -> tuple[int, int, int, float]:
    from django_gcra import decide

    decide(policy, {"ip": "warm"}, cost=0)  # load the script and connect, off the clock
    time.sleep(0.05)
    before = evalsha(client)
    admitted = n = 0
    keys = [f"{key}:{i}" for i in range(COLD_KEYS)] if cold else [key]
    start = time.perf_counter()
    deadline = start + seconds
    while n < max_decisions and (n % 256 or time.perf_counter() < deadline):
        admitted += decide(policy, {"ip": keys[n % len(keys)]}).allowed
        n += 1
    elapsed = time.perf_counter() - start
    time.sleep(0.05)  # let a background prefetch finish, so its call is counted
    return n, admitted, evalsha(client) - before, elapsed


def run_bare(client, key: str, seconds: float, max_decisions: int) -> tuple[int, int, int, float]:
    """The floor: the seed's script, one EVALSHA per decision through redis-py."""
    script = client.register_script(BARE_SCRIPT)
    keys, args = [f"bare:{{{key}}}"], [1, 1000, 1]  # 1 us interval, burst 1000: always admitted
    script(keys=keys, args=args)
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while n < max_decisions and (n % 256 or time.perf_counter() < deadline):
        script(keys=keys, args=args)
        n += 1
    return n, n, n, time.perf_counter() - start


def cold_rounds(client, args) -> None:
    """A leased policy on keys that never prove hot, against the unleased policy. The plan
    memo (shared by all policies, not refilled for 10 s once full) is emptied
    before each path, so no path inherits another's memoized plans or a full memo, and
    the order of the paths rotates from round to round."""
    from django_gcra.engine import current

    memo = current().planner.memo
    paths = ("plain", "L=10", "L=50")
    rates: dict[str, list[float]] = {path: [] for path in paths}
    leased: dict[str, int] = dict.fromkeys(paths, 0)
    for round_ in range(args.rounds):
        for path in paths[round_ % 3:] + paths[:round_ % 3]:
            memo.clear()
            n, _, calls, elapsed = run(client, f"under-{path.replace('=', '')}", f"cold{round_}", args.seconds,
                                       args.max_decisions, cold=True)
            rates[path].append(n / elapsed)
            leased[path] += calls - n  # store calls beyond one per decision
    print(f"\n{COLD_KEYS:,} cold keys (round robin; a key comes back every {COLD_KEYS:,} decisions): "
          "decisions/s, median [min-max] of rounds; leased/plain: median [min-max] of per-round ratios")
    for path in paths:
        ratios = [x / y for x, y in zip(rates[path], rates["plain"])]
        print(f"  {path:<6} {statistics.median(rates[path]):>9,.0f}/s  [{min(rates[path]):,.0f}-{max(rates[path]):,.0f}]"
              f"  x plain {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
              f"  store calls - decisions: {leased[path]}")


def cold_interleaved(client, args, memo_full: bool = False) -> None:
    """The cold keys again, the paths alternating decision by decision (each timed on its
    own, their order rotating from one decision to the next), so a change in the
    machine's load hits every path alike: per round, the ratio of the summed times (the
    same-run throughput ratio) and of the median decision times (which a stall of the
    machine in one decision does not move); "A/A", a second unleased policy, shows what
    the noise alone gives. ``memo_full``: with the plan memo full (more
    live plans than it holds), so no plan is memoized and a leased key's heat is counted
    in its wrapper's dict."""
    from django_gcra import decide
    from django_gcra.engine import current

    memo = current().planner.memo
    if memo_full:
        size, memo.size = memo.size, 0
        try:
            cold_interleaved(client, args)
        finally:
            memo.size = size
        return

    clock = time.perf_counter_ns
    # "A/A": a second unleased policy, the same limit: the ratio the machine's noise alone gives.
    paths = {"plain": "under-plain", "A/A": "under-plain2", "L=10": "under-L10", "L=50": "under-L50"}
    items = list(paths.items())
    orders = [items[k:] + items[:k] for k in range(len(items))]
    ratios: dict[str, list[float]] = {path: [] for path in paths}
    medians: dict[str, list[float]] = {path: [] for path in paths}
    per = max(1, min(args.max_decisions, 4000))  # every path's plans fit the memo: 4 x 4,000 < 16,384
    for round_ in range(args.rounds):
        memo.clear()
        spent: dict[str, list[int]] = {path: [] for path in paths}
        for i in range(per):
            for path, policy in orders[i % len(orders)]:
                descriptors = {"ip": f"mix{round_}:{i % COLD_KEYS}"}
                before = clock()
                decide(policy, descriptors)
                spent[path].append(clock() - before)
        for path in paths:
            ratios[path].append(sum(spent["plain"]) / sum(spent[path]))
            medians[path].append(statistics.median(spent["plain"]) / statistics.median(spent[path]))
    full = " with the plan memo full" if memo.size == 0 else ""
    print(f"\n{COLD_KEYS:,} cold keys{full}, the paths alternating decision by decision ({per} decisions per path and "
          f"round, {args.rounds} rounds): leased/plain, median [min-max] of the rounds, of the summed times "
          "(decisions/s) and of the median decision times")
    for path in paths:
        r, m = ratios[path], medians[path]
        print(f"  {path:<6} x plain {statistics.median(r):.3f} [{min(r):.3f}-{max(r):.3f}]"
              f"   median decision {statistics.median(m):.3f} [{min(m):.3f}-{max(m):.3f}]")


def hot_interleaved(client, args) -> None:
    """The hot key again (the "under" limit), the paths alternating decision by decision
    with the bare script (each call timed on its own), so a change in the machine's load
    hits every path alike: per round, the bare script's summed time over a path's summed
    time is that path's same-run ratio with the least noise."""
    from django_gcra import decide

    clock = time.perf_counter_ns
    script = client.register_script(BARE_SCRIPT)
    paths = {path: f"under-{path.replace('=', '').replace('+', '-')}" for path in PATHS}
    ratios: dict[str, list[float]] = {path: [] for path in paths}
    per = max(1, min(args.max_decisions, 5000))
    for round_ in range(args.rounds):
        keys, bare_args = [f"bare:{{mix{round_}}}"], [1, 1000, 1]
        script(keys=keys, args=bare_args)
        descriptors = {"ip": f"mixhot{round_}"}
        for policy in paths.values():
            decide(policy, descriptors, cost=0)  # connect, off the clock
        spent = dict.fromkeys(paths, 0)
        bare = 0
        for _ in range(per):
            before = clock()
            script(keys=keys, args=bare_args)
            bare += clock() - before
            for path, policy in paths.items():
                before = clock()
                decide(policy, descriptors)
                spent[path] += clock() - before
        for path in paths:
            ratios[path].append(bare / spent[path])
        time.sleep(0.05)  # let background prefetches settle between rounds
    print(f"\nhot key, the paths alternating decision by decision with the bare script ({per} decisions per path "
          f"and round, {args.rounds} rounds): x bare decisions/s, median [min-max] of the rounds")
    for path in paths:
        r = ratios[path]
        print(f"  {path:<9} x bare {statistics.median(r):5.1f} [{min(r):.1f}-{max(r):.1f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="per path and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over every path (medians are shown)")
    parser.add_argument("--max-decisions", type=int, default=200_000)
    parser.add_argument("--cold-only", action="store_true", help="only the cold-key scenario")
    parser.add_argument("--full-memo", action="store_true",
                        help="the cold keys alternating also with the plan memo full (no plan memoized)")
    parser.add_argument("--interleaved-only", action="store_true",
                        help="only the interleaved runs (hot key against the bare script, cold keys against plain)")
    args = parser.parse_args()
    server = start_redis()
    try:
        setup_django(server.url, {"POLICIES": policies()})
        client = server.client()
        print(f"redis-server on 127.0.0.1:{server.port}; {args.seconds}s or {args.max_decisions} decisions per path and round, "
              f"{args.rounds} rounds, medians; one thread; +pre: low_water = size/5 (background prefetch)\n")
        print(f"{'key':<6} {'path':<9} {'decisions':>9} {'admitted':>9} {'bound':>7} {'evalsha':>8} {'cmd/decision':>12} "
              f"{'target':>8} {'decisions/s':>11} {'x plain':>8} {'x bare':>8} {'[min-max]':>12}\n(totals over rounds; bound: burst + "
              "elapsed x rate + 1 per round, capped at the decisions; decisions/s: median of rounds; x plain, x bare: "
              "median [min-max] of the per-round ratios to decide() unleased and to the bare script)")
        bare: list[float] = [0.0]
        for scenario in () if args.cold_only or args.interleaved_only else ("under", "over"):
            # The machine is shared and its load moves: every round runs all paths back to
            # back, speed-ups are taken within a round, and the medians are shown.
            rows: dict[str, list[tuple[int, int, int, float]]] = {path: [] for path in PATHS}
            ratios: dict[str, list[float]] = {path: [] for path in PATHS}
            to_bare: dict[str, list[float]] = {path: [] for path in PATHS}
            for round_ in range(args.rounds):
                n, _, _, elapsed = run_bare(client, f"{scenario}{round_}", args.seconds, args.max_decisions)
                bare.append(n / elapsed)
                for path in PATHS:
                    policy = f"{scenario}-{path.replace('=', '').replace('+', '-')}"
                    rows[path].append(run(client, policy, f"hot{round_}", args.seconds, args.max_decisions))
                plain = rows["plain"][-1][0] / rows["plain"][-1][3]
                for path in PATHS:
                    ratios[path].append(rows[path][-1][0] / rows[path][-1][3] / plain)
                    to_bare[path].append(rows[path][-1][0] / rows[path][-1][3] / bare[-1])
            per_second, burst = int(LIMITS[scenario]["rate"].split("/")[0]), LIMITS[scenario]["burst"]
            for path, (size, _) in PATHS.items():
                n, admitted, calls = (sum(r[i] for r in rows[path]) for i in range(3))
                # Each round is a fresh key: never more than burst + elapsed * rate + 1 per round.
                bound = sum(burst + r[3] * per_second + 1 for r in rows[path])
                assert admitted <= bound, f"{scenario} {path}: admitted {admitted} > bound {bound:.0f}"
                rate = statistics.median(r[0] / r[3] for r in rows[path])
                target = f"{1 / size:.3f}" if size else ""
                b = to_bare[path]
                print(f"{scenario:<6} {path:<9} {n:>9} {admitted:>9} {min(bound, n):>7.0f} {calls:>8} {calls / n:>12.4f} "
                      f"{target:>8} {rate:>11.0f} {statistics.median(ratios[path]):>7.1f}x {statistics.median(b):>7.1f}x "
                      f"[{min(b):.1f}-{max(b):.1f}]")
        bare = bare[1:] or [0.0]
        if not (args.cold_only or args.interleaved_only):
            print(f"bare script: {statistics.median(bare):,.0f} decisions/s (median) [{min(bare):,.0f}-{max(bare):,.0f}]; "
                  "targets (under, +pre): L=50 >= 20x bare, L=10 >= 6x bare")
        if not args.cold_only:
            hot_interleaved(client, args)
        if not args.interleaved_only:
            cold_rounds(client, args)
        cold_interleaved(client, args)
        if args.full_memo:
            cold_interleaved(client, args, memo_full=True)
        if args.interleaved_only:
            return
        from django_gcra.leases import lease_stats

        print("\nlease counters (this process):")
        for name, stats in sorted(lease_stats().items()):
            print(f"  {name:<14} decisions={stats.decisions} local={stats.local} store_calls={stats.store_calls} "
                  f"saved={stats.calls_saved} leased={stats.leased_units} stranded={stats.stranded_units} "
                  f"held={stats.held_units}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
