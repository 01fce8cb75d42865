"""Calendar periods of a quota (``"algorithm": "quota"``): pure, no Django, no Redis.

A period is an hour, a day, a week (ISO: from Monday), a month or a year of the wall
calendar of a time zone (``zoneinfo``). Days, weeks, months and years start at local
midnight, so across a daylight-saving change a day lasts 23 or 25 hours; an hour is
always 3600 s, aligned to the local wall clock.

The store's script knows no time zone. A decision sends it four period starts around the
time it expects the store to have (``Calendar.argument()``): the previous, the current,
the next and the one after (Unix us, ``"b0:b1:b2:b3"``); the script takes the period that
holds its own ``now``. Should the store's clock be outside ``[b0, b3)`` (a clock stepped
far, a test clock), the script says so and the decision is sent once more with the
boundaries around the store's time (``Calendar.moved``), which are then kept.
"""

from __future__ import annotations

import math
import time
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["NOMINAL_SECONDS", "PERIODS", "Calendar", "zone_problem"]

PERIODS = ("hour", "day", "week", "month", "year")
# A period's usual length (the Rate a quota is shown as); the boundaries are exact.
NOMINAL_SECONDS = {"hour": 3600, "day": 86400, "week": 7 * 86400, "month": 30 * 86400, "year": 365 * 86400}
MISS = -9  # the script's first reply value when its time is outside the boundaries sent


def zone_problem(tz: object) -> str | None:
    """Why ``tz`` is not a usable IANA time zone name, or None."""
    if not isinstance(tz, str) or not tz:
        return f"tz {tz!r} is not a time zone name"
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"unknown time zone {tz!r}"
    return None


def _wall_start(period: str, local: datetime) -> datetime:
    """The naive wall time at which the period holding ``local`` starts (not for hours)."""
    day = local.date()
    if period == "week":
        day -= timedelta(days=day.weekday())
    elif period == "month":
        day = day.replace(day=1)
    elif period == "year":
        day = date(day.year, 1, 1)
    return datetime(day.year, day.month, day.day)


def _wall_step(period: str, start: datetime, k: int) -> datetime:
    if period == "day":
        return start + timedelta(days=k)
    if period == "week":
        return start + timedelta(days=7 * k)
    if period == "month":
        months = start.year * 12 + start.month - 1 + k
        return datetime(months // 12, months % 12 + 1, 1)
    return datetime(start.year + k, 1, 1)


class Calendar:
    """The periods of one quota limit; caches the boundaries of the period in use (a
    decision asks for them every time; they change once a period)."""

    __slots__ = ("_cached", "offset", "period", "tz", "zone")

    def __init__(self, period: str, tz: str) -> None:
        if period not in PERIODS:
            raise ValueError(f"unknown period {period!r}; use one of {', '.join(PERIODS)}")
        self.period, self.tz, self.zone = period, tz, ZoneInfo(tz)
        self.offset = 0  # us: the store's clock less this host's, learned from a miss (Calendar.moved)
        self._cached: tuple[int, int, tuple[int, int, int, int], str] = (0, 0, (0, 0, 0, 0), "")

    def __repr__(self) -> str:
        return f"Calendar({self.period!r}, {self.tz!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Calendar) and (self.period, self.tz) == (other.period, other.tz)

    def __hash__(self) -> int:
        return hash((self.period, self.tz))

    def bounds_for(self, now_us: int) -> tuple[int, int, int, int]:
        """The starts (Unix us) of the period before the one holding ``now_us``, of that
        one, and of the two after it."""
        lo, hi, bounds, _ = self._cached
        if lo <= now_us < hi:
            return bounds
        bounds = self._compute(now_us)
        self._cached = (bounds[1], bounds[2], bounds, "%d:%d:%d:%d" % bounds)
        return bounds

    def _compute(self, now_us: int) -> tuple[int, int, int, int]:
        seconds = now_us / 1_000_000
        local = datetime.fromtimestamp(math.floor(seconds), self.zone)
        if self.period == "hour":
            into = local.minute * 60 + local.second  # the wall clock's offset into its hour
            start = (math.floor(seconds) - into) * 1_000_000
            if start > now_us:  # (never: floor), kept monotonic
                start -= 3_600_000_000
            return (start - 3_600_000_000, start, start + 3_600_000_000, start + 7_200_000_000)
        wall = _wall_start(self.period, local)
        # Local midnights as instants; a wall midnight a DST change skips resolves to the first
        # instant after it, and a day a zone skipped whole (Pacific/Apia, 30 December 2011) is
        # no period at all: equal starts are merged.
        starts = sorted({int(_wall_step(self.period, wall, k).replace(tzinfo=self.zone).timestamp()) * 1_000_000
                         for k in range(-3, 5)})
        i = max(k for k, start in enumerate(starts) if start <= now_us)
        return starts[i - 1], starts[i], starts[i + 1], starts[i + 2]

    def expected_now(self) -> int:
        """The time (us) the store is expected to have: this host's, corrected by the offset
        learned from the last miss."""
        return time.time_ns() // 1000 + self.offset

    def argument(self) -> str:
        """The script's argument: the four boundaries around the store's expected time."""
        now = self.expected_now()
        lo, hi, _, text = self._cached
        if lo <= now < hi:
            return text
        self.bounds_for(now)
        return self._cached[3]

    def moved(self, store_now: int) -> None:
        """The store's time was outside the boundaries sent: learn its offset, and keep the
        boundaries around it."""
        self.offset = store_now - time.time_ns() // 1000
        self.bounds_for(store_now)

    def length(self, now_us: int | None = None) -> int:
        """Seconds in the period holding ``now_us`` (default: the store's expected time)."""
        b = self.bounds_for(self.expected_now() if now_us is None else now_us)
        return (b[2] - b[1]) // 1_000_000
