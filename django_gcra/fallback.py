"""What a decision answers when the store fails: the policy's ``on_failure``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .backends import BackendError, LimitSpec, Outcome
from .backends.memory import MemoryBackend

if TYPE_CHECKING:
    from .limiter import Plan

logger = logging.getLogger("django_gcra")
local_backend = MemoryBackend()  # the per-process store of on_failure="local"


CLOSED = object()  # on_failure="closed": deny without a limit having been exceeded


def on_failure(p: Plan, exc: BackendError) -> Outcome | object | None:
    """The outcome the failure policy gives: None fails open, CLOSED fails closed."""
    logger.warning("django_gcra: store failed for policy %r (on_failure=%s): %s", p.policy.name,
                   p.policy.on_failure, exc)
    if p.policy.on_failure == "open":
        return None
    if p.policy.on_failure == "closed":
        return CLOSED
    specs = [
        LimitSpec(spec.key, (pl.limit.fallback_rate or pl.rate).interval,
                  pl.limit.fallback_rate.count if pl.limit.fallback_rate else spec.burst, spec.enforce)
        for spec, pl in zip(p.specs, p.limits)
    ]
    return local_backend.evaluate(specs, p.cost)
