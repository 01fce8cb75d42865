"""Draw docs/img/gcra-trace.png: the TAT of the seed's hand trace (5/s, burst 3) against time.

    .venv/bin/python scripts/plot_gcra_trace.py      (needs matplotlib)
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from django_gcra.algorithm import gcra  # noqa: E402

T, B = 200_000, 3
ARRIVALS = [0, 0, 0, 0, 250_000, 250_000, 500_000, 900_000, 900_000, 900_000, 1_000_000]


def main() -> None:
    tat, points = None, []
    for now in ARRIVALS:
        result = gcra(tat, now, T, B)
        points.append((now, result))
        tat = result.tat
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=110)
    xs = [0, 1_200_000]
    ax.plot([x / 1000 for x in xs], [x / 1000 for x in xs], color="grey", lw=1, label="now (TAT ≤ now: rested)")
    ax.plot([x / 1000 for x in xs], [(x + B * T) / 1000 for x in xs], color="grey", lw=1, ls="--",
            label="now + B·T: the most TAT may be ahead")
    for i, (now, result) in enumerate(points):
        marker, color = ("o", "tab:green") if result.allowed else ("x", "tab:red")
        label = None
        if i == 0 or (not result.allowed and all(p[1].allowed for p in points[:i])):
            label = "allowed: TAT after the request" if result.allowed else "denied: TAT unchanged"
        ax.scatter(now / 1000, result.tat / 1000, marker=marker, color=color, zorder=3, label=label)
    ax.set_xlabel("arrival time (ms)")
    ax.set_ylabel("stored TAT (ms)")
    ax.set_title("GCRA, 5 per second, burst 3: a burst of three, then one per 200 ms")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    out = Path(__file__).resolve().parent.parent / "docs" / "img" / "gcra-trace.png"
    fig.tight_layout()
    fig.savefig(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
