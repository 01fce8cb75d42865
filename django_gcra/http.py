"""Client signalling: quota headers and the denied response, shared by every surface.

Quota fields follow draft-ietf-httpapi-ratelimit-headers-11. For a limit of rate N
per period P with burst B:

- ``q`` (``X-RateLimit-Limit``) = B, the units a rested key admits at once;
- ``w`` = the seconds B units take to refill (B * P / N, rounded up);
- ``r`` (``X-RateLimit-Remaining``) = the units still available now;
- ``t`` = the seconds until the key is fully rested; on a denial, the Retry-After.
  ``X-RateLimit-Reset`` is the Unix time now + t.

``RateLimit-Policy`` lists every limit evaluated; ``RateLimit`` names the binding one.
The ``HEADERS`` setting picks the fields: ``draft-11`` (X-RateLimit-* and the two
draft-11 fields), ``draft-03`` (X-RateLimit-* and RateLimit-Limit/-Remaining/-Reset),
``x-ratelimit`` or ``none``. ``Retry-After`` (whole seconds, rounded up) is sent on
every denial whatever the style, except when no wait can ever admit the request.

Denials: 429 Too Many Requests; 503 Service Unavailable when the policy fails closed
because the store is unreachable (``Decision.unavailable``: no limit was exceeded).
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import time
from typing import Any

from asgiref.sync import async_to_sync
from django.http import HttpResponse
from django.utils.cache import patch_vary_headers
from django.utils.module_loading import import_string

from .conf import setting
from .decision import Decision, LimitState

__all__ = ["STYLES", "quota_headers", "apply_quota_headers", "denial_status", "too_many_requests",
           "denied_response", "adenied_response", "denial_message", "retry_after_header", "DRAFT"]

DRAFT = "draft-ietf-httpapi-ratelimit-headers-11"
STYLES = ("draft-11", "draft-03", "x-ratelimit", "none")
PROBLEM_TYPES = "https://iana.org/assignments/http-problem-types#"


def retry_after_header(retry_after: float) -> str:
    """Whole seconds, rounded up: a client that waits exactly this long is admitted."""
    return str(max(1, math.ceil(retry_after)))


def _window(state: LimitState) -> int:
    return max(1, math.ceil(state.burst * state.rate.interval / 1_000_000))


def _sf_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quota_headers(decision: Decision, style: str | None = None) -> dict[str, str]:
    """The quota headers for ``decision`` and, on a denial, ``Retry-After``."""
    style = setting("HEADERS") if style is None else style
    headers: dict[str, str] = {}
    if not decision.allowed and not decision.impossible:
        headers["Retry-After"] = retry_after_header(decision.retry_after)
    binding = decision.binding
    if binding is None or style == "none":
        return headers
    if decision.allowed:
        remaining, reset = decision.remaining, math.ceil(binding.reset_after)
    else:
        remaining, reset = 0, int(headers.get("Retry-After", _window(binding)))
    headers["X-RateLimit-Limit"] = str(binding.burst)
    headers["X-RateLimit-Remaining"] = str(remaining)
    headers["X-RateLimit-Reset"] = str(math.ceil(time.time()) + reset)
    if style == "draft-11":
        headers["RateLimit-Policy"] = ", ".join(f"{_sf_string(s.name)};q={s.burst};w={_window(s)}"
                                                for s in decision.limits)
        headers["RateLimit"] = f"{_sf_string(binding.name)};r={remaining};t={reset}"
    elif style == "draft-03":
        headers.update({"RateLimit-Limit": str(binding.burst), "RateLimit-Remaining": str(remaining),
                        "RateLimit-Reset": str(reset)})
    return headers


def apply_quota_headers(response: Any, decision: Decision) -> Any:
    """Add the quota headers to ``response`` without replacing any it already has.

    ``Retry-After`` is added only to 429 and 503 responses (a ``block=False`` view
    that chose to answer normally is not told to wait).
    """
    for name, value in quota_headers(decision).items():
        if name == "Retry-After" and response.status_code not in (429, 503):
            continue
        if name not in response:
            response[name] = value
    return response


def denial_status(decision: Decision) -> int:
    """503 when failing closed on an unreachable store, else 429."""
    return 503 if decision.unavailable else 429


def _wants_problem_json(request: Any) -> bool:
    """True when the client names application/problem+json (a wildcard is not enough)."""
    accept = request.headers.get("Accept", "") if request is not None else ""
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() == "application/problem+json":
            return not any(p.replace(" ", "").lower() in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params)
    return False


def denial_message(decision: Decision) -> str:
    """A human-readable reason for the denial."""
    if decision.impossible:
        return (f"This request costs {decision.cost} units, more than the {decision.limit!r} limit's burst "
                "allows; it can never be admitted.")
    seconds = retry_after_header(decision.retry_after)
    if decision.unavailable:
        return f"Rate limiting is temporarily unavailable; retry in {seconds} s."
    return f"Rate limit {decision.limit!r} exceeded; retry in {seconds} s."


def too_many_requests(decision: Decision, request: Any = None) -> HttpResponse:
    """The built-in denied response: JSON (or problem+json when asked for) and every header."""
    status = denial_status(decision)
    seconds = None if decision.impossible else int(retry_after_header(decision.retry_after))
    message = denial_message(decision)
    if _wants_problem_json(request):
        kind, title = (("temporary-reduced-capacity", "Temporary reduced capacity") if decision.unavailable
                       else ("quota-exceeded", "Quota exceeded"))
        body: dict[str, Any] = {"type": PROBLEM_TYPES + kind, "title": title, "status": status, "detail": message,
                                "violated-policies": [decision.limit or decision.policy]}
        content_type = "application/problem+json"
    else:
        error = "service_unavailable" if decision.unavailable else "too_many_requests"
        body = {"error": error, "message": message}
        content_type = "application/json"
    body["retry_after_seconds"] = seconds
    response = HttpResponse(json.dumps(body), status=status, content_type=content_type)
    if request is not None:
        patch_vary_headers(response, ["Accept"])
    return apply_quota_headers(response, decision)


@functools.cache
def _denied_view(path: str) -> Any:
    return import_string(path)


def denied_response(request: Any, decision: Decision) -> HttpResponse:
    """The response to a denied request: ``DENIED_VIEW(request, decision)`` if set, else
    ``too_many_requests``; the quota headers are added either way."""
    path = setting("DENIED_VIEW")
    if not path:
        return too_many_requests(decision, request)
    response = _denied_view(path)(request, decision)
    if inspect.isawaitable(response):  # an async DENIED_VIEW behind a sync surface
        response = async_to_sync(_awaited)(response)
    return apply_quota_headers(response, decision)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


async def adenied_response(request: Any, decision: Decision) -> HttpResponse:
    """``denied_response`` for async surfaces; an async ``DENIED_VIEW`` is awaited."""
    path = setting("DENIED_VIEW")
    if not path:
        return too_many_requests(decision, request)
    response = _denied_view(path)(request, decision)
    if inspect.isawaitable(response):
        response = await response
    return apply_quota_headers(response, decision)
