"""Client signalling: quota headers and the 429 response.

Mapping GCRA onto quota fields: a limit of rate N per period P with burst B
advertises a quota of B units (``X-RateLimit-Limit``, ``q``) over the time B units
take to refill (``w``, whole seconds rounded up). ``remaining`` is the units still
available now, and the reset is when the key is fully rested. The IETF fields follow
draft-ietf-httpapi-ratelimit-headers-11.
"""

from __future__ import annotations

import json
import math
import time

from django.http import HttpResponse

from .decision import Decision, LimitState

__all__ = ["quota_headers", "too_many_requests", "retry_after_header"]


def retry_after_header(retry_after: float) -> str:
    """Whole seconds, rounded up: a client that waits exactly this long is admitted."""
    return str(max(1, math.ceil(retry_after)))


def _window(state: LimitState) -> int:
    return max(1, math.ceil(state.burst * state.rate.interval / 1_000_000))


def quota_headers(decision: Decision) -> dict[str, str]:
    binding = decision.binding
    if binding is None:
        return {}
    headers = {
        "X-RateLimit-Limit": str(binding.burst),
        "X-RateLimit-Remaining": str(decision.remaining),
        "X-RateLimit-Reset": str(math.ceil(time.time() + binding.reset_after)),
        "RateLimit-Policy": ", ".join(f'"{s.name}";q={s.burst};w={_window(s)}' for s in decision.limits),
    }
    if decision.allowed:
        headers["RateLimit"] = f'"{binding.name}";r={decision.remaining};t={math.ceil(binding.reset_after)}'
    else:
        wait = retry_after_header(decision.retry_after) if not decision.impossible else str(_window(binding))
        headers["RateLimit"] = f'"{binding.name}";r=0;t={wait}'
        if not decision.impossible:
            headers["Retry-After"] = wait
    return headers


def too_many_requests(decision: Decision) -> HttpResponse:
    """The 429 response: JSON body and every quota header."""
    if decision.impossible:
        message = (f"This request costs {decision.cost} units, more than the {decision.limit!r} limit's burst "
                   "allows; it can never be admitted.")
        body = {"error": "too_many_requests", "message": message, "retry_after_seconds": None}
    else:
        seconds = int(retry_after_header(decision.retry_after))
        message = f"Rate limit {decision.limit!r} exceeded; retry in {seconds} s."
        body = {"error": "too_many_requests", "message": message, "retry_after_seconds": seconds}
    response = HttpResponse(json.dumps(body), status=429, content_type="application/json")
    for name, value in decision.headers().items():
        response[name] = value
    return response
