"""Per-descriptor overrides of a limit (the policy plane). Without any, limits apply as configured."""

from __future__ import annotations

from collections.abc import Mapping

from .policy import Limit, Policy
from .rates import Rate


def apply_override(policy: Policy, limit: Limit, values: Mapping[str, str], rate: Rate, burst: int,
                   mode: str) -> tuple[Rate, int, str] | None:
    """The (rate, burst, mode) in force for this limit and these descriptor values;
    None when an override turns the limit off."""
    return rate, burst, mode
