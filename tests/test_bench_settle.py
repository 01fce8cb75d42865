"""A scaled-down run of benchmarks/bench_settle.py on a real redis-server: a settle that
moves the cost is one more script call, one whose estimate was right none, and a leased
key's settle one call on the store. Counts only: no timing is asserted."""

from __future__ import annotations

import pytest

from benchmarks.bench_settle import POLICIES, compare, table

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_settle_costs_one_script_call_and_none_when_the_estimate_was_right(real_redis, gcra_settings):
    gcra_settings(AUDIT={"ENABLED": False}, DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of"},
                  POLICIES=POLICIES)
    rows = compare(real_redis, requests=200, max_seconds=30)
    print(table(rows))
    calls = {row["case"]: row["calls"] for row in rows}
    assert all(row["requests"] == 200 for row in rows)
    assert calls["plain decision"] == 1.0
    assert calls["decision + settle (refund)"] == 2.0
    assert calls["decision + settle (estimate right)"] == 1.0
    assert calls["quota + rate, + settle"] == 2.0
    assert calls["leased, plain"] < 1.0  # served from leases
    assert 0.9 < calls["leased, + settle"] - calls["leased, plain"] < 1.1  # every settle on the store
