"""``RateLimitMiddleware``: applies ``DJANGO_GCRA['ROUTES']`` (parsed in ``routes.py``).

The first matching route decides; a request no route matches never touches the store.
Place it after ``AuthenticationMiddleware`` when a policy uses the ``user`` descriptor.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase
from django.utils.module_loading import import_string

from .conf import get_settings
from .identity import url_name
from .plan import get_policy
from .routes import Route
from .shedding import LoadSheddingMiddleware
from .surface import Metered, adecide_request, arespond, decide_request, respond

__all__ = ["LoadSheddingMiddleware", "RateLimitMiddleware", "match_route"]


def match_route(request: HttpRequest) -> Route | None:
    """The first route of ``ROUTES`` that matches the request, or None."""
    for route in get_settings().routes:
        if route.methods is not None and request.method not in route.methods:
            continue
        if not route.path.search(request.path_info):
            continue
        if route.names is None or url_name(request) in route.names:
            return route
    return None


def _lazy(path: str) -> Callable[..., Any]:
    """A function that imports ``path`` when first called (a failure is then the settle's:
    logged and counted, never the response's; ``manage.py check`` reports it, E136)."""
    found: list[Callable[..., Any]] = []

    def call(request: HttpRequest, response: Any) -> Any:
        if not found:
            found.append(import_string(path))
        return found[0](request, response)

    return call


@functools.lru_cache(maxsize=256)
def metered_of(route: Route) -> Metered | None:
    """The route's ``Metered`` (None without ``settle`` or ``count_when``): one per route."""
    if route.settle is None and route.count_when is None:
        return None
    return Metered(_lazy(route.settle) if route.settle else None,
                   _lazy(route.count_when) if route.count_when else None)


class RateLimitMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        route = match_route(request)
        if route is None:
            return self.get_response(request)
        decision = decide_request(request, get_policy(route.policy))
        return respond(request, decision, True, lambda: self.get_response(request), metered_of(route))

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        route = match_route(request)
        if route is None:
            response: Awaitable[HttpResponseBase] = self.get_response(request)
            return await response
        decision = await adecide_request(request, get_policy(route.policy))
        return await arespond(request, decision, True, lambda: self.get_response(request), metered_of(route))
