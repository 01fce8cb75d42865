"""Draw docs/img/algorithms.png: the three algorithms on the same traffic, by their pure
twins on a fake clock (the same arithmetic as the Lua script, tests/test_lua_twin.py).

    .venv/bin/python scripts/plot_algorithms.py      (needs matplotlib)

One limit of 10 per 10 s (GCRA: burst 10, the default). Traffic: a burst of 30 requests
in the first second, quiet, then a steady overload of 3 requests a second from 20 s to
80 s. Prints, per algorithm, what the concepts page quotes: the most admitted in any
rolling 10 s, the admitted total, and the admitted per 10 s in the steady part.
"""

from __future__ import annotations

import bisect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # benchmarks.figstyle, when run as a script

from django_gcra.algorithm import GCRA, SLIDING_LOG, SLIDING_WINDOW, composite  # noqa: E402

N, PERIOD = 10, 10_000_000  # 10 per 10 s
INTERVAL = PERIOD // N
SECOND = 1_000_000
END = 80 * SECOND
ALGORITHMS = [("gcra (burst 10)", GCRA, INTERVAL), ("sliding_log", SLIDING_LOG, PERIOD),
              ("sliding_window", SLIDING_WINDOW, PERIOD)]
# Start the grid off a window boundary, as real traffic does (the weighted window's grid is Redis time).
START = 1_700_000_003_300_000


def traffic() -> list[int]:
    burst = [i * SECOND // 30 for i in range(30)]
    steady = [20 * SECOND + i * SECOND // 3 for i in range(60 * 3)]
    return burst + steady


def admitted_times(algorithm: int, a: int) -> list[int]:
    state, out = None, []
    for t in traffic():
        result = composite([state], START + t, [(algorithm, a, N, True)])
        if result.writes[0] is not None:
            state = result.writes[0]
            out.append(t)
    return out


def most_in_any_period(times: list[int]) -> int:
    return max(i + 1 - bisect.bisect_right(times, t - PERIOD) for i, t in enumerate(times))


def rolling(times: list[int], at: int) -> int:
    return bisect.bisect_right(times, at) - bisect.bisect_right(times, at - PERIOD)


def main() -> None:
    from benchmarks.figstyle import figure

    fig, (top, bottom) = figure(2, height=3.6, sharex=True)
    arrivals = traffic()
    top.step([t / SECOND for t in arrivals], range(1, len(arrivals) + 1), where="post", color="grey", lw=1,
             label="offered")
    colors = {"gcra (burst 10)": "#2a7ab9", "sliding_log": "#d1495b", "sliding_window": "#3a9d5d"}
    grid = list(range(0, END + 1, SECOND // 10))
    print(f"limit {N} per {PERIOD // SECOND} s; {len(arrivals)} requests offered")
    for label, algorithm, a in ALGORITHMS:
        times = admitted_times(algorithm, a)
        steady = [t for t in times if 30 * SECOND <= t < 80 * SECOND]
        print(f"{label:<18} admitted {len(times):>3}; most in any rolling 10 s {most_in_any_period(times):>2}; "
              f"steady part {len(steady) / 5:.1f} per 10 s")
        top.step([t / SECOND for t in times], range(1, len(times) + 1), where="post", color=colors[label], lw=1.6,
                 label=label)
        bottom.plot([g / SECOND for g in grid], [rolling(times, g) for g in grid], color=colors[label], lw=1.4,
                    label=label)
    bottom.axhline(N, color="black", lw=0.8, ls="--", label="N = 10")
    bottom.axhline(2 * N, color="black", lw=0.8, ls=":", label="2N")
    top.set_ylabel("requests (cumulative)")
    top.set_title("10 per 10 s: a burst of 30 in the first second,\nthen 3 per second from 20 s")
    top.legend(loc="upper left")
    bottom.set_ylabel("admitted in the last 10 s")
    bottom.set_xlabel("time (s)")
    bottom.set_ylim(-0.5, 26)  # room for the legend above 2N
    bottom.legend(loc="upper right", ncol=2)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    out = ROOT / "docs" / "img" / "algorithms.png"
    fig.tight_layout()
    fig.savefig(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
