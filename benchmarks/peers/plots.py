"""The figures of ``bench_peers``, drawn with matplotlib (Agg) from one run's results."""

from __future__ import annotations

import os

GCRA_COLOR, PEER_COLOR, FLOOR_COLOR = "#2a7ab9", "#9aa5b1", "#e0a040"


def _color(name: str) -> str:
    if name.startswith("django_gcra"):
        return GCRA_COLOR
    return FLOOR_COLOR if "floor" in name else PEER_COLOR


def _bars(ax, names, values, fmt, xlabel, title):
    y = range(len(names))
    ax.barh(y, values, color=[_color(n) for n in names])
    ax.set_yticks(list(y), names)
    if not ax.yaxis_inverted():  # shared y axes invert together
        ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=11)
    for i, v in enumerate(values):
        ax.text(v, i, " " + fmt.format(v), va="center", fontsize=8)
    ax.set_xlim(0, max(values) * 1.22)
    ax.grid(axis="x", alpha=0.3)


def draw(r: dict, directory: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    single, two = r["single"], r["two"]
    names = [s["name"] for s in single]
    subtitle = (f"one redis-server {r['redis']} on loopback, one client thread, "
                f"medians of {r['config']['rounds']} rounds")
    paths = []

    def save(fig, name):
        fig.tight_layout()
        path = os.path.join(directory, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    _bars(axes[0], names, [s["hot"] for s in single], "{:,.0f}", "decisions per second", "one hot key")
    _bars(axes[1], names, [s["many"] for s in single], "{:,.0f}", "decisions per second", "10,000 keys")
    fig.suptitle("Single limit: decisions per second (higher is better)\n" + subtitle, fontsize=10)
    save(fig, "peers-throughput.png")

    fig, ax = plt.subplots(figsize=(8, 4))
    _bars(ax, [t["name"] for t in two], [t["rate"] for t in two], "{:,.0f}", "decisions per second",
          "Two limits (tenant + user): decisions per second\n" + subtitle)
    save(fig, "peers-two-limits.png")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    _bars(axes[0], names, [s["p50_us"] for s in single], "{:.0f} us", "microseconds", "p50 latency, hot key")
    _bars(axes[1], names, [s["p99_us"] for s in single], "{:.0f} us", "microseconds", "p99 latency, hot key")
    fig.suptitle("Latency per decision (lower is better)", fontsize=10)
    save(fig, "peers-latency.png")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    _bars(axes[0], names, [s["round_trips"] for s in single], "{:.2f}", "commands sent per decision",
          "round trips (client to Redis)")
    _bars(axes[1], names, [s["server_commands"] for s in single], "{:.2f}", "commands run per decision",
          "commands Redis runs (scripts' inner calls included)")
    fig.suptitle("Redis commands per decision, single limit, hot key (lower is better)", fontsize=10)
    save(fig, "peers-commands.png")

    fig, ax = plt.subplots(figsize=(8, 4))
    _bars(ax, names, [s["bytes_per_user"] for s in single], "{:.0f} B", "bytes (MEMORY USAGE, all keys of one user)",
          "Redis memory per limited user after 10 decisions (lower is better)")
    save(fig, "peers-memory.png")

    fig, ax = plt.subplots(figsize=(8, 4))
    _bars(ax, names, [s["admitted_over_promise"] for s in single], "{:.2f}",
          "admitted / most its own algorithm allows",
          f"{r['config']['processes']} processes on one key for {r['config']['seconds']:.0f} s: "
          "above 1 is over-admission")
    ax.axvline(1.0, color="#c03030", linewidth=1)
    save(fig, "peers-over-admission.png")
    return paths
