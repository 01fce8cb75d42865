"""Calendar quotas and settling, script against twin (real redis-server, a fake clock).

The decide script (gcra.lua) and the settle script (settle.lua) are driven with a fake
clock (tests/support/twin.py: their one TIME line replaced by two trailing ARGV slots);
the pure twins are ``algorithm.composite`` (quota included) and ``metered.settle_*``.
Times are on a 10 s grid and period starts 5 s off it, so no key's real-time PX expiry can
fall between two steps of an example.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_gcra.algorithm import GCRA, QUOTA, SLIDING_LOG, SLIDING_WINDOW, composite
from django_gcra.metered import period_of, settle_gcra, settle_log, settle_quota, settle_window
from tests.support.twin import FakeCalendar, assert_stored, clocked_settle_script, stored_state

pytestmark = pytest.mark.redis

ORIGIN = 1_700_000_000_000_000 + 5_000_000  # period starts: 5 s off the 10 s grid of the steps
# (algorithm, a, b, enforce): a quota's a is filled per step from the calendar
rate_limit = st.one_of(
    st.tuples(st.just(GCRA), st.integers(5_000_000, 600_000_000), st.integers(1, 20), st.booleans()),
    st.tuples(st.sampled_from([SLIDING_LOG, SLIDING_WINDOW]), st.integers(5_000_000, 600_000_000),
              st.integers(1, 20), st.booleans()),
    st.tuples(st.just(QUOTA), st.none(), st.integers(1, 30), st.booleans()),
)
lengths = st.lists(st.integers(2, 30).map(lambda k: k * 10_000_000), min_size=1, max_size=3)
# (gap in 10 s steps, op): ("decide", cost, shift) or ("settle", actual, shift)
op = st.tuples(st.integers(0, 12), st.sampled_from(["decide", "settle"]), st.integers(0, 25),
               st.sampled_from([-1, 0, 1]))


@pytest.fixture(scope="module")
def settle_script(redis_server):
    client = redis_server.client()
    yield client.register_script(clocked_settle_script())
    client.close()


def _args(limits, bounds):
    return [(alg, bounds if alg == QUOTA else a, b, enforce) for alg, a, b, enforce in limits]


def _twin_settle(states, now, at, limits, delta):
    new = []
    for state, (alg, a, b, _) in zip(states, limits):
        if alg == GCRA:
            new.append(settle_gcra(state, now, a, b, delta))
        elif alg == SLIDING_LOG:
            new.append(settle_log(state, now, a, b, delta))
        elif alg == SLIDING_WINDOW:
            new.append(settle_window(state, now, a, b, delta))
        else:
            found = settle_quota(state, now, at, a, b, delta)
            new.append(state if found is None else found)
    return new


@settings(max_examples=150, deadline=None)
@given(limits=st.lists(rate_limit, min_size=1, max_size=3), cal=lengths, ops=st.lists(op, min_size=1, max_size=30))
def test_decide_and_settle_match_the_twins(clocked, settle_script, limits, cal, ops):
    """Any mix of GCRA, sliding and quota limits, decided and settled in any order: the
    same replies and the same stored state as the twins; and a refund never leaves more
    than a full burst (a peek sees at most b remaining, the TAT never before now)."""
    client, script = clocked
    client.flushall()
    calendar = FakeCalendar(ORIGIN, cal)
    keys = [f"q:{{x}}:{i}" for i in range(len(limits))]
    states: list = [None] * len(limits)
    now, at, estimate = ORIGIN + 5_000_000, None, 0
    for gap, kind, units, shift in ops:
        now += gap * 10_000_000
        bounds = calendar.around(now, shift)
        assert period_of(bounds, now) is not None
        twin_limits = _args(limits, bounds)
        quota_a = "%d:%d:%d:%d" % bounds
        clock = [now // 1_000_000, now % 1_000_000]
        if kind == "decide" or at is None:
            args = [units]
            for alg, a, b, enforce in twin_limits:
                args += [quota_a if alg == QUOTA else a, b, 2 * alg + int(enforce)]
            reply = script(keys=keys, args=[*args, *clock])
            twin = composite(states, now, twin_limits, units)
            enforced, would, retry, binding, lua_now = reply[:5]
            assert (enforced, would, lua_now) == (twin.enforced, twin.would, now)
            assert (None if retry < 0 else retry) == twin.retry_after
            assert (binding - 1 if binding else None) == twin.binding
            assert tuple(reply[5::2]) == twin.remaining
            assert tuple(reply[6::2]) == twin.reset_after
            assert_stored(client, keys, twin_limits, states, twin.writes)
            if twin.enforced == 1 and twin.would == 1:
                at, estimate = now, units
            continue
        delta = units - estimate
        args = [delta, at]
        for alg, a, b, _ in twin_limits:
            args += [quota_a if alg == QUOTA else a, b, alg]
        assert settle_script(keys=keys, args=[*args, *clock]) == [1, now]
        states = _twin_settle(states, now, at, twin_limits, delta)
        for i, (alg, _, b, _) in enumerate(twin_limits):
            stored = stored_state(client, keys[i], alg)
            if alg == SLIDING_LOG:
                assert stored == (tuple(sorted(states[i])) if states[i] else None)
            else:
                assert stored == states[i]
            if alg == GCRA and stored is not None:
                assert stored > now  # a refund never leaves more than a full burst
        peek = script(keys=keys, args=[0, *[x for alg, a, b, e in twin_limits
                                            for x in (quota_a if alg == QUOTA else a, b, 2 * alg + int(e))], *clock])
        for i, (_, _, b, _) in enumerate(twin_limits):
            assert 0 <= peek[5 + 2 * i] <= b
        at = None  # settled: the next settle needs a new decision


@settings(max_examples=60, deadline=None)
@given(cal=lengths, quota=st.integers(1, 20), steps=st.lists(st.integers(0, 30), min_size=1, max_size=30))
def test_quota_denial_retries_at_the_next_period_start(clocked, cal, quota, steps):
    """A quota's Retry-After is exactly the time to the next period's start: admitted
    there, not a microsecond before."""
    client, script = clocked
    client.flushall()
    calendar = FakeCalendar(ORIGIN, cal)
    now = ORIGIN + 5_000_000
    for gap in steps:
        now += gap * 10_000_000
        args = ["%d:%d:%d:%d" % calendar.around(now), quota, 9]
        reply = script(keys=["qq:{x}"], args=[1, *args, now // 1_000_000, now % 1_000_000])
        if reply[0] == 1:
            continue
        start, end = period_of(calendar.around(now), now)
        assert reply[2] == end - now
        early = end - 1
        assert script(keys=["qq:{x}"], args=[1, "%d:%d:%d:%d" % calendar.around(early), quota, 9,
                                             early // 1_000_000, early % 1_000_000])[0] == 0
        assert script(keys=["qq:{x}"], args=[1, "%d:%d:%d:%d" % calendar.around(end), quota, 9,
                                             end // 1_000_000, end % 1_000_000])[0] == 1
        now = end + 5_000_000  # back on the grid


def test_outside_the_boundaries_nothing_is_written(clocked):
    client, script = clocked
    client.flushall()
    now = ORIGIN + 100 * 10_000_000
    bounds = "%d:%d:%d:%d" % (ORIGIN, ORIGIN + 10, ORIGIN + 20, ORIGIN + 30)
    reply = script(keys=["qo:{x}", "g:{x}"], args=[1, bounds, 5, 9, 1_000_000, 5, 1, now // 1_000_000,
                                                   now % 1_000_000])
    assert reply == [-9, 0, 0, 0, now]
    assert client.exists("qo:{x}", "g:{x}") == 0
