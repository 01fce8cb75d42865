"""The pipeline the middleware, ``@ratelimit`` and the DRF throttles share:

    request -> descriptors -> decide -> request.ratelimit -> denied response or headers

Each surface only says which policy and cost apply and how the response is produced;
the sync and async paths differ only by an ``await``.

A decision that holds concurrency slots releases them when the response is closed (by
the WSGI or ASGI server, after the last chunk of a streamed body or when the client goes
away), when the view raises, and when an async view is cancelled (Django 5 cancels it on
a client disconnect). ``release_when_done`` is the one place that arranges it.

Metered costs (``settle=`` / ``count_when=``, a ``Metered``): once the view has answered,
the actual cost is asked of ``settle(request, response)`` (or ``count_when(request,
response)`` charges the estimate when true, nothing when false) and the decision is
settled: at once for a response that is not streamed, when it is closed for a streamed
one (after its last chunk, the same hook that releases slots). A settle that fails (the
function raises or returns a bad value, the store is unreachable) never fails the
response: it is logged and counted (``Settler.stats``, the metric
``django_gcra_settles_total``). A view that raises keeps its estimate.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from .decision import Decision
from .engine import current
from .http import adenied_response, apply_quota_headers, denied_response
from .identity import adescriptors_for, descriptor_names, descriptors_for
from .limiter import adecide, decide
from .policy import Policy

__all__ = ["Metered", "adecide_request", "arespond", "cost_of", "decide_request", "not_limited", "record",
           "release_when_done", "respond"]

logger = logging.getLogger("django_gcra")


@dataclass(frozen=True)
class Metered:
    """How a surface settles its decisions: ``settle(request, response) -> int`` (the actual
    cost) or ``count_when(request, response) -> bool`` (charge the estimate only when true)."""

    settle: Callable[[HttpRequest, Any], int] | None = None
    count_when: Callable[[HttpRequest, Any], bool] | None = None

    def actual(self, request: HttpRequest, response: Any, decision: Decision) -> int:
        if self.settle is not None:
            return self.settle(request, response)
        assert self.count_when is not None
        return decision.cost if self.count_when(request, response) else 0

    def after(self, request: HttpRequest, response: Any, decision: Decision) -> Any:
        """Settle ``decision`` now, or, for a streamed response, when it is closed."""
        if decision.settlement is None:
            return response
        closers = getattr(response, "_resource_closers", None)
        if getattr(response, "streaming", False) and isinstance(closers, list):
            closers.append(functools.partial(self.now, request, response, decision))
        else:
            self.now(request, response, decision)
        return response

    async def aafter(self, request: HttpRequest, response: Any, decision: Decision) -> Any:
        if decision.settlement is None:
            return response
        closers = getattr(response, "_resource_closers", None)
        if getattr(response, "streaming", False) and isinstance(closers, list):
            closers.append(functools.partial(self.now, request, response, decision))
            return response
        try:
            await decision.asettle(self.actual(request, response, decision))
        except Exception as exc:  # never fail the response
            self.failed(decision, exc)
        return response

    def now(self, request: HttpRequest, response: Any, decision: Decision) -> None:
        try:
            decision.settle(self.actual(request, response, decision))
        except Exception as exc:  # never fail the response
            self.failed(decision, exc)

    @staticmethod
    def failed(decision: Decision, exc: BaseException) -> None:
        current().settler.stats.add(decision.policy, "failed")
        logger.warning("django_gcra: could not settle a decision of policy %r: %s: %s", decision.policy,
                       type(exc).__name__, exc)


def record(request: HttpRequest, decision: Decision) -> Decision:
    """Set ``request.ratelimit``: with several limits on one request (stacked decorators,
    a route and a decorator) it holds the most restrictive decision."""
    current = getattr(request, "ratelimit", None)
    if not isinstance(current, Decision) or _restrictive(decision) < _restrictive(current):
        request.ratelimit = decision
    return decision


def _restrictive(decision: Decision) -> tuple[bool, float, int]:
    return decision.allowed, -decision.retry_after, decision.remaining


def not_limited(request: HttpRequest, policy: str) -> None:
    """A request a surface does not limit (a method it skips) still gets ``request.ratelimit``."""
    if not isinstance(getattr(request, "ratelimit", None), Decision):
        request.ratelimit = Decision(allowed=True, retry_after=0.0, remaining=0, limit="",
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
            get_response: Callable[[], HttpResponseBase], metered: Metered | None = None) -> HttpResponseBase:
    """The denied response, or the view's response with the quota headers (settled by
    ``metered``, if given). A deny rule's refusal is answered whatever ``block`` says
    (``block=False`` is about rate limits)."""
    if (block or decision.blocked) and not decision.allowed:
        return denied_response(request, decision)
    if decision.slots is None:
        if metered is None:
            return apply_quota_headers(get_response(), decision)
        return apply_quota_headers(metered.after(request, get_response(), decision), decision)
    try:
        response = get_response()
    except BaseException:
        decision.release()
        raise
    if metered is not None:
        response = metered.after(request, response, decision)
    return apply_quota_headers(release_when_done(response, decision), decision)


async def arespond(request: HttpRequest, decision: Decision, block: bool,
                   get_response: Callable[[], Awaitable[HttpResponseBase]],
                   metered: Metered | None = None) -> HttpResponseBase:
    if (block or decision.blocked) and not decision.allowed:
        return await adenied_response(request, decision)
    if decision.slots is None:
        if metered is None:
            return apply_quota_headers(await get_response(), decision)
        return apply_quota_headers(await metered.aafter(request, await get_response(), decision), decision)
    try:
        response = await get_response()
    except BaseException:  # the view raised, or was cancelled (the client disconnected)
        decision.release()
        raise
    if metered is not None:
        response = await metered.aafter(request, response, decision)
    return apply_quota_headers(release_when_done(response, decision), decision)


def cost_of(cost: int | Callable[[Any], int], request: HttpRequest) -> int:
    """A surface's cost: an int, or a callable of the request."""
    return cost(request) if callable(cost) else cost
