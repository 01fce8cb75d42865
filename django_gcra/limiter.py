"""``decide()`` and ``adecide()``: the engine in force decides (``engine.py``).

Shadow mode, the failure policy and the decision signal live below, in one place; the
middleware, the decorator and the DRF throttles all come through ``decide``/``adecide``.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any

from django.http import HttpRequest

from . import engine
from .decision import Decision
from .engine import current
from .plan import get_policy
from .policy import Policy

__all__ = ["adecide", "decide", "get_policy"]


def decide(policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1, *,
           max_wait: float = 0.0, request: HttpRequest | None = None) -> Decision:
    """Decide whether ``cost`` units may pass ``policy`` for these descriptors.

    ``descriptors`` maps each descriptor the policy's limits use to a value; None
    skips the limits that use it. ``cost=0`` peeks without consuming. ``request`` is
    passed to the ``decision`` signal (audit, metrics); exempt and deny rules read it too
    (its address, the descriptors not passed, the callable rules: ``access.py``).

    ``max_wait`` (seconds; shaping): a request that would be denied but fits within
    ``max_wait`` gets its own future slot in the same script call, and ``decide`` returns
    (allowed, ``waited`` set) only after sleeping until then. Beyond it: denied, nothing
    consumed. Shadow limits, sliding limits and fallback decisions never wait.
    """
    return (engine.running or current()).decide(policy, descriptors, cost, max_wait, request)


def adecide(policy: str | Policy, descriptors: Mapping[str, Any], cost: int = 1, *,
            max_wait: float = 0.0, request: HttpRequest | None = None) -> Coroutine[Any, Any, Decision]:
    """``decide()`` for async code: never blocks the event loop on the store, and waits
    for a reserved slot with ``asyncio.sleep`` (a cancelled wait still used its slot).
    (The engine's coroutine itself, with no coroutine around it: one frame less per decision.)"""
    return (engine.running or current()).adecide(policy, descriptors, cost, max_wait, request)
