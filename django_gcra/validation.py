"""The value tests every setting shares: whole numbers and finite numbers in a range.

``bool`` is refused wherever a number is asked for (``True`` is an ``int`` in Python),
and so are ``nan`` and the infinities: a timeout of ``inf`` or a cool-down of ``nan``
would switch a guard off instead of configuring it.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["is_int", "is_number", "max_wait_problem"]


def is_int(value: Any, minimum: int | None = None, maximum: int | None = None) -> bool:
    """An ``int`` (not a bool) within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return (minimum is None or value >= minimum) and (maximum is None or value <= maximum)


def is_number(value: Any, minimum: float | None = None, *, strict: bool = False,
              maximum: float | None = None) -> bool:
    """A finite int or float (not a bool) at least ``minimum`` (above it when ``strict``)
    and at most ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if not math.isfinite(value):
        return False
    if minimum is not None and (value <= minimum if strict else value < minimum):
        return False
    return maximum is None or value <= maximum


def max_wait_problem(value: Any) -> str | None:
    """What is wrong with a shaping ``max_wait`` (seconds), or None: a finite number >= 0."""
    if is_number(value, 0):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"must be >= 0 seconds, not {value!r}"
    return f"must be a finite number of seconds, not {value!r}"
