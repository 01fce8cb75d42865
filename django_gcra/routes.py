"""The ``ROUTES`` setting: which requests ``RateLimitMiddleware`` sends to which policy.

Each route is ``{"path": regex, "policy": name}`` with optional ``"methods": [...]`` and
``"names": [url names]``; the regex is searched in ``request.path_info``. Whether each
policy exists is checked against the parsed policies (``conf``). Metered costs:
``"settle": "dotted.path"`` (``fn(request, response) -> int``, the actual cost) or
``"count_when": "dotted.path"`` (``fn(request, response) -> bool``); whether they import
is a system check (E136), and they are imported at the first request that uses them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .codes import Codes, Problem

__all__ = ["Route", "parse_routes"]

ROUTE_KEYS = frozenset({"path", "policy", "methods", "names", "settle", "count_when"})
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


@dataclass(frozen=True)
class Route:
    path: re.Pattern[str]
    policy: str
    methods: frozenset[str] | None = None  # None: every method
    names: frozenset[str] | None = None  # URL names (with namespaces); None: any
    settle: str | None = None  # dotted path of fn(request, response) -> int
    count_when: str | None = None  # dotted path of fn(request, response) -> bool


def _strings(value: Any) -> frozenset[str] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    return None


def parse_routes(raw: Any, problems: list[Problem]) -> tuple[Route, ...]:
    """Parse ``ROUTES``, appending a problem for each bad entry."""
    if not isinstance(raw, (list, tuple)):
        problems.append(Problem(Codes.BAD_ROUTE, "DJANGO_GCRA['ROUTES'] must be a list of dicts."))
        return ()
    routes = []
    for index, entry in enumerate(raw):
        where = f"DJANGO_GCRA['ROUTES'][{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("policy"), str):
            problems.append(Problem(Codes.BAD_ROUTE, f"{where} must be a dict with 'path' and 'policy'."))
            continue
        try:
            path: re.Pattern[str] = re.compile(entry.get("path"))  # type: ignore[arg-type]
        except (re.error, TypeError) as exc:
            problems.append(Problem(Codes.BAD_ROUTE, f"{where}['path'] is not a valid regex: {exc}."))
            continue
        methods, names = entry.get("methods"), entry.get("names")
        if set(entry) - ROUTE_KEYS or (methods is not None and _strings(methods) is None) or (
                names is not None and _strings(names) is None):
            problems.append(Problem(Codes.BAD_ROUTE, f"{where}: 'methods' and 'names' must be lists of "
                                    f"strings, and no other keys are allowed (got {sorted(entry)})."))
            continue
        settle, count_when = entry.get("settle"), entry.get("count_when")
        bad = [f"{k}={v!r}" for k, v in (("settle", settle), ("count_when", count_when))
               if v is not None and not (isinstance(v, str) and _DOTTED.match(v))]
        if bad or (settle is not None and count_when is not None):
            problems.append(Problem(Codes.BAD_SETTLE, f"{where}: {', '.join(bad) or 'settle and count_when'} "
                                    f"{'is not a dotted path' if bad else 'are both given'}.",
                                    "Give one of 'settle' (a dotted path to fn(request, response) -> int) or "
                                    "'count_when' (a dotted path to fn(request, response) -> bool)."))
            continue
        routes.append(Route(path, entry["policy"], frozenset(m.upper() for m in methods) if methods else None,
                            _strings(names), settle, count_when))
    return tuple(routes)
