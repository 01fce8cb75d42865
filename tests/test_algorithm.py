"""The pure twin against the seed's hand trace (5/s, burst 3) and the composite rules."""

from django_gcra.algorithm import ALLOWED, DENIED, IMPOSSIBLE, gcra, gcra_composite

T, B = 200_000, 3  # 5 per second, burst 3


def test_hand_trace():
    first = gcra(None, 0, T, B)
    assert (first.allowed, first.tat, first.retry_after, first.remaining) == (True, 200_000, 0, 2)
    second = gcra(first.tat, 0, T, B)
    assert (second.allowed, second.tat, second.remaining) == (True, 400_000, 1)
    third = gcra(second.tat, 0, T, B)
    assert (third.allowed, third.tat, third.remaining) == (True, 600_000, 0)
    fourth = gcra(third.tat, 0, T, B)
    assert (fourth.allowed, fourth.tat, fourth.retry_after) == (False, 600_000, 200_000)  # nothing written
    at_250 = gcra(fourth.tat, 250_000, T, B)
    assert (at_250.allowed, at_250.tat) == (True, 800_000)
    again = gcra(at_250.tat, 250_000, T, B)
    assert (again.allowed, again.retry_after) == (False, 150_000)


def test_seed_test_sequence():
    tat = None
    outcomes = []
    for _ in range(4):
        result = gcra(tat, 0, T, B)
        outcomes.append(result.allowed)
        tat = result.tat
    assert outcomes == [True, True, True, False]
    assert gcra(tat, 0, T, B).retry_after == 200_000


def test_rested_key_behaves_as_fresh():
    assert gcra(100, 10_000_000, T, B) == gcra(None, 10_000_000, T, B)


def test_peek_consumes_nothing():
    result = gcra(400_000, 0, T, B, cost=0)
    assert result.allowed and result.tat == 400_000 and result.remaining == 1


def test_cost_above_burst_is_impossible_not_a_wait():
    result = gcra(None, 0, T, B, cost=4)
    assert not result.allowed and result.impossible and result.retry_after is None
    assert gcra(None, 0, T, B, cost=3).allowed


def test_reset_after_is_time_to_rest():
    assert gcra(None, 0, T, B, cost=2).reset_after == 400_000


def test_composite_denial_writes_nothing_and_binds_largest_wait():
    limits = [(1_000, 200, True), (T, B, True)]  # tenant 1000/s burst 200, user 5/s burst 3
    result = gcra_composite([None, 600_000], 0, limits)
    assert result.enforced == DENIED and result.binding == 1 and result.retry_after == 200_000
    assert result.writes == (None, None)
    assert result.remaining == (200, 0)


def test_composite_allow_writes_all():
    result = gcra_composite([None, None], 0, [(1_000, 200, True), (T, B, True)])
    assert result.enforced == ALLOWED and result.writes == (1_000, 200_000) and result.binding is None
    assert result.remaining == (199, 2)


def test_shadow_limit_denial_lets_enforcing_limits_consume():
    result = gcra_composite([None, 600_000], 0, [(1_000, 200, True), (T, B, False)])
    assert result.enforced == ALLOWED and result.would == DENIED
    assert result.binding == 1 and result.retry_after == 200_000
    assert result.writes == (1_000, None)


def test_impossible_binds_over_any_wait():
    result = gcra_composite([600_000, None], 0, [(T, B, True), (T, 2, True)], cost=3)
    assert result.enforced == IMPOSSIBLE and result.binding == 1 and result.retry_after is None
