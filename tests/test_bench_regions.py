"""The simulated day's own logic (benchmarks/bench_regions.py): the load curves and the ideal global limiter."""

from __future__ import annotations

import pytest

from benchmarks.bench_regions import BURST, RATE, ideal, load, sun


def test_the_sun_peaks_at_each_regions_hour_and_rests_at_the_floor():
    assert sun("eu", 12.0) == pytest.approx(1.15)
    assert sun("ap", 4.0) == sun("ap", 28.0)  # hours wrap
    assert sun("us", 8.0) == pytest.approx(0.15)


def test_geo_tenants_ask_mostly_from_home():
    total = sum(load("eu-t", r, 12.0) for r in ("eu", "us", "ap"))
    assert load("eu-t", "eu", 12.0) == pytest.approx(0.85 * total)


def test_the_ideal_limiter_admits_its_burst_then_its_rate():
    flood = [i / 1000 for i in range(2000)]  # 1000/s for 2 s
    admitted = ideal(flood)
    assert len(admitted) == pytest.approx(BURST + 2 * RATE, abs=1)
    assert ideal([0.0, 0.5, 1.0]) == [0.0, 0.5, 1.0]
