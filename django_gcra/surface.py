"""The pipeline the middleware, ``@ratelimit`` and the DRF throttles share:

    request -> descriptors -> decide -> request.ratelimit -> denied response or headers

Each surface only says which policy and cost apply and how the response is produced;
the sync and async paths differ only by an ``await``.

A decision that holds concurrency slots releases them when the response is closed (by
the WSGI or ASGI server, after the last chunk of a streamed body or when the client goes
away), when the view raises, and when an async view is cancelled (Django 5 cancels it on
a client disconnect). ``release_when_done`` is the one place that arranges it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from .decision import Decision
from .http import adenied_response, apply_quota_headers, denied_response
from .identity import adescriptors_for, descriptor_names, descriptors_for
from .limiter import adecide, decide
from .policy import Policy

__all__ = ["adecide_request", "arespond", "cost_of", "decide_request", "not_limited", "record", "release_when_done",
           "respond"]


def record(request: HttpRequest, decision: Decision) -> Decision:
    """Set ``request.ratelimit``: with several limits on one request (stacked decorators,
    a route and a decorator) it holds the most restrictive decision."""
    current = getattr(request, "ratelimit", None)
    if not isinstance(current, Decision) or _restrictive(decision) < _restrictive(current):
        request.ratelimit = decision  # type: ignore[attr-defined]
    return decision


def _restrictive(decision: Decision) -> tuple[bool, float, int]:
    return decision.allowed, -decision.retry_after, decision.remaining


def not_limited(request: HttpRequest, policy: str) -> None:
    """A request a surface does not limit (a method it skips) still gets ``request.ratelimit``."""
    if not isinstance(getattr(request, "ratelimit", None), Decision):
        request.ratelimit = Decision(allowed=True, retry_after=0.0, remaining=0, limit="",  # type: ignore[attr-defined]
                                     policy=policy, cost=0)


def decide_request(request: HttpRequest, policy: Policy, cost: int = 1, max_wait: float = 0.0) -> Decision:
    descriptors = descriptors_for(request, descriptor_names(policy))
    return record(request, decide(policy, descriptors, cost, max_wait=max_wait, request=request))


async def adecide_request(request: HttpRequest, policy: Policy, cost: int = 1, max_wait: float = 0.0) -> Decision:
    descriptors = await adescriptors_for(request, descriptor_names(policy))
    return record(request, await adecide(policy, descriptors, cost, max_wait=max_wait, request=request))


def release_when_done(response: Any, decision: Decision) -> Any:
    """Release ``decision``'s slots when ``response`` is closed (its server closes it once
    the last byte is sent, or the client left); at once if it is not a response."""
    closers = getattr(response, "_resource_closers", None)
    if isinstance(closers, list):
        closers.append(decision.release)
    else:
        decision.release()
    return response


def respond(request: HttpRequest, decision: Decision, block: bool,
            get_response: Callable[[], HttpResponseBase]) -> HttpResponseBase:
    """The denied response, or the view's response with the quota headers. A deny rule's
    refusal is answered whatever ``block`` says (``block=False`` is about rate limits)."""
    if (block or decision.blocked) and not decision.allowed:
        return denied_response(request, decision)
    if decision.slots is None:
        return apply_quota_headers(get_response(), decision)
    try:
        response = get_response()
    except BaseException:
        decision.release()
        raise
    return apply_quota_headers(release_when_done(response, decision), decision)


async def arespond(request: HttpRequest, decision: Decision, block: bool,
                   get_response: Callable[[], Awaitable[HttpResponseBase]]) -> HttpResponseBase:
    if (block or decision.blocked) and not decision.allowed:
        return await adenied_response(request, decision)
    if decision.slots is None:
        return apply_quota_headers(await get_response(), decision)
    try:
        response = await get_response()
    except BaseException:  # the view raised, or was cancelled (the client disconnected)
        decision.release()
        raise
    return apply_quota_headers(release_when_done(response, decision), decision)


def cost_of(cost: int | Callable[[Any], int], request: HttpRequest) -> int:
    """A surface's cost: an int, or a callable of the request."""
    return cost(request) if callable(cost) else cost
