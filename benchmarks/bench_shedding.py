"""Load shedding under overload: goodput and p99 of admitted requests without shedding,
with a fixed cap and with the adaptive (gradient) limit, from one run.

    .venv/bin/python benchmarks/bench_shedding.py [--seconds 3] [--plot docs/img/shedding.png]

Each mode gets its own gunicorn (gthread, 64 threads, one worker) on a loopback port,
serving the view of tests/shedding_urls.py that sleeps 50 ms + 25 ms per request in flight
(its latency grows with load, as a server's does when its requests compete). Closed-loop
clients (threads, one request at a time; 100 ms pause after a 503) run at 0.5x, 1x, 2x and
3x the fixed cap of 8. Latencies count after a settling time (the adaptive limit moves).
Goodput is admitted responses within the SLO per second; the SLO is twice the unloaded
median of the run without shedding, plus 50 ms (the median: one stall of a shared machine
in that phase would move a p99, and every goodput with it). The
adaptive mode's max_in_flight is 64, the default: the limit it reaches is its own; its
sample_interval is 0.5 s (a window of about ten completions at these latencies).
Bounded: every phase is ``--seconds`` (plus settling) and at most 5000 requests.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.shedload import ShedServer, load, p99, percentile

CAP = 8
LEVELS = (4, 8, 16, 24)  # clients: 0.5x, 1x, 2x, 3x the fixed cap
# The adaptive limit's sample_interval is 0.5 s here: at these latencies (150-650 ms) the
# default 0.1 s window holds two or three completions, and its median jumps.
MODES = {"none": ("off", CAP), "fixed cap 8": ("fixed", CAP), "adaptive (max 64)": ("adaptive", 64)}
SAMPLE_INTERVAL = 0.5
SETTLE = 1.5


def measure(mode: str, max_in_flight: int, seconds: float) -> dict[int, dict]:
    out = {}
    with ShedServer(mode, max_in_flight, sample_interval=SAMPLE_INTERVAL) as server:
        load(server.port, 4, 1.5)  # warm up; the adaptive limit measures its minRTT
        for clients in LEVELS:
            results = load(server.port, clients, SETTLE + seconds)
            counted = [r for r in results if r.at >= SETTLE]
            admitted = [r.latency for r in counted if r.status == 200]
            shed = [r.latency for r in counted if r.status == 503]
            stats = server.json("/health/stats/")
            out[clients] = {"admitted": admitted, "shed": shed, "seconds": seconds, "limit": stats["limit"],
                            "peak": server.json("/health/peak/?reset=1")["peak"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per load level")
    parser.add_argument("--plot", default="docs/img/shedding.png", help="where to write the figure ('' for none)")
    args = parser.parse_args()
    runs = {name: measure(mode, cap, args.seconds) for name, (mode, cap) in MODES.items()}
    slo = 2 * percentile(runs["none"][LEVELS[0]]["admitted"], 0.5) + 0.050
    print(f"view: 50 ms + 25 ms per request in flight; fixed cap {CAP}; SLO {slo * 1000:.0f} ms "
          f"(2 x unloaded p50 + 50 ms); {args.seconds:g} s per level after {SETTLE:g} s settling")
    print(f"{'mode':<18} {'clients':>7} {'admitted/s':>10} {'goodput/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'503/s':>6} {'503 p99 ms':>10} {'limit':>5} {'peak':>4}")
    for name, levels in runs.items():
        for clients, row in levels.items():
            admitted, seconds = row["admitted"], row["seconds"]
            row["goodput"] = sum(latency <= slo for latency in admitted) / seconds
            row["p99"] = p99(admitted)
            print(f"{name:<18} {clients:>7} {len(admitted) / seconds:>10.1f} {row['goodput']:>9.1f} "
                  f"{percentile(admitted, 0.5) * 1000:>7.0f} {row['p99'] * 1000:>7.0f} "
                  f"{len(row['shed']) / seconds:>6.1f} "
                  f"{(p99(row['shed']) * 1000 if row['shed'] else float('nan')):>10.1f} "
                  f"{row['limit'] if name != 'none' else '-':>5} {row['peak']:>4}")
    if args.plot:
        plot(runs, slo, args.plot)
        print(f"plot: {args.plot}")


def plot(runs: dict, slo: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, levels in runs.items():
        x = [clients / CAP for clients in levels]
        left.plot(x, [row["p99"] * 1000 for row in levels.values()], marker="o", label=name)
        right.plot(x, [row["goodput"] for row in levels.values()], marker="o", label=name)
    left.axhline(slo * 1000, color="grey", linestyle="--", label="SLO")
    left.set(xlabel="offered load (clients / fixed cap)", ylabel="p99 of admitted requests (ms)",
             title="Latency of admitted requests")
    right.set(xlabel="offered load (clients / fixed cap)", ylabel="admitted within the SLO per second",
              title="Goodput")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
