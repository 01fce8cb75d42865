"""The Lua script and the pure twin agree on random sequences (real redis-server).

The script reads its clock from Redis TIME; to drive it with a fake clock this test
replaces that single line with two trailing ARGV slots, popped so the optional ``least``
slot still reads as absent. Every other line is the shipped script.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_gcra.algorithm import GCRA, SLIDING_LOG, SLIDING_WINDOW, composite, gcra_composite
from tests.support.twin import assert_stored, mixed_limit

pytestmark = pytest.mark.redis


limit = st.tuples(
    # interval: 1/5s .. 1/day. Keys expire in Redis's real time (PX), so every interval
    # must outlast one example's wall time, even on a loaded machine.
    st.integers(5_000_000, 86_400_000_000),
    st.integers(1, 20),  # burst
    st.booleans(),  # enforce
)
# (gap us, cost, least): least None is a plain decision, else a lease refill taking as
# many free units as it can, at most cost and at least least.
step = st.tuples(st.integers(0, 3_000_000), st.integers(0, 25), st.none() | st.integers(0, 25))


@settings(max_examples=150, deadline=None)
@given(limits=st.lists(limit, min_size=1, max_size=3), steps=st.lists(step, min_size=1, max_size=40))
def test_script_matches_twin(clocked, limits, steps):
    client, script = clocked
    client.flushall()
    keys = [f"t:{{x}}:{i}" for i in range(len(limits))]
    tats: list[int | None] = [None] * len(limits)
    now = 1_700_000_000_000_000
    for gap, cost, least in steps:
        now += gap
        args = [cost]
        for interval, burst, enforce in limits:
            args += [interval, burst, int(enforce)]
        if least is not None:
            args.append(least)
        reply = script(keys=keys, args=[*args, now // 1_000_000, now % 1_000_000])
        twin = gcra_composite(tats, now, limits, cost, least)
        if least is not None:
            assert reply.pop() == twin.cost
        enforced, would, retry, binding, lua_now = reply[:5]
        assert (enforced, would, lua_now) == (twin.enforced, twin.would, now)
        assert (None if retry < 0 else retry) == twin.retry_after
        assert (binding - 1 if binding else None) == twin.binding
        assert tuple(reply[5::2]) == twin.remaining
        assert tuple(reply[6::2]) == twin.reset_after
        stored = [None if v is None else int(v) for v in client.mget(keys)]
        for i, write in enumerate(twin.writes):
            if write is not None:
                tats[i] = write
            assert stored[i] == tats[i]


plain_step = st.tuples(st.integers(0, 3_000_000), st.integers(0, 25))


@settings(max_examples=200, deadline=None)
@given(limits=st.lists(mixed_limit, min_size=1, max_size=3), steps=st.lists(step, min_size=1, max_size=40))
def test_mixed_script_matches_twin(clocked, limits, steps):
    """GCRA, the sliding log and the weighted window, in any mix: the same decisions,
    retry-afters, remaining, resets and stored state as ``algorithm.composite`` (takes
    included, though a check keeps leases off sliding limits)."""
    client, script = clocked
    client.flushall()
    keys = [f"m:{{x}}:{i}" for i in range(len(limits))]
    states: list = [None] * len(limits)
    now = 1_700_000_000_000_000 + 123_457
    for gap, cost, least in steps:  # least: a take, as many units as the GCRA limits have free
        now += gap
        args = [cost]
        for algorithm, a, b, enforce in limits:
            args += [a, b, 2 * algorithm + int(enforce)]
        if least is not None:
            args.append(least)
        reply = script(keys=keys, args=[*args, now // 1_000_000, now % 1_000_000])
        twin = composite(states, now, limits, cost, least)
        if least is not None:
            assert reply.pop() == twin.cost
        enforced, would, retry, binding, lua_now = reply[:5]
        assert (enforced, would, lua_now) == (twin.enforced, twin.would, now)
        assert (None if retry < 0 else retry) == twin.retry_after
        assert (binding - 1 if binding else None) == twin.binding
        assert tuple(reply[5::2]) == twin.remaining
        assert tuple(reply[6::2]) == twin.reset_after
        assert_stored(client, keys, limits, states, twin.writes)


@settings(max_examples=150, deadline=None)
@given(algorithm=st.sampled_from([GCRA, SLIDING_LOG, SLIDING_WINDOW]), a=st.integers(5_000_000, 60_000_000),
       b=st.integers(1, 10), steps=st.lists(plain_step, min_size=1, max_size=30))
def test_waiting_exactly_the_retry_after_is_enough(clocked, algorithm, a, b, steps):
    """For each algorithm, on the script itself: a denied request retried after exactly its
    retry-after is admitted, and one microsecond earlier it is not."""
    client, script = clocked
    client.flushall()
    if algorithm == GCRA:
        a //= b  # the interval: a rested key takes about the same time
    now = 1_700_000_000_000_000 + 654_321
    for gap, cost in steps:
        now += gap
        cost = max(1, min(cost, b))  # satisfiable
        reply = script(keys=["w:{x}"], args=[cost, a, b, 2 * algorithm + 1, now // 1_000_000, now % 1_000_000])
        if reply[0] == 1:
            continue
        retry = reply[2]
        early = now + retry - 1
        assert script(keys=["w:{x}"], args=[cost, a, b, 2 * algorithm + 1, early // 1_000_000,
                                            early % 1_000_000])[0] == 0
        now += retry
        assert script(keys=["w:{x}"], args=[cost, a, b, 2 * algorithm + 1, now // 1_000_000, now % 1_000_000])[0] == 1
