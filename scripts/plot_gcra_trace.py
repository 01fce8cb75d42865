"""Draw docs/img/gcra-trace.png and print the hand-trace table of docs/concepts/gcra.md,
both from one list of arrivals (the seed's hand trace: 5/s, burst 3) run through the pure
twin ``django_gcra.algorithm.gcra``; tests/test_docs_figures.py checks that the page's
table is exactly ``table()``.

    .venv/bin/python scripts/plot_gcra_trace.py      (needs matplotlib: benchmarks/requirements.txt)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # benchmarks.figstyle, when run as a script

from django_gcra.algorithm import gcra  # noqa: E402

T, B = 200_000, 3
ARRIVALS = [0, 0, 0, 0, 250_000, 250_000]  # microseconds: the rows of the page's table


class Step(NamedTuple):
    now: int
    stored: int | None  # the TAT before the request
    new_tat: int
    allow_at: int
    allowed: bool
    retry_after: int
    remaining: int
    tat: int  # the TAT stored after the request (unchanged on a deny)


def trace() -> list[Step]:
    tat, steps = None, []
    for now in ARRIVALS:
        result = gcra(tat, now, T, B)
        new_tat = max(tat if tat is not None else now, now) + T
        steps.append(Step(now, tat, new_tat, new_tat - B * T, result.allowed, result.retry_after or 0,
                          result.remaining, result.tat))
        tat = result.tat
    return steps


def table() -> str:
    """The markdown table of docs/concepts/gcra.md's hand trace."""
    lines = ["| time (µs) | stored TAT | new TAT | allow_at | result | remaining |",
             "|---:|---:|---:|---:|---|---:|"]
    for s in trace():
        stored = "none" if s.stored is None else f"{s.stored:,}"
        result = "allowed" if s.allowed else f"**denied**, retry after {s.retry_after // 1000} ms"
        lines.append(f"| {s.now:,} | {stored} | {s.new_tat:,} | {s.allow_at:,} | {result} | {s.remaining} |")
    return "\n".join(lines)


def draw(out: Path) -> None:
    from benchmarks.figstyle import SMALL, figure

    steps = trace()
    fig, ax = figure(height=5.2)
    xs = list(range(1, len(steps) + 1))
    ms = [s.now / 1000 for s in steps]
    ax.step(xs, ms, where="mid", color="grey", lw=1.2, label="now (a TAT at or below: rested)")
    ax.step(xs, [m + B * T / 1000 for m in ms], where="mid", color="grey", lw=1.2, ls="--",
            label="now + B·T: the most the TAT may be ahead")
    shown: set[bool] = set()

    def point(x: int, step: Step, **kwargs: Any) -> None:
        label = None
        if step.allowed not in shown:
            shown.add(step.allowed)
            label = "allowed: the TAT it stores" if step.allowed else "denied: the new TAT it would need"
        ax.scatter([x], [(step.tat if step.allowed else step.new_tat) / 1000], zorder=3, label=label, **kwargs)

    for x, s in zip(xs, steps, strict=True):
        if s.allowed:
            point(x, s, marker="o", color="tab:green", s=50)
        else:
            point(x, s, marker="x", color="tab:red", s=70, linewidths=2)
            ax.annotate(f"retry after {s.retry_after // 1000} ms", (x, s.new_tat / 1000), xytext=(0, 9),
                        textcoords="offset points", ha="center", fontsize=SMALL + 1, color="tab:red")
    ax.set_xticks(xs, [f"#{x}\n{m:g} ms" for x, m in zip(xs, ms, strict=True)])
    ax.set_xlim(0.5, len(steps) + 0.5)
    ax.set_ylim(-50, 1150)
    ax.set_xlabel("request and its arrival time")
    ax.set_ylabel("time (ms)")
    ax.set_title("GCRA, 5 per second, burst 3: the hand trace's six requests")
    ax.grid(alpha=0.3)
    fig.legend(loc="lower center", ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.savefig(out)


def main() -> None:
    out = ROOT / "docs" / "img" / "gcra-trace.png"
    draw(out)
    print(table())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
