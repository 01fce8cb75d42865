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
import json
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
    parser.add_argument("--json", default="benchmarks/results/shedding.json",
                        help="where to store the summary the figure is drawn from ('' for none)")
    parser.add_argument("--plot-only", action="store_true", help="measure nothing: redraw from --json")
    args = parser.parse_args()
    if args.plot_only:
        with open(args.json) as stored:
            summary = json.load(stored)
        plot(summary, args.plot)
        print(f"plot: {args.plot}")
        return
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
    summary = {"slo": slo, "cap": CAP, "seconds": args.seconds, "modes": {
        name: {str(clients): {"p50": percentile(row["admitted"], 0.5), "p99": row["p99"], "goodput": row["goodput"],
                              "admitted_per_s": len(row["admitted"]) / row["seconds"],
                              "shed_per_s": len(row["shed"]) / row["seconds"], "limit": row["limit"],
                              "peak": row["peak"]} for clients, row in levels.items()}
        for name, levels in runs.items()}}
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as out:
            json.dump(summary, out, indent=1)
    if args.plot:
        plot(summary, args.plot)
        print(f"plot: {args.plot}")


def plot(summary: dict, path: str) -> None:
    """Two stacked panels (``benchmarks.figstyle``). One run per load level, no rounds: the
    latency panel's whiskers span the admitted requests' p50 to their p99 (the line)."""
    from benchmarks.figstyle import figure

    fig, (top, bottom) = figure(2, height=3.3, sharex=True)
    slo, cap = summary["slo"], summary["cap"]
    for name, levels in summary["modes"].items():
        x = [int(clients) / cap for clients in levels]
        p99s = [row["p99"] * 1000 for row in levels.values()]
        low = [p - row["p50"] * 1000 for p, row in zip(p99s, levels.values(), strict=True)]
        top.errorbar(x, p99s, yerr=[low, [0] * len(low)], marker="o", capsize=3, label=name)
        bottom.plot(x, [row["goodput"] for row in levels.values()], marker="o", label=name)
    top.axhline(slo * 1000, color="grey", linestyle="--", label="SLO")
    top.set(ylabel="ms", title="Latency of admitted requests: p99 (whisker down to p50)")
    bottom.set(xlabel="offered load (clients / fixed cap)", ylabel="per second",
               title="Goodput: admitted within the SLO")
    for axis in (top, bottom):
        axis.grid(alpha=0.3)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
