"""The pure twin of ``backends/gcra.lua``: no Django, no Redis. GCRA here; the sliding
log and the weighted window in ``sliding.py``; ``composite`` decides any mix of them.

All times are integer microseconds. The Lua script and this function must agree
on every input; ``tests/test_lua_twin.py`` checks that property.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .metered import period_of, quota, quota_view
from .sliding import (
    SlidingResult,
    log_decide,
    log_view,
    log_window,
    sliding_log,
    sliding_window,
    window_remaining,
    window_reset,
    window_view,
)

__all__ = ["ALGORITHMS", "CONCURRENCY", "GCRA", "QUOTA", "SLIDING_LOG", "SLIDING_WINDOW", "CompositeResult",
           "GCRAResult", "SlidingResult", "composite", "gcra", "gcra_composite", "sliding_log", "sliding_window"]


@dataclass(frozen=True)
class GCRAResult:
    allowed: bool
    tat: int  # the TAT to store; unchanged on deny
    retry_after: int | None  # us until the request would be allowed; None if never
    remaining: int  # whole units still available after this decision
    reset_after: int  # us until the key is fully rested
    waited: int = 0  # us until the reserved slot (shaping); 0: admitted now

    @property
    def impossible(self) -> bool:
        """True when the cost exceeds the burst: no wait will ever admit it."""
        return self.retry_after is None


def gcra(tat: int | None, now: int, interval: int, burst: int, cost: int = 1, max_wait: int = 0) -> GCRAResult:
    """Decide one request of ``cost`` units against a key whose stored TAT is ``tat``.

    ``tat=None`` is a fresh (or expired) key. ``cost=0`` peeks. The stored TAT
    only moves forward on an allow.

    Shaping: with ``max_wait`` > 0, a request denied for at most ``max_wait`` us is
    admitted for its own future slot instead: the TAT moves on as for an admitted request
    and ``waited`` is the retry-after it would have been told (the caller waits that long).
    """
    if max_wait > 0:
        result = gcra(tat, now, interval, burst, cost)
        if result.allowed or result.retry_after is None or result.retry_after > max_wait:
            return result
        new_tat = result.tat + interval * cost
        return GCRAResult(True, new_tat, 0, _remaining(new_tat, now, interval, interval * burst), new_tat - now,
                          result.retry_after)
    current = now if tat is None or tat < now else tat
    tolerance = interval * burst
    if cost > burst:
        return GCRAResult(False, current, None, _remaining(current, now, interval, tolerance), current - now)
    new_tat = current + interval * cost
    allow_at = new_tat - tolerance
    if allow_at > now:
        return GCRAResult(False, current, allow_at - now, _remaining(current, now, interval, tolerance), current - now)
    return GCRAResult(True, new_tat, 0, _remaining(new_tat, now, interval, tolerance), new_tat - now)


def _remaining(tat: int, now: int, interval: int, tolerance: int) -> int:
    return max(0, (now + tolerance - tat) // interval)


# Status codes shared with the Lua script.
ALLOWED, DENIED, IMPOSSIBLE = 1, 0, -1

# Algorithm codes shared with the Lua script (a limit's flag is 2 * algorithm + enforce).
GCRA, SLIDING_LOG, SLIDING_WINDOW = 0, 1, 2
CONCURRENCY = 3  # a concurrency limit's slots (not a rate algorithm: never in ALGORITHMS)
QUOTA = 4  # a calendar quota (metered.py): a = the four period starts, b = its units per period
ALGORITHMS = {"gcra": GCRA, "sliding_log": SLIDING_LOG, "sliding_window": SLIDING_WINDOW, "quota": QUOTA}

State = Any  # per limit: a GCRA TAT (int), the log's entry times, or a WindowState; None: fresh


@dataclass(frozen=True)
class CompositeResult:
    enforced: int  # ALLOWED, DENIED or IMPOSSIBLE over the enforcing limits
    would: int  # the same over every limit, shadow ones included
    retry_after: int | None  # us, for the binding limit; None if never satisfiable
    binding: int | None  # index of the binding limit, None when all allow
    writes: tuple[State, ...]  # the state to store per limit, None to leave it
    remaining: tuple[int, ...]
    reset_after: tuple[int, ...]
    cost: int = 1  # the units decided on: ``cost``, or with ``least`` the grant
    waited: int = 0  # us until the reserved slot (shaping, ``max_wait``); 0: admitted now


class _Limit:
    """One limit's decision inside a composite: its status, and its view with or without the write."""

    __slots__ = ("after", "before", "new", "retry", "status")

    def __init__(self, algorithm: int, state: State, now: int, a: Any, b: int, cost: int) -> None:
        # a, b: interval and burst (GCRA), period and limit (the sliding algorithms), or the
        # four period starts and the units per period (a quota).
        if algorithm == QUOTA:
            status, retry, used_state, used = quota(state, now, a, b, cost)
            end = period_of(a, now)[1]  # type: ignore[index]  # (quota raised if None)
            self.status, self.retry = status, retry
            self.new: State = used_state
            new = used_state
            self.before = quota_view(used, end, now, b)
            self.after = quota_view(new[1], end, now, b)
        elif algorithm == GCRA:
            tat = gcra(state, now, a, b, cost)
            current = now if state is None or state < now else state
            self.before = (_remaining(current, now, a, a * b), current - now)
            self.after = (tat.remaining, tat.reset_after)
            self.new = tat.tat
            self.status = ALLOWED if tat.allowed else IMPOSSIBLE if tat.impossible else DENIED
            self.retry = tat.retry_after
        elif algorithm == SLIDING_LOG:
            window = log_window(state, now, a)
            self.status, self.retry = log_decide(window, now, a, b, cost)
            self.before = log_view(window, now, a, b)
            self.new = window + (now,) * cost
            self.after = log_view(self.new, now, a, b)
        else:
            result = sliding_window(state, now, a, b, cost)
            self.status = ALLOWED if result.allowed else IMPOSSIBLE if result.impossible else DENIED
            self.retry = result.retry_after
            _, cur, prev, offset = window_view(state, now, a)
            left = window_remaining(cur, prev, offset, a, b)
            self.before = (left, window_reset(cur, prev, offset, a, b, left))
            self.new, self.after = result.state, (result.remaining, result.reset_after)


def composite(
    states: Sequence[State],
    now: int,
    limits: Sequence[tuple[int, Any, int, bool]],
    cost: int = 1,
    least: int | None = None,
    max_wait: int = 0,
) -> CompositeResult:
    """All-or-nothing decision over limits of any algorithm: ``limits`` holds
    (algorithm, a, b, enforce), where a, b are interval and burst for GCRA, period and N
    for the sliding algorithms, the four period starts and the units per period for a
    quota; ``states`` what each key stores (None: fresh).

    Every limit's state is written when all limits allow. When only shadow limits deny,
    the enforcing limits are written and the shadow ones are not (a hypothetical denial
    consumes nothing). When an enforcing limit denies, nothing is written.

    With ``least`` (a lease refill), the cost becomes as many units as every GCRA limit
    has free now, at most ``cost`` and at least ``least``; then the decision runs as
    above. (Leases never run on sliding limits: a check refuses them.)

    Shaping: with ``max_wait`` > 0 (never with ``least``), a decision its enforcing
    limits deny for at most ``max_wait`` us, all of them GCRA, is a reservation: every
    enforcing limit is written as admitted (a denying one's TAT pushed on by the cost),
    ``waited`` is the largest retry-after over them, and the shadow limits are judged as
    now (a shadow limit never makes a caller wait). A decision with an enforcing sliding
    limit never waits. Beyond ``max_wait`` nothing changes: denied, nothing written.
    """
    if least is not None:
        free = [(now + a * b - max(now if st is None else st, now)) // a
                for st, (alg, a, b, _) in zip(states, limits) if alg == GCRA]
        cost = max(least, min([cost, *free]))
    results = [_Limit(alg, st, now, a, b, cost) for st, (alg, a, b, _) in zip(states, limits)]

    def worst(indices: list[int]) -> tuple[int, int | None, int | None]:
        denied = [i for i in indices if results[i].status != ALLOWED]
        if not denied:
            return ALLOWED, None, None
        status = IMPOSSIBLE if any(results[i].status == IMPOSSIBLE for i in denied) else DENIED
        # Never-satisfiable binds first, then the longest wait; ties go to the first limit.
        bind = max(denied, key=lambda i: (results[i].status == IMPOSSIBLE, results[i].retry or 0, -i))
        return status, bind, results[bind].retry

    enforcing = [i for i, (_, _, _, enforce) in enumerate(limits) if enforce]
    enforced, e_bind, e_retry = worst(enforcing)
    would, s_bind, s_retry = worst(list(range(len(limits))))
    binding, retry = (e_bind, e_retry) if enforced != ALLOWED else (s_bind, s_retry)
    waited = 0
    if (max_wait > 0 and least is None and enforced == DENIED and e_retry is not None and e_retry <= max_wait
            and all(limits[i][0] == GCRA for i in enforcing)):
        waited = e_retry
        for i in enforcing:
            result = results[i]
            if result.status != ALLOWED:  # its slot: the TAT moves on from where it stands
                _, a, b, _ = limits[i]
                current = max(now if states[i] is None else states[i], now)
                result.new = current + a * cost
                result.after = (_remaining(result.new, now, a, a * b), result.new - now)
                result.status = ALLOWED
        enforced = ALLOWED
        would, binding, retry = worst([i for i, (_, _, _, enforce) in enumerate(limits) if not enforce])

    writes: list[State] = []
    remaining, reset_after = [], []
    for result, (_, _, _, enforce) in zip(results, limits):
        write = enforced == ALLOWED and result.status == ALLOWED and (would == ALLOWED or enforce)
        writes.append(result.new if write and cost > 0 else None)
        left, reset = result.after if write else result.before
        remaining.append(left)
        reset_after.append(reset)
    return CompositeResult(
        enforced, would, retry if binding is not None else 0, binding, tuple(writes), tuple(remaining),
        tuple(reset_after), cost, waited,
    )


def gcra_composite(
    tats: list[int | None],
    now: int,
    limits: list[tuple[int, int, bool]],
    cost: int = 1,
    least: int | None = None,
    max_wait: int = 0,
) -> CompositeResult:
    """``composite`` over GCRA limits only: ``limits`` holds (interval, burst, enforce)."""
    return composite(tats, now, [(GCRA, i, b, e) for i, b, e in limits], cost, least, max_wait)
