"""The figures of ``bench_peers``, drawn with matplotlib (Agg) from one run's results
(``benchmarks/results/peers.json``; ``bench_peers --plot-only`` redraws them from it).

Panels are stacked (``benchmarks.figstyle``: the docs' column width, legible labels).
Where the measurement has rounds (decisions per second, latency percentiles), a bar is the
median over the rounds and its whisker spans the middle half of the rounds (the 25th to
the 75th percentile: on a shared machine the extremes are other jobs' stalls).
"""

from __future__ import annotations

import os
import statistics

from benchmarks.figstyle import SMALL, figure

GCRA_COLOR, PEER_COLOR, FLOOR_COLOR = "#2a7ab9", "#9aa5b1", "#e0a040"


def _color(name: str) -> str:
    if name.startswith("django_gcra"):
        return GCRA_COLOR
    return FLOOR_COLOR if "floor" in name else PEER_COLOR


def _bars(ax, names, values, fmt, xlabel, title, rounds=None):
    """Horizontal bars; with ``rounds`` (one list per bar) the bar is the rounds' median and
    its whisker their interquartile range."""
    y = range(len(names))
    err = None
    if rounds is not None:
        values = [statistics.median(r) for r in rounds]
        quartiles = [statistics.quantiles(r, n=4) if len(r) > 1 else [r[0], r[0], r[0]] for r in rounds]
        err = [[v - q[0] for v, q in zip(values, quartiles, strict=True)],
               [q[2] - v for v, q in zip(values, quartiles, strict=True)]]
    ax.barh(y, values, color=[_color(n) for n in names], xerr=err, error_kw={"ecolor": "#333333", "capsize": 3,
                                                                             "elinewidth": 1})
    ax.set_yticks(list(y), names)
    if not ax.yaxis_inverted():
        ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ends = [v + (err[1][i] if err else 0) for i, v in enumerate(values)]
    for i, v in enumerate(values):
        ax.text(ends[i], i, " " + fmt.format(v), va="center", fontsize=SMALL)
    ax.set_xlim(0, max(ends) * 1.3)
    ax.grid(axis="x", alpha=0.3)


def draw(r: dict, directory: str) -> list[str]:
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    single, two = r["single"], r["two"]
    names = [s["name"] for s in single]
    n = r["config"]["rounds"]
    spread = f"bars: median of {n} rounds; whiskers: 25th to 75th percentile of the rounds"
    paths = []

    def save(fig, name, note=""):
        if note:
            fig.text(0.01, 0.005, note, fontsize=SMALL, color="#555555", ha="left", va="bottom")
        fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
        path = os.path.join(directory, name)
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)

    height = 0.34 * len(names) + 1.4
    where = "one client thread"

    def rounds_of(field):
        return [s.get(field) or [s[field.removesuffix("_rounds")]] for s in single]

    fig, axes = figure(2, height=height)
    _bars(axes[0], names, [s["hot"] for s in single], "{:,.0f}", "decisions per second",
          "Single limit, one hot key (higher is better)", rounds=rounds_of("hot_rounds"))
    _bars(axes[1], names, [s["many"] for s in single], "{:,.0f}", "decisions per second",
          "Single limit, 10,000 keys (higher is better)", rounds=rounds_of("many_rounds"))
    save(fig, "peers-throughput.png", f"{where}; {spread}")

    fig, ax = figure(1, height=0.34 * len(two) + 1.6)
    _bars(ax, [t["name"] for t in two], [t["rate"] for t in two], "{:,.0f}", "decisions per second",
          "Two limits (tenant + user): decisions per second", rounds=[t.get("rate_rounds") or [t["rate"]]
                                                                     for t in two])
    save(fig, "peers-two-limits.png", f"{where}; {spread}")

    fig, axes = figure(2, height=height)
    p50 = [s.get("p50_rounds") or [s["p50_us"]] for s in single]
    p99 = [s.get("p99_rounds") or [s["p99_us"]] for s in single]
    _bars(axes[0], names, [s["p50_us"] for s in single], "{:.0f} µs", "microseconds per decision",
          "p50 latency, hot key (lower is better)", rounds=p50)
    _bars(axes[1], names, [s["p99_us"] for s in single], "{:.0f} µs", "microseconds per decision",
          "p99 latency, hot key (lower is better)", rounds=p99)
    save(fig, "peers-latency.png", f"bars: median of the {n} rounds' percentiles; whiskers: their 25th to 75th")

    fig, axes = figure(2, height=height)
    _bars(axes[0], names, [s["round_trips"] for s in single], "{:.2f}", "commands sent per decision",
          "Round trips (client to Redis), hot key")
    _bars(axes[1], names, [s["server_commands"] for s in single], "{:.2f}", "commands run per decision",
          "Commands Redis runs (scripts' inner calls included)")
    save(fig, "peers-commands.png", "counted over one run (deterministic: no spread); lower is better")

    fig, ax = figure(1, height=height)
    _bars(ax, names, [s["bytes_per_user"] for s in single], "{:.0f} B", "bytes (MEMORY USAGE, all keys of one user)",
          "Redis memory per limited user after 10 decisions")
    save(fig, "peers-memory.png", "averaged over the users of one run; lower is better")

    fig, ax = figure(1, height=height)
    _bars(ax, names, [s["admitted_over_promise"] for s in single], "{:.2f}",
          "admitted / most its own algorithm allows",
          f"{r['config']['processes']} processes on one key for {r['config']['seconds']:.0f} s")
    ax.axvline(1.0, color="#c03030", linewidth=1)
    save(fig, "peers-over-admission.png", "one run; above 1 (the red line) is over-admission")
    return paths
