"""A scaled-down run of benchmarks/bench_shaping.py on a real redis-server: pacing and the
sleep-and-retry loop start every job, pacing with one decision per job and no refusal,
the retry loop with more (its refusals are wasted round trips). Counts only: no timing
is asserted."""

from __future__ import annotations

import pytest

from benchmarks.bench_shaping import compare, policies, table

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_pacing_sends_one_decision_per_job_and_retrying_wastes_round_trips(real_redis, gcra_settings):
    gcra_settings(AUDIT={"ENABLED": False}, DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of"},
                  POLICIES=policies("20/s", 2))
    results = compare(workers=6, jobs=4, rate="20/s", burst=2, deadline=60, max_tries=200)
    print(table(results))
    pace, retry, jitter = results
    assert [r.name for r in results] == ["pace", "retry", "retry+jitter"]
    assert pace.started == retry.started == jitter.started == 24
    assert pace.sent == 24 and pace.wasted == 0
    assert retry.wasted > 0 and jitter.wasted > 0
