"""Redis time per decision of the composite script, per algorithm, against an older version of it.

    .venv/bin/python -m benchmarks.bench_script [--baseline main] [--calls 1500] [--rounds 5]

Runs the shipped ``django_gcra/backends/gcra.lua`` and the same file at ``--baseline``
(a git revision) on one private redis-server, on the workloads of ``bench_peers``: one
limit on a hot key, and two (tenant + user: 10 tenants, 10,000 users), for GCRA
(100,000/s, burst 1,000), the sliding log (10,000/s) and the weighted window
(100,000/s), every decision admitted. Redis time is ``INFO commandstats``' ``usec`` of
EVALSHA (the script and the commands it runs) per call, the median of alternating rounds,
and the median of every call's own time from the slow log (logging every command), which
a busy machine's preemptions move less; then the ratio new/baseline of the per-round
means, median and spread. Calls are sent one at a time, as a limiter does; the two
versions take turns going first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.support.servers import start_redis

SCRIPT = Path(__file__).resolve().parent.parent / "django_gcra" / "backends" / "gcra.lua"
SECOND = 1_000_000
# (flag, a, b) per algorithm: GCRA interval and burst; sliding period and N.
LIMITS = {"gcra": ("1", SECOND // 100_000, 1_000), "log": ("3", SECOND, 10_000), "window": ("5", SECOND, 100_000)}
KEYS = 10_000


def baseline_text(rev: str) -> str:
    root = SCRIPT.parent.parent.parent
    return subprocess.run(["git", "show", f"{rev}:django_gcra/backends/gcra.lua"], cwd=root, check=True,
                          capture_output=True, text=True).stdout


def case(algorithm: str, two: bool, prefix: str) -> Callable[[int], tuple[list[str], list]]:
    flag, a, b = LIMITS[algorithm]
    if not two:
        return lambda i: ([f"{prefix}:{algorithm}:{{hot}}"], [1, a, b, flag])

    def keys(i: int) -> tuple[list[str], list]:
        tenant = f"t{i % 10}"
        return ([f"{prefix}:{algorithm}:{{{tenant}}}", f"{prefix}:{algorithm}:{{{tenant}}}:w{i % KEYS}"],
                [1, a, b, flag, a, b, flag])

    return keys


def evalsha_usec(client) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return stats["calls"], stats["usec"]


def slow_log_us(client, n: int) -> list[int]:
    """The last ``n`` EVALSHA calls' own times (us), from the slow log."""
    return [e["duration"] for e in client.slowlog_get(n + 10) if e["command"].startswith(b"EVALSHA")][:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="main", help="git revision of the script to compare with")
    parser.add_argument("--calls", type=int, default=1500, help="calls per round and case")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    server = start_redis()
    try:
        client = server.client()
        client.config_set("slowlog-log-slower-than", 0)  # every command, with its time
        client.config_set("slowlog-max-len", max(128, args.calls + 100))
        scripts = {"new": client.register_script(SCRIPT.read_text(encoding="utf-8")),
                   "base": client.register_script(baseline_text(args.baseline))}
        names = [(alg, two) for alg in LIMITS for two in (False, True)]
        usec: dict[tuple[str, str, bool], list[float]] = {(v, *n): [] for v in scripts for n in names}
        each: dict[tuple[str, str, bool], list[int]] = {k: [] for k in usec}
        denied = dict.fromkeys(usec, 0)
        offset = 0
        for r in range(args.rounds):  # alternating, so load hits both versions alike
            for alg, two in names:
                for version in (("new", "base") if r % 2 else ("base", "new")):
                    script = scripts[version]
                    work = case(alg, two, version)  # each version its own keys
                    client.slowlog_reset()
                    calls0, usec0 = evalsha_usec(client)
                    for i in range(offset, offset + args.calls):
                        keys, argv = work(i)
                        denied[(version, alg, two)] += script(keys=keys, args=argv)[0] != 1
                    calls1, usec1 = evalsha_usec(client)
                    usec[(version, alg, two)].append((usec1 - usec0) / (calls1 - calls0))
                    each[(version, alg, two)] += slow_log_us(client, args.calls)
            offset += args.calls
        print(f"redis-server {client.info('server')['redis_version']}; {args.rounds} rounds x {args.calls} calls; "
              f"baseline {args.baseline}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"{'case':<16}{'base us':>9}{'new us':>9}{'  calls, median':>18}{'new/base':>10}"
              f"{'  (per-round ratios: min-max)'}")
        for alg, two in names:
            base, new = usec[("base", alg, two)], usec[("new", alg, two)]
            ratios = [n / b for n, b in zip(new, base)]
            label = f"{alg} {'two' if two else 'one'}"
            med_b, med_n = statistics.median(each[("base", alg, two)]), statistics.median(each[("new", alg, two)])
            print(f"{label:<16}{statistics.median(base):>9.1f}{statistics.median(new):>9.1f}"
                  f"{med_b:>8.0f}/{med_n:<9.0f}{statistics.median(ratios):>8.2f}  ({min(ratios):.2f}-{max(ratios):.2f})")
        if any(denied.values()):
            print("denied (the workload should admit all):", {k: v for k, v in denied.items() if v})
    finally:
        server.stop()


if __name__ == "__main__":
    main()
