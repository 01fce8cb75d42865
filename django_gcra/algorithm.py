"""The pure GCRA twin of ``backends/gcra.lua``: no Django, no Redis.

All times are integer microseconds. The Lua script and this function must agree
on every input; ``tests/test_lua_twin.py`` checks that property.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GCRAResult", "gcra"]


@dataclass(frozen=True)
class GCRAResult:
    allowed: bool
    tat: int  # the TAT to store; unchanged on deny
    retry_after: int | None  # us until the request would be allowed; None if never
    remaining: int  # whole units still available after this decision
    reset_after: int  # us until the key is fully rested

    @property
    def impossible(self) -> bool:
        """True when the cost exceeds the burst: no wait will ever admit it."""
        return self.retry_after is None


def gcra(tat: int | None, now: int, interval: int, burst: int, cost: int = 1) -> GCRAResult:
    """Decide one request of ``cost`` units against a key whose stored TAT is ``tat``.

    ``tat=None`` is a fresh (or expired) key. ``cost=0`` peeks. The stored TAT
    only moves forward on an allow.
    """
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


@dataclass(frozen=True)
class CompositeResult:
    enforced: int  # ALLOWED, DENIED or IMPOSSIBLE over the enforcing limits
    would: int  # the same over every limit, shadow ones included
    retry_after: int | None  # us, for the binding limit; None if never satisfiable
    binding: int | None  # index of the binding limit, None when all allow
    writes: tuple[int | None, ...]  # the TAT to store per limit, None to leave it
    remaining: tuple[int, ...]
    reset_after: tuple[int, ...]
    cost: int = 1  # the units decided on: ``cost``, or with ``least`` the grant


def gcra_composite(
    tats: list[int | None],
    now: int,
    limits: list[tuple[int, int, bool]],
    cost: int = 1,
    least: int | None = None,
) -> CompositeResult:
    """All-or-nothing decision over several limits: ``limits`` holds (interval, burst, enforce).

    Every TAT is written when all limits allow. When only shadow limits deny, the
    enforcing limits are written and the shadow ones are not (a hypothetical denial
    consumes nothing). When an enforcing limit denies, nothing is written.

    With ``least`` (a lease refill), the cost becomes as many units as every limit has
    free now, at most ``cost`` and at least ``least``; then the decision runs as above.
    """
    if least is not None:
        free = [(now + i * b - max(now if tat is None else tat, now)) // i for tat, (i, b, _) in zip(tats, limits)]
        cost = max(least, min([cost, *free]))
    results = [gcra(tat, now, i, b, cost) for tat, (i, b, _) in zip(tats, limits)]

    def worst(indices: list[int]) -> tuple[int, int | None, int | None]:
        denied = [i for i in indices if not results[i].allowed]
        if not denied:
            return ALLOWED, None, None
        status = IMPOSSIBLE if any(results[i].impossible for i in denied) else DENIED
        # Never-satisfiable binds first, then the longest wait; ties go to the first limit.
        bind = max(denied, key=lambda i: (results[i].impossible, results[i].retry_after or 0, -i))
        return status, bind, results[bind].retry_after

    enforcing = [i for i, (_, _, enforce) in enumerate(limits) if enforce]
    enforced, e_bind, e_retry = worst(enforcing)
    would, s_bind, s_retry = worst(list(range(len(limits))))
    binding, retry = (e_bind, e_retry) if enforced != ALLOWED else (s_bind, s_retry)

    writes: list[int | None] = []
    remaining, reset_after = [], []
    for result, tat, (interval, burst, enforce) in zip(results, tats, limits):
        write = enforced == ALLOWED and result.allowed and (would == ALLOWED or enforce)
        stored = result.tat if write else (now if tat is None or tat < now else tat)
        writes.append(stored if write and cost > 0 else None)
        remaining.append(_remaining(stored, now, interval, interval * burst))
        reset_after.append(stored - now)
    return CompositeResult(
        enforced, would, retry if binding is not None else 0, binding, tuple(writes), tuple(remaining),
        tuple(reset_after), cost,
    )
