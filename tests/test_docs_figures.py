"""The docs' figures agree with the text beside them: the GCRA hand-trace table of
docs/concepts/gcra.md is exactly what scripts/plot_gcra_trace.py prints, and that script
draws the figure from the same arrivals."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django_gcra.algorithm import gcra

ROOT = Path(__file__).resolve().parent.parent


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gcra_page_table_is_the_plot_scripts_table():
    trace = load("plot_gcra_trace")
    page = (ROOT / "docs" / "concepts" / "gcra.md").read_text()
    assert trace.table() in page
    rows = [line for line in page.split("## The hand trace")[1].split("\n\n")[2].splitlines() if line.startswith("|")]
    assert len(rows) == 2 + len(trace.ARRIVALS)  # header, rule, one row per arrival the figure shows


def test_the_trace_is_the_twins():
    trace = load("plot_gcra_trace")
    tat = None
    for step, now in zip(trace.trace(), trace.ARRIVALS, strict=True):
        result = gcra(tat, now, trace.T, trace.B)
        assert (step.allowed, step.tat, step.remaining) == (result.allowed, result.tat, result.remaining)
        tat = result.tat
    assert [s.allowed for s in trace.trace()] == [True, True, True, False, True, False]
