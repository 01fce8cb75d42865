"""Shaping (``max_wait``) in the script and its pure twin (real redis-server).

The script is driven with a fake clock as in tests/test_lua_twin.py: its single TIME line
is replaced by two trailing ARGV slots. On random sequences of any mix of algorithms, with
and without ``max_wait``, the script and ``algorithm.composite`` agree on the decision, the
wait, the retry-after, remaining, resets and what is stored.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_gcra.algorithm import DENIED, GCRA, SLIDING_LOG, composite, gcra
from django_gcra.backends.base import LimitSpec
from django_gcra.backends.redis import parse_reply, script_args
from tests.support.twin import assert_stored, mixed_limit

pytestmark = pytest.mark.redis


def run(script, keys, limits, cost, now, max_wait=0, least=None):
    specs = [LimitSpec(k, a if alg == GCRA else 0, b, enforce, alg, a if alg else 0)
             for k, (alg, a, b, enforce) in zip(keys, limits)]
    args = script_args(specs, cost, least, max_wait)
    return parse_reply(script(keys=keys, args=[*args, now // 1_000_000, now % 1_000_000]),
                       least is not None, max_wait > 0)


gcra_limit = st.tuples(st.just(GCRA), st.integers(5_000_000, 600_000_000), st.integers(1, 20), st.booleans())
# (gap us, cost, max_wait us: 0 is none)
step = st.tuples(st.integers(0, 3_000_000), st.integers(0, 25),
                 st.sampled_from([0, 1, 1_000_000, 30_000_000, 3_600_000_000]))


def check_steps(client, script, keys, limits, steps):
    states: list = [None] * len(limits)
    now = 1_700_000_000_000_000 + 4_321
    waits = 0
    for gap, cost, max_wait in steps:
        now += gap
        outcome = run(script, keys, limits, cost, now, max_wait)
        twin = composite(states, now, limits, cost, None, max_wait)
        waits += twin.waited > 0
        assert (outcome.enforced, outcome.would, outcome.now, outcome.waited) == (
            twin.enforced, twin.would, now, twin.waited)
        assert outcome.retry_after == twin.retry_after
        assert outcome.binding == twin.binding
        assert outcome.remaining == twin.remaining
        assert outcome.reset_after == twin.reset_after
        assert_stored(client, keys, limits, states, twin.writes)
    return waits


@settings(max_examples=150, deadline=None)
@given(limits=st.lists(mixed_limit, min_size=1, max_size=3), steps=st.lists(step, min_size=1, max_size=40))
def test_shaping_script_matches_twin(clocked, limits, steps):
    client, script = clocked
    client.flushall()
    check_steps(client, script, [f"s:{{x}}:{i}" for i in range(len(limits))], limits, steps)


@settings(max_examples=100, deadline=None)
@given(limits=st.lists(gcra_limit, min_size=1, max_size=3),
       steps=st.lists(st.tuples(st.integers(0, 200_000), st.integers(1, 5), st.just(3_600_000_000)),
                      min_size=5, max_size=40))
def test_shaping_gcra_composites_match_twin_under_pressure(clocked, limits, steps):
    """Short gaps and a long max_wait: most steps reserve (the wait path is exercised)."""
    client, script = clocked
    client.flushall()
    check_steps(client, script, [f"p:{{x}}:{i}" for i in range(len(limits))], limits, steps)


def test_twin_reservations_are_one_interval_apart():
    """Ten waiters at one instant on a 5/s burst 1 key: slots 200 ms apart, no two alike."""
    tat, now, waits = None, 10_000_000, []
    for _ in range(10):
        result = gcra(tat, now, 200_000, 1, 1, max_wait=10_000_000)
        assert result.allowed
        tat = result.tat
        waits.append(result.waited)
    assert waits == [200_000 * k for k in range(10)]
    beyond = gcra(tat, now, 200_000, 1, 1, max_wait=1_999_999)  # the next slot is 2 s away
    assert not beyond.allowed and beyond.tat == tat and beyond.retry_after == 2_000_000


def test_composite_reserves_all_or_nothing_with_the_largest_wait(clocked):
    """Two enforcing limits, both busy: the wait is the larger retry and both TATs move;
    beyond max_wait neither moves. The script agrees."""
    client, script = clocked
    client.flushall()
    keys = ["c:{x}:a", "c:{x}:b"]
    limits = [(GCRA, 100_000, 1, True), (GCRA, 1_000_000, 1, True)]  # 10/s and 1/s, burst 1
    now = 1_700_000_000_000_000
    first = run(script, keys, limits, 1, now, 5_000_000)
    assert first.allowed and first.waited == 0
    busy = run(script, keys, limits, 1, now, 500_000)  # needs 1 s on b: beyond 0.5 s
    assert (busy.enforced, busy.waited, busy.retry_after) == (DENIED, 0, 1_000_000)
    assert [int(v) for v in client.mget(keys)] == [now + 100_000, now + 1_000_000]  # nothing reserved
    waited = run(script, keys, limits, 1, now, 5_000_000)
    assert waited.allowed and waited.waited == 1_000_000
    assert [int(v) for v in client.mget(keys)] == [now + 200_000, now + 2_000_000]  # both moved


def test_shadow_limits_never_make_a_caller_wait(clocked):
    client, script = clocked
    client.flushall()
    keys = ["h:{x}:enf", "h:{x}:shadow"]
    limits = [(GCRA, 100_000, 5, True), (GCRA, 10_000_000, 1, False)]
    now = 1_700_000_000_000_000
    run(script, keys, limits, 1, now, 5_000_000)
    second = run(script, keys, limits, 1, now, 5_000_000)  # the shadow limit would deny for 10 s
    assert second.allowed and second.waited == 0 and second.would == DENIED


def test_a_decision_with_an_enforcing_sliding_limit_never_waits(clocked):
    client, script = clocked
    client.flushall()
    keys = ["l:{x}:log", "l:{x}:g"]
    limits = [(SLIDING_LOG, 1_000_000, 1, True), (GCRA, 100_000, 5, True)]
    now = 1_700_000_000_000_000
    assert run(script, keys, limits, 1, now, 5_000_000).allowed
    denied = run(script, keys, limits, 1, now, 5_000_000)
    assert denied.enforced == DENIED and denied.waited == 0 and denied.retry_after == 1_000_000
    assert client.zcard(keys[0]) == 1 and int(client.get(keys[1])) == now + 100_000
