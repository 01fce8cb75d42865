"""The rate grammar: ``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"``, long unit names, and a
multiplier such as ``"10/30s"`` or ``"10/5m"``."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

__all__ = ["Rate", "parse_rate"]

_UNITS = {
    "s": 1, "sec": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}  # fmt: skip
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Rate:
    count: int
    period: int  # seconds

    @functools.cached_property
    def interval(self) -> int:
        """The emission interval in whole microseconds, rounded up so a rate never over-admits."""
        return math.ceil(self.period * 1_000_000 / self.count)

    def __str__(self) -> str:
        return f"{self.count}/{self.period}s"


def parse_rate(value: str) -> Rate:
    """Parse a rate string; raise ``ValueError`` naming the problem."""
    if not isinstance(value, str):
        raise ValueError(f"rate must be a string such as '5/m', not {value!r}")
    match = _RATE.match(value.lower())
    if not match:
        raise ValueError(f"invalid rate {value!r}: expected 'N/unit' such as '5/m' or '10/30s'")
    count, multiplier, unit = int(match[1]), match[2], match[3]
    if unit not in _UNITS:
        raise ValueError(f"invalid rate {value!r}: unknown unit {unit!r} (use s, m, h or d)")
    period = _UNITS[unit] * (int(multiplier) if multiplier else 1)
    if count < 1 or period < 1:
        raise ValueError(f"invalid rate {value!r}: count and period must be positive")
    if count > period * 1_000_000:
        raise ValueError(f"invalid rate {value!r}: more than one request per microsecond")
    return Rate(count, period)
