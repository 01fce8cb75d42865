"""The pure twins of calendar quotas and of settling a metered cost: no Django, no Redis.

All times are integer microseconds. ``backends/gcra.lua`` (the quota branch) and
``backends/settle.lua`` must agree with these functions on every input;
``tests/test_metered_twin.py`` checks that property over random sequences.

A quota's state is ``(period start, units used in it)``; the period is the one of the
four boundaries ``(b0, b1, b2, b3)`` that holds ``now`` (``periods.Calendar``). A state
of another period counts as unused.

Settling moves a limit by ``delta = actual - estimate`` units:

- more (``delta > 0``) is owed at once, never more than the limit's own burst (N, quota)
  beyond full use: a GCRA TAT at most ``now + 2 * interval * burst``, a log or a window
  at most 2N units, a quota at most twice its units;
- less (``delta < 0``) is refunded, never leaving more than a full burst: a TAT never
  below ``now``, counts never below 0. The log gives back its newest entries, the window
  its current count first, then the previous one's. A quota refunds only while the
  period that was charged (the decision's time ``at``) is still the current one.
"""

from __future__ import annotations

from collections.abc import Sequence

from .sliding import log_window, window_view

__all__ = ["QuotaState", "period_of", "quota", "quota_view", "settle_gcra", "settle_log", "settle_quota",
           "settle_window"]

QuotaState = tuple[int, int]  # (period start, units used in it)
Bounds = Sequence[int]  # (b0, b1, b2, b3): four period starts


def period_of(bounds: Bounds, now: int) -> tuple[int, int] | None:
    """(start, end) of the period holding ``now``; None when ``now`` is outside ``[b0, b3)``."""
    b0, b1, b2, b3 = bounds
    if now < b0 or now >= b3:
        return None
    if now < b1:
        return b0, b1
    if now < b2:
        return b1, b2
    return b2, b3


def _used(state: QuotaState | None, start: int) -> int:
    return state[1] if state is not None and state[0] == start else 0


def quota_view(used: int, end: int, now: int, limit: int) -> tuple[int, int]:
    """(remaining, reset_after): the units left, and the us until the period's end (0 when none is used)."""
    return max(0, limit - used), (end - now if used > 0 else 0)


def quota(state: QuotaState | None, now: int, bounds: Bounds, limit: int,
          cost: int = 1) -> tuple[int, int | None, QuotaState, int]:
    """(status, retry_after, new state, used before) of ``cost`` units: status 1 allowed, 0
    denied (retry at the next period's start), -1 never (cost > the quota)."""
    found = period_of(bounds, now)
    if found is None:
        raise ValueError("now is outside the boundaries")
    start, end = found
    used = _used(state, start)
    if cost > limit:
        return -1, None, (start, used), used
    if used + cost > limit:
        return 0, end - now, (start, used), used
    return 1, 0, (start, used + cost), used


def settle_gcra(tat: int | None, now: int, interval: int, burst: int, delta: int) -> int | None:
    """The TAT after settling ``delta`` units; None: the key is rested (deleted)."""
    current = now if tat is None or tat < now else tat
    if delta > 0:
        new = max(current, min(current + interval * delta, now + 2 * interval * burst))
    else:
        new = max(now, current + interval * delta)
    return new if new > now else None


def settle_log(entries: tuple[int, ...] | None, now: int, period: int, limit: int,
               delta: int) -> tuple[int, ...] | None:
    """The log's entries in the window after settling (None: empty)."""
    window = log_window(entries, now, period)
    if delta > 0:
        window = window + (now,) * max(0, min(delta, 2 * limit - len(window)))
    elif delta < 0:
        window = window[:max(0, len(window) + delta)]
    return window or None


def settle_window(state: tuple[int, int, int] | None, now: int, period: int, limit: int,
                  delta: int) -> tuple[int, int, int] | None:
    """The weighted window's (start, cur, prev) after settling (None: both counts 0)."""
    start, cur, prev, _ = window_view(state, now, period)
    if delta > 0:
        cur = max(cur, min(cur + delta, 2 * limit))
    elif delta < 0:
        back = min(cur, -delta)
        cur -= back
        prev = max(0, prev - (-delta - back))
    if cur == 0 and prev == 0:
        return None
    return start, cur, prev


def settle_quota(state: QuotaState | None, now: int, at: int, bounds: Bounds, limit: int,
                 delta: int) -> QuotaState | None:
    """The quota's state after settling a decision made at ``at`` (None: left as it is)."""
    found = period_of(bounds, now)
    if found is None:
        raise ValueError("now is outside the boundaries")
    start = found[0]
    used = _used(state, start)
    if delta > 0:
        return start, max(used, min(used + delta, 2 * limit))
    if delta < 0 and state is not None and state[0] == start and start <= at:
        return start, max(0, used + delta)
    return None
