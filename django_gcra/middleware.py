"""``RateLimitMiddleware``: applies ``DJANGO_GCRA['ROUTES']``.

Each route is ``{"path": regex, "policy": name}`` with optional ``"methods": [...]``
and ``"names": [url names]``; the regex is searched in ``request.path_info``. The
first matching route decides; a request no route matches never touches the store.
Place it after ``AuthenticationMiddleware`` when a policy uses the ``user`` descriptor.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.signals import setting_changed
from django.dispatch import receiver

from .conf import setting
from .http import adenied_response, apply_quota_headers, denied_response
from .identity import adescriptors_for, descriptor_names, descriptors_for, url_name
from .limiter import adecide, decide, get_policy
from .policy import Problem

__all__ = ["RateLimitMiddleware", "Route", "parse_routes", "get_routes", "match_route"]


@dataclass(frozen=True)
class Route:
    path: re.Pattern[str]
    policy: str
    methods: frozenset[str] | None = None
    names: frozenset[str] | None = None

    def matches(self, request: Any) -> bool:
        if self.methods is not None and request.method not in self.methods:
            return False
        if not self.path.search(request.path_info):
            return False
        return self.names is None or url_name(request) in self.names


def _strings(value: Any) -> frozenset[str] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    return None


def parse_routes(raw: Any, problems: list[Problem]) -> tuple[Route, ...]:
    """Parse ``ROUTES``, appending a ``django_gcra.E024`` problem for each bad entry.

    Whether each policy exists is checked separately (E025), against the live policies.
    """
    if not isinstance(raw, (list, tuple)):
        problems.append(Problem("django_gcra.E024", "DJANGO_GCRA['ROUTES'] must be a list of dicts."))
        return ()
    routes = []
    for index, entry in enumerate(raw):
        where = f"DJANGO_GCRA['ROUTES'][{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("policy"), str):
            problems.append(Problem("django_gcra.E024", f"{where} must be a dict with 'path' and 'policy'."))
            continue
        unknown = set(entry) - {"path", "policy", "methods", "names"}
        try:
            path = re.compile(entry.get("path"))
        except (re.error, TypeError) as exc:
            problems.append(Problem("django_gcra.E024", f"{where}['path'] is not a valid regex: {exc}."))
            continue
        methods = entry.get("methods")
        names = entry.get("names")
        if unknown or (methods is not None and _strings(methods) is None) or (
                names is not None and _strings(names) is None):
            problems.append(Problem("django_gcra.E024", f"{where}: 'methods' and 'names' must be lists of "
                                    f"strings, and no other keys are allowed (got {sorted(entry)})."))
            continue
        routes.append(Route(path, entry["policy"], frozenset(m.upper() for m in methods) if methods else None,
                            _strings(names)))
    return tuple(routes)


@functools.cache
def get_routes() -> tuple[Route, ...]:
    return parse_routes(setting("ROUTES"), [])


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "DJANGO_GCRA":
        get_routes.cache_clear()


def match_route(request: Any) -> Route | None:
    return next((route for route in get_routes() if route.matches(request)), None)


class RateLimitMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self.__acall__(request)
        route = match_route(request)
        if route is None:
            return self.get_response(request)
        policy = get_policy(route.policy)
        decision = decide(policy, descriptors_for(request, descriptor_names(policy)), request=request)
        request.ratelimit = decision
        if not decision.allowed:
            return denied_response(request, decision)
        return apply_quota_headers(self.get_response(request), decision)

    async def __acall__(self, request: Any) -> Any:
        route = match_route(request)
        if route is None:
            return await self.get_response(request)
        policy = get_policy(route.policy)
        decision = await adecide(policy, await adescriptors_for(request, descriptor_names(policy)), request=request)
        request.ratelimit = decision
        if not decision.allowed:
            return await adenied_response(request, decision)
        return apply_quota_headers(await self.get_response(request), decision)
