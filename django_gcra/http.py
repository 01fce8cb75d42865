"""The denied response and the quota headers on responses, shared by every surface.

Denials: 429 Too Many Requests; 503 Service Unavailable when the policy fails closed
because the store is unreachable (``Decision.unavailable``: no limit was exceeded), or
when a concurrency limit of ``key: []`` is full (``Decision.capacity``: the service, not
this caller, is at its limit). 403 Forbidden when a deny rule matched
(``Decision.blocked``: ``forbidden``, without ``Retry-After`` or quota headers). The
header fields themselves are rendered by ``headers.py``.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable
from typing import Any

from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.cache import patch_vary_headers
from django.utils.module_loading import import_string

from .conf import get_settings, on_change
from .decision import Decision
from .headers import quota_headers, retry_after_header

__all__ = ["FORBIDDEN_MESSAGE", "adenied_response", "apply_quota_headers", "denial_message", "denial_status",
           "denied_response", "forbidden", "quota_headers", "retry_after_header", "too_many_requests"]

PROBLEM_TYPES = "https://iana.org/assignments/http-problem-types#"
FORBIDDEN_MESSAGE = "Access to this resource is denied."  # (never says which rule: no hint to route around it)


def apply_quota_headers(response: HttpResponseBase, decision: Decision) -> HttpResponseBase:
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
    """403 when a deny rule matched; 503 when failing closed on an unreachable store or at
    capacity (a full concurrency limit of ``key: []``); else 429."""
    if decision.blocked:
        return 403
    return 503 if decision.unavailable or decision.capacity else 429


def _wants_problem_json(request: HttpRequest | None) -> bool:
    """True when the client names application/problem+json (a wildcard is not enough)."""
    accept = request.headers.get("Accept", "") if request is not None else ""
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() == "application/problem+json":
            return not any(p.replace(" ", "").lower() in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params)
    return False


def denial_message(decision: Decision) -> str:
    """A human-readable reason for the denial."""
    if decision.blocked:
        return FORBIDDEN_MESSAGE
    if decision.impossible:
        return (f"This request costs {decision.cost} units, more than the {decision.limit!r} limit's burst "
                "allows; it can never be admitted.")
    seconds = retry_after_header(decision.retry_after)
    if decision.unavailable:
        return f"Rate limiting is temporarily unavailable; retry in {seconds} s."
    if decision.capacity:
        return f"The service is at capacity ({decision.limit!r}: too many requests in flight); retry in {seconds} s."
    binding = decision.binding
    if binding is not None and binding.algorithm == "concurrency":
        return (f"Too many requests in flight for {decision.limit!r} (at most {binding.burst} at once); retry in "
                f"{seconds} s.")
    return f"Rate limit {decision.limit!r} exceeded; retry in {seconds} s."


def too_many_requests(decision: Decision, request: HttpRequest | None = None) -> HttpResponseBase:
    """The built-in denied response: JSON (or problem+json when asked for) and every header."""
    status = denial_status(decision)
    seconds = None if decision.impossible else int(retry_after_header(decision.retry_after))
    message = denial_message(decision)
    if _wants_problem_json(request):
        kind, title = (("temporary-reduced-capacity", "Temporary reduced capacity")
                       if decision.unavailable or decision.capacity else ("quota-exceeded", "Quota exceeded"))
        body: dict[str, Any] = {"type": PROBLEM_TYPES + kind, "title": title, "status": status, "detail": message,
                                "violated-policies": [decision.limit or decision.policy]}
        content_type = "application/problem+json"
    else:
        error = "service_unavailable" if decision.unavailable or decision.capacity else "too_many_requests"
        body = {"error": error, "message": message}
        content_type = "application/json"
    body["retry_after_seconds"] = seconds
    response = HttpResponse(json.dumps(body), status=status, content_type=content_type)
    if request is not None:
        patch_vary_headers(response, ["Accept"])
    return apply_quota_headers(response, decision)


def forbidden(decision: Decision, request: HttpRequest | None = None) -> HttpResponseBase:
    """The response to a request a deny rule refused: 403 with ``{"error": "forbidden",
    "message": ...}`` (problem+json when asked for), no ``Retry-After``, no quota header."""
    message = denial_message(decision)
    if _wants_problem_json(request):
        body: dict[str, Any] = {"type": "about:blank", "title": "Forbidden", "status": 403, "detail": message}
        content_type = "application/problem+json"
    else:
        body, content_type = {"error": "forbidden", "message": message}, "application/json"
    response = HttpResponse(json.dumps(body), status=403, content_type=content_type)
    if request is not None:
        patch_vary_headers(response, ["Accept"])
    return response


@functools.cache
def _denied_view(path: str) -> Any:
    return import_string(path)


on_change(_denied_view.cache_clear)


def _denied(request: HttpRequest, decision: Decision) -> HttpResponseBase | Awaitable[HttpResponseBase]:
    if decision.blocked:  # a deny rule: always the 403 above (DENIED_VIEW answers rate limits)
        return forbidden(decision, request)
    path = get_settings().denied_view
    if not path:
        return too_many_requests(decision, request)
    return _denied_view(path)(request, decision)


def denied_response(request: HttpRequest, decision: Decision) -> HttpResponseBase:
    """The response to a denied request: ``DENIED_VIEW(request, decision)`` if set, else
    ``too_many_requests``; the quota headers are added either way. A request a deny rule
    refused gets ``forbidden``."""
    response = _denied(request, decision)
    if inspect.isawaitable(response):  # an async DENIED_VIEW behind a sync surface
        response = async_to_sync(_awaited)(response)
    return apply_quota_headers(response, decision)


async def adenied_response(request: HttpRequest, decision: Decision) -> HttpResponseBase:
    """``denied_response`` for async surfaces; an async ``DENIED_VIEW`` is awaited."""
    response = _denied(request, decision)
    if inspect.isawaitable(response):
        response = await response
    return apply_quota_headers(response, decision)


async def _awaited(awaitable: Awaitable[HttpResponseBase]) -> HttpResponseBase:
    return await awaitable
