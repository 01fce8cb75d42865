"""Quota headers for a decision (draft-ietf-httpapi-ratelimit-headers-11 and older styles).

For a limit of rate N per period P with burst B:

- ``q`` (``X-RateLimit-Limit``) = B, the units a rested key admits at once;
- ``w`` = the seconds B units take to refill (B * P / N, rounded up);
- ``r`` (``X-RateLimit-Remaining``) = the units still available now;
- ``t`` = the seconds until the key is fully rested; on a denial, the Retry-After.
  ``X-RateLimit-Reset`` is the Unix time now + t.

For a sliding limit (``sliding_log``, ``sliding_window``) of N per period P:

- ``q`` = N, the units admitted in any rolling period; ``w`` = P in seconds;
- ``r`` = the units still available now;
- ``t`` = the seconds until the next unit frees (the oldest entry leaves the log, or the
  weighted estimate drops by one); on a denial, the Retry-After.

For a concurrency limit of ``max`` slots: ``q`` = max with ``qu="concurrent-requests"``
and no ``w`` (a slot is not restored by time but when a request ends); ``r`` = the slots
still free; ``t`` = 0, or on a denial the Retry-After.

Only enforced limits are shown: a shadow limit is never advertised, and a policy whose
limits are all in shadow sends no quota header. ``RateLimit-Policy`` lists every
enforced limit evaluated; ``RateLimit`` names the binding one. The ``HEADERS`` setting
picks the fields: ``draft-11`` (X-RateLimit-* and the two draft-11 fields), ``draft-03``
(X-RateLimit-* and RateLimit-Limit/-Remaining/-Reset), ``x-ratelimit``, ``github``
(X-RateLimit-* as GitHub's API sends them: also ``X-RateLimit-Used``, the units used of
the limit, and ``X-RateLimit-Resource``, the policy's name) or ``none``; or a list of
styles, whose fields are all sent (``["draft-11", "github"]``).
``Retry-After`` (whole seconds, rounded up) is sent on every denial whatever the style,
except when no wait can ever admit the request.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Protocol

from .conf import get_settings
from .rates import Rate

__all__ = ["Decided", "LimitState", "enforced_binding", "quota_headers", "retry_after_header"]


class LimitState(Protocol):
    """What the headers read of one evaluated limit (``decision.LimitState``)."""

    @property
    def name(self) -> str: ...
    @property
    def rate(self) -> Rate: ...
    @property
    def burst(self) -> int: ...
    @property
    def remaining(self) -> int: ...
    @property
    def reset_after(self) -> float: ...
    @property
    def mode(self) -> str: ...
    @property
    def algorithm(self) -> str: ...


class Decided(Protocol):
    """What the headers read of a decision (``decision.Decision``; described here, so this
    module, which the decision renders itself with, does not import it)."""

    @property
    def allowed(self) -> bool: ...
    @property
    def retry_after(self) -> float: ...
    @property
    def policy(self) -> str: ...
    @property
    def blocked(self) -> bool: ...
    @property
    def limits(self) -> Sequence[LimitState]: ...
    @property
    def impossible(self) -> bool: ...
    @property
    def binding(self) -> LimitState | None: ...


def retry_after_header(retry_after: float) -> str:
    """Whole seconds, rounded up: a client that waits exactly this long is admitted."""
    return str(max(1, math.ceil(retry_after)))


def _window(state: LimitState) -> int:
    if state.algorithm != "gcra":
        return state.rate.period
    return max(1, math.ceil(state.burst * state.rate.interval / 1_000_000))


def _policy_item(state: LimitState) -> str:
    if state.algorithm == "concurrency":
        return f'{_sf_string(state.name)};q={state.burst};qu="concurrent-requests"'
    return f"{_sf_string(state.name)};q={state.burst};w={_window(state)}"


def _sf_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def enforced_binding(decision: Decided) -> tuple[LimitState | None, Sequence[LimitState]]:
    """The limit a client is told about, and every enforced limit: on a denial the
    denying limit, else the enforced one with the least remaining; (None, ()) when no
    enforced limit was evaluated."""
    enforced = [s for s in decision.limits if s.mode == "enforce"]
    if not enforced:
        return None, ()
    if not decision.allowed:
        binding = decision.binding
        if binding is not None and binding.mode == "enforce":
            return binding, enforced
    return min(enforced, key=lambda s: s.remaining), enforced


def quota_headers(decision: Decided, style: str | Sequence[str] | None = None) -> dict[str, str]:
    """The quota headers for ``decision`` and, on a denial, ``Retry-After``; ``style``: one
    style or several (default: the ``HEADERS`` setting)."""
    styles = get_settings().headers if style is None else (style,) if isinstance(style, str) else tuple(style)
    headers: dict[str, str] = {}
    if not decision.allowed and not decision.impossible and not decision.blocked:  # (a 403 is no "retry later")
        headers["Retry-After"] = retry_after_header(decision.retry_after)
    if not styles or styles == ("none",):
        return headers
    binding, enforced = enforced_binding(decision)
    if binding is None:
        return headers
    if decision.allowed:
        remaining, reset = binding.remaining, math.ceil(binding.reset_after)
    else:
        remaining, reset = 0, int(headers.get("Retry-After", _window(binding)))
    headers["X-RateLimit-Limit"] = str(binding.burst)
    headers["X-RateLimit-Remaining"] = str(remaining)
    headers["X-RateLimit-Reset"] = str(math.ceil(time.time()) + reset)
    if "github" in styles:
        headers["X-RateLimit-Used"] = str(max(0, binding.burst - remaining))
        headers["X-RateLimit-Resource"] = decision.policy
    if "draft-11" in styles:
        headers["RateLimit-Policy"] = ", ".join(_policy_item(s) for s in enforced)
        headers["RateLimit"] = f"{_sf_string(binding.name)};r={remaining};t={reset}"
    if "draft-03" in styles:
        headers.update({"RateLimit-Limit": str(binding.burst), "RateLimit-Remaining": str(remaining),
                        "RateLimit-Reset": str(reset)})
    return headers
