"""The sliding twins' own promises, by brute force over random traffic (no Redis):
the log never admits more than N in any rolling period, the weighted window never
more than 2N; each retry-after is enough and, but for a rounded microsecond, not more."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from django_gcra.algorithm import ALLOWED, GCRA, SLIDING_LOG, SLIDING_WINDOW, composite, sliding_log, sliding_window

P = 1_000_000  # a 1 s period

traffic = st.lists(st.tuples(st.integers(0, 400_000), st.integers(0, 4)), min_size=1, max_size=80)


def _admitted_in_windows(admitted: list[tuple[int, int]], period: int) -> int:
    """The most units admitted in any window (t - period, t]."""
    return max(sum(c for s, c in admitted if t - period < s <= t) for t, _ in admitted)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 8), steps=traffic)
def test_log_never_exceeds_n_and_its_retry_is_exact(limit, steps):
    state, now, admitted = None, 0, []
    for gap, cost in steps:
        now += gap
        result = sliding_log(state, now, P, limit, cost)
        if result.allowed:
            state = result.state
            admitted.append((now, cost))
            assert result.remaining == limit - sum(c for s, c in admitted if s > now - P)
        elif not result.impossible:
            assert result.retry_after > 0
            assert sliding_log(state, now + result.retry_after, P, limit, cost).allowed  # enough
            assert not sliding_log(state, now + result.retry_after - 1, P, limit, cost).allowed  # not more
        else:
            assert cost > limit
    if admitted:
        assert _admitted_in_windows(admitted, P) <= limit


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 8), steps=traffic, offset=st.integers(0, P - 1))
def test_window_bound_and_retry(limit, steps, offset):
    state, now, admitted = None, offset, []
    for gap, cost in steps:
        now += gap
        result = sliding_window(state, now, P, limit, cost)
        if result.allowed:
            state = result.state
            admitted.append((now, cost))
        elif not result.impossible:
            assert result.retry_after > 0
            assert sliding_window(state, now + result.retry_after, P, limit, cost).allowed
            assert not sliding_window(state, now + result.retry_after - 1, P, limit, cost).allowed
    if admitted:
        assert _admitted_in_windows(admitted, P) <= 2 * limit


def test_window_steady_load_admits_about_n_per_period():
    state, admitted = None, []
    for i in range(20_000):  # one request every 1 ms for 20 s, limit 100/s
        now = i * 1_000
        result = sliding_window(state, now, P, 100)
        if result.allowed:
            state = result.state
            admitted.append(now)
    per_period = [sum(1 for s in admitted if k * P <= s < (k + 1) * P) for k in range(2, 20)]
    assert all(95 <= n <= 105 for n in per_period), per_period


def test_log_cost_counts_entries_and_reset_is_the_oldest_leaving():
    first = sliding_log(None, 0, P, 5, cost=3)
    assert first.allowed and first.state == (0, 0, 0) and first.remaining == 2 and first.reset_after == P
    second = sliding_log(first.state, 100, P, 5, cost=3)
    assert not second.allowed and second.retry_after == P - 100  # one of the three oldest must leave
    assert sliding_log(first.state, 100, P, 5, cost=6).impossible
    peek = sliding_log(first.state, 100, P, 5, cost=0)
    assert peek.allowed and peek.remaining == 2


def test_composite_mixed_is_all_or_nothing_and_binds_the_longest_wait():
    limits = [(GCRA, 100_000, 3, True), (SLIDING_LOG, P, 2, True), (SLIDING_WINDOW, P, 10, True)]
    states = [None, (0, 0), None]  # the log is full until 1 s
    result = composite(states, 500_000, limits)
    assert result.enforced != ALLOWED and result.binding == 1 and result.retry_after == 500_000
    assert result.writes == (None, None, None)
    full_gcra = composite([1_000_000, None, None], 500_000, limits)  # GCRA waits 200 ms
    assert full_gcra.binding == 0 and full_gcra.writes == (None, None, None)
    both = composite([1_000_000, (0, 0), None], 500_000, limits)
    assert both.binding == 1  # the longer wait of the two
    ok = composite([None, None, None], 500_000, limits)
    assert ok.enforced == ALLOWED and ok.writes[1] == (500_000,) and ok.writes[2] == (0, 1, 0)
