"""The pure twins of the script's two rolling-window algorithms: no Django, no Redis.

All times are integer microseconds; ``period`` is the window and ``limit`` its N.

- The sliding log keeps one entry per admitted unit (a cost of k is k entries, all at
  the decision's time), so it never holds more than N entries in the window. An entry
  admitted at ``s`` is in the window at ``now`` while ``s > now - period``. A request of
  ``cost`` fits when the entries in the window plus ``cost`` are at most N; otherwise it
  fits once the ``(count + cost - N)``-th oldest entry leaves, at its time + period.
- The weighted window keeps two counters on a grid of windows of ``period``: the units
  admitted in the current window and in the previous one. Its estimate at offset ``e``
  into the current window is ``cur + prev * (period - e) / period``; a request fits
  when ``cur + cost <= N`` and the estimate plus ``cost`` is at most N. The wait is
  solved from that inequality (see ``_window_wait``). Admissions in any rolling period
  are at most 2N (each counter is at most N) and, under steady load, about N.

Arithmetic the script does in doubles is done here in floats, in the same order, so
the twins agree with the Lua bit for bit (``tests/test_lua_twin.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SlidingResult", "WindowState", "sliding_log", "sliding_window"]

WindowState = tuple[int, int, int]  # (window start, units in it, units in the window before)


@dataclass(frozen=True)
class SlidingResult:
    allowed: bool
    state: tuple[int, ...] | None  # the state to store (the log's entries, or a WindowState); unchanged on deny
    retry_after: int | None  # us until the request would be allowed; None if never (cost > N)
    remaining: int  # whole units still available after this decision
    reset_after: int  # us until one more unit is available than ``remaining``; 0 when nothing is held

    @property
    def impossible(self) -> bool:
        return self.retry_after is None


# ---------------------------------------------------------------- the sliding log

def log_window(entries: tuple[int, ...] | None, now: int, period: int) -> tuple[int, ...]:
    """The entries still in the window at ``now``, oldest first."""
    return tuple(sorted(s for s in entries or () if s > now - period))


def log_view(window: tuple[int, ...], now: int, period: int, limit: int) -> tuple[int, int]:
    """(remaining, reset_after) of a log whose entries in the window are ``window``."""
    count = len(window)
    if count == 0:
        return limit, 0
    remaining = max(0, limit - count)
    # One more unit fits once the (count - limit + remaining + 1)-th oldest entry leaves.
    return remaining, window[count - limit + remaining] + period - now


def log_decide(window: tuple[int, ...], now: int, period: int, limit: int, cost: int) -> tuple[int, int | None]:
    """(status, retry_after) of ``cost`` units: 1 allowed, 0 denied, -1 never (cost > N)."""
    if cost > limit:
        return -1, None
    excess = len(window) + cost - limit
    if excess <= 0:
        return 1, 0
    return 0, window[excess - 1] + period - now


def sliding_log(entries: tuple[int, ...] | None, now: int, period: int, limit: int, cost: int = 1) -> SlidingResult:
    """Decide ``cost`` units against a log holding ``entries`` (None: a fresh key)."""
    window = log_window(entries, now, period)
    status, retry = log_decide(window, now, period, limit, cost)
    if status != 1:
        return SlidingResult(False, entries, retry, *log_view(window, now, period, limit))
    after = window + (now,) * cost
    return SlidingResult(True, after, 0, *log_view(after, now, period, limit))


# ---------------------------------------------------------------- the weighted window

def window_view(state: WindowState | None, now: int, period: int) -> tuple[int, int, int, int]:
    """(start, cur, prev, offset) of the window at ``now``, from the stored ``state``.

    A stored start at or after this window's (a step back of the clock, or a grid moved
    by a period change) still counts as this window, weighing its previous counter from
    the stored start; one within a period before counts as the previous window.
    """
    start = now - now % period
    if state is not None:
        s, cur, prev = state
        if s >= start:
            return s, cur, prev, max(0, now - s)
        if s >= start - period:
            return start, 0, cur, now - start
    return start, 0, 0, now - start


def _fits(cur: int, prev: int, offset: int, period: int, limit: int, need: int) -> bool:
    # prev * (period - offset) / period + cur + need <= limit, without dividing
    return cur + need <= limit and float(prev) * (period - offset) <= float(limit - cur - need) * period


def _earliest(prev: int, room: int, period: int) -> int:
    """The least offset ``x`` with prev * (period - x) <= room * period (prev > 0, room >= 0)."""
    x = period - math.floor(float(room) * period / prev)
    for _ in range(3):  # the division is rounded: step past it, as the check does
        if float(prev) * (period - x) <= float(room) * period:
            break
        x += 1
    return x


def window_wait(cur: int, prev: int, offset: int, period: int, limit: int, need: int) -> int:
    """us from ``offset`` until ``need`` units (at most ``limit``) fit."""
    if _fits(cur, prev, offset, period, limit, need):
        return 0
    if cur + need <= limit:  # the previous window's weight has to fade
        x = _earliest(prev, limit - cur - need, period)
        if x < period:
            return x - offset
        return period - offset  # next window: prev' = cur, which leaves room for need
    # Next window: prev' = cur, cur' = 0 (cur > 0 here, since cur + need > limit >= need).
    y = max(0, _earliest(cur, limit - need, period))
    if y < period:
        return period - offset + y
    return 2 * period - offset  # the window after: both counters empty


def window_remaining(cur: int, prev: int, offset: int, period: int, limit: int) -> int:
    remaining = limit - cur - math.ceil(float(prev) * (period - offset) / period)
    while remaining > 0 and not _fits(cur, prev, offset, period, limit, remaining):
        remaining -= 1  # rounded: never promise a unit the check would refuse
    return max(0, remaining)


def window_reset(cur: int, prev: int, offset: int, period: int, limit: int, remaining: int) -> int:
    if remaining >= limit:
        return 0
    return window_wait(cur, prev, offset, period, limit, remaining + 1)


def sliding_window(state: WindowState | None, now: int, period: int, limit: int, cost: int = 1) -> SlidingResult:
    """Decide ``cost`` units against a weighted window whose stored state is ``state``."""
    start, cur, prev, offset = window_view(state, now, period)
    if cost > limit:
        left = window_remaining(cur, prev, offset, period, limit)
        return SlidingResult(False, state, None, left, window_reset(cur, prev, offset, period, limit, left))
    if not _fits(cur, prev, offset, period, limit, cost):
        left = window_remaining(cur, prev, offset, period, limit)
        return SlidingResult(False, state, window_wait(cur, prev, offset, period, limit, cost), left,
                             window_reset(cur, prev, offset, period, limit, left))
    cur += cost
    left = window_remaining(cur, prev, offset, period, limit)
    return SlidingResult(True, (start, cur, prev), 0, left, window_reset(cur, prev, offset, period, limit, left))
