"""Every limit in the policy plane: the policies of ``POLICIES`` and those written in code.

A policy written in code is an inline ``@ratelimit(key=..., rate=...)`` (a one-limit policy
``view.<module>.<qualname>.<rate label>``, its limit named ``view``) or a DRF throttle's rate
(the one-limit policy ``drf.<scope>``, its limit named after the scope). This module builds
both (``inline_policy``, ``throttle_policy``) and registers each policy it builds, so the
override index, the override form, ``gcra_status``, ``gcra_inspect`` and the dashboard all
read one list: ``policies()``. An override of a code policy is applied by ``plan`` exactly as
one of a settings policy, since the override index is built from this list.

What is registered: an inline limit when its view is decorated (so once the URLconf's views
are imported: ``discover()`` imports ``ROOT_URLCONF``), a DRF scope when a throttle first
builds its policy, and every scope of ``REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']`` when
``discover()`` runs (with the ``DRF_ALGORITHM`` setting and no ``burst``, as a plain GCRA
throttle class builds it). A name seen for the first time tells ``listeners`` (the override
index reloads, so an override saved before its view was first decorated applies).
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import unicodedata
from collections.abc import Callable
from importlib import import_module
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .conf import get_settings, on_change
from .policy import Policy, build_policy
from .rates import parse_rate

__all__ = ["DRF_UNITS", "discover", "find", "inline_policy", "listeners", "origin", "parse_drf_rate", "policies",
           "register", "scope_name", "throttle_policy"]

SETTINGS, INLINE, DRF = "settings", "inline", "drf"

#: Called (no arguments) when a code policy of a new name, or new arguments, is registered.
listeners: list[Callable[[], None]] = []

# name -> (origin, the builder's arguments, the builder); built on each ``policies()`` (the
# builders are memoized), so a settings change (DESCRIPTORS, DRF_ALGORITHM) is seen.
_code: dict[str, tuple[str, tuple[Any, ...], Callable[[], Policy]]] = {}
_lock = threading.Lock()


def register(name: str, kind: str, args: tuple[Any, ...], build: Callable[[], Policy]) -> None:
    """Record a policy written in code (``kind``: ``inline`` or ``drf``)."""
    known = _code.get(name)
    if known is not None and known[:2] == (kind, args):  # the usual case (a throttle's every decision)
        return
    with _lock:
        _code[name] = (kind, args, build)
    for listener in list(listeners):
        listener()


def policies() -> dict[str, Policy]:
    """Every policy known to this process: ``POLICIES`` first, then the code policies
    registered so far (one that no longer builds, e.g. after a settings change, is left out)."""
    found = dict(get_settings().policies)
    with _lock:
        code = list(_code.items())
    for name, (_kind, _args, build) in sorted(code):
        if name in found:
            continue
        try:
            found[name] = build()
        except ImproperlyConfigured:
            continue
    return found


def find(name: str) -> Policy | None:
    """The policy of that name, configured or written in code; None if unknown."""
    configured = get_settings().policies.get(name)
    if configured is not None:
        return configured
    with _lock:
        entry = _code.get(name)
    if entry is None:
        return None
    try:
        return entry[2]()
    except ImproperlyConfigured:
        return None


def origin(name: str) -> str:
    """``settings``, ``inline`` or ``drf``: where a policy is defined (``""`` if unknown)."""
    if name in get_settings().policies:
        return SETTINGS
    entry = _code.get(name)
    return entry[0] if entry else ""


def discover() -> str:
    """Register the code policies a process can know without traffic: import ``ROOT_URLCONF``
    (decorating its views registers their inline limits) and build DRF's
    ``DEFAULT_THROTTLE_RATES`` scopes. Returns what failed (``""`` when nothing did)."""
    from django.conf import settings

    problems = []
    urlconf = getattr(settings, "ROOT_URLCONF", None)
    if urlconf:
        try:
            import_module(urlconf)
        except Exception as exc:  # reported by the caller; the settings policies are still listed
            problems.append(f"ROOT_URLCONF does not import: {type(exc).__name__}: {exc}")
    rates = (getattr(settings, "REST_FRAMEWORK", None) or {}).get("DEFAULT_THROTTLE_RATES") or {}
    for scope, rate in sorted(rates.items(), key=lambda item: str(item[0])):
        try:
            num, duration = parse_drf_rate(rate)
            if num and duration is not None:
                throttle_policy(scope_name(str(scope)), num, duration, None, get_settings().drf_algorithm)
        except ImproperlyConfigured as exc:
            problems.append(f"DRF scope {scope!r}: {exc}")
    return "; ".join(problems)


# -- inline @ratelimit limits ------------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def inline_policy(name: str, key: tuple[str, ...], rate: str, burst: int | None, mode: str,
                  on_failure: str, algorithm: str = "gcra") -> Policy:
    """A one-limit Policy (its limit is named ``view``), validated by the settings parser;
    ImproperlyConfigured if bad."""
    limit: dict[str, Any] = {"name": "view", "key": list(key), "rate": rate, "algorithm": algorithm}
    if burst is not None or algorithm == "gcra":
        limit["burst"] = burst
    raw = {"limits": [limit], "mode": mode, "on_failure": on_failure}
    where = f"@ratelimit(key={list(key)!r}, rate={rate!r}, burst={burst!r}, algorithm={algorithm!r})"
    return build_policy(name, raw, get_settings().descriptors, where)


def register_inline(name: str, key: tuple[str, ...], rate: str, burst: int | None, mode: str, on_failure: str,
                    algorithm: str = "gcra") -> None:
    """Record the inline limit of a decorated view (``@ratelimit`` calls it)."""
    args = (name, key, rate, burst, mode, on_failure, algorithm)
    register(name, INLINE, args, functools.partial(inline_policy, *args))


# -- DRF throttle scopes -----------------------------------------------------------------

DRF_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}  # DRF reads only the period's first letter

_VALID = re.compile(r"^[A-Za-z0-9_.-]{1,60}$")  # 60: room for the "drf." of the policy name
_HASHED = re.compile(r"-[0-9a-f]{12}$")


@functools.lru_cache(maxsize=1024)
def scope_name(scope: str) -> str:
    """The limit name of a DRF scope: the scope itself when it is a valid name, else a
    readable slug and 12 hex digits of its SHA-256 (``"api:v1"`` -> ``"api-v1-<hash>"``).

    A valid scope that already ends like a hashed name is hashed too, so no two scopes map
    to one name (short of a SHA-256 collision).
    """
    if _VALID.match(scope) and not _HASHED.search(scope):
        return scope
    readable = unicodedata.normalize("NFKD", scope).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9_.]+", "-", readable).strip("-.")[:47] or "scope"
    return f"{slug}-{hashlib.sha256(scope.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def parse_drf_rate(rate: Any) -> tuple[int | None, int | None]:
    """``(num_requests, duration)`` as DRF reads a rate (``"100/hr"``, ``"5/mins"``: the
    period's first letter), or by django_gcra's grammar when the period starts with a digit
    (``"10/5m"``, which DRF refuses). ``None`` gives ``(None, None)``."""
    if rate is None:
        return (None, None)
    if isinstance(rate, str) and rate.count("/") == 1:
        num, period = (part.strip() for part in rate.split("/"))
        if period[:1] in DRF_UNITS and num.isdigit():
            return (int(num), DRF_UNITS[period[0]])
        try:
            parsed = parse_rate(rate)
        except ValueError:
            pass
        else:
            return (parsed.count, parsed.period)
    raise ImproperlyConfigured(f"Invalid throttle rate {rate!r}: use 'N/period' such as '100/hour', '5/min' or "
                               "'10/5m'.")


def throttle_policy(name: str, num_requests: int, duration: int, burst: int | None,
                    algorithm: str = "gcra", *, record: bool = True, framework: str = "drf") -> Policy:
    """The one-limit policy ``drf.<name>`` of a throttle's rate, keyed by its cache key and
    rate, registered in the plane (unless ``record`` is false: a check trying a rate);
    ``ImproperlyConfigured`` when the algorithm cannot run the rate (or a sliding limit is
    given a burst). ``framework`` prefixes the name (django-ninja's throttles: ``ninja``)."""
    policy = _throttle_policy(name, num_requests, duration, burst, algorithm, framework)
    if record:
        args = (name, num_requests, duration, burst, algorithm, framework)
        register(policy.name, DRF, args, functools.partial(_throttle_policy, *args))
    return policy


@functools.lru_cache(maxsize=512)
def _throttle_policy(name: str, num_requests: int, duration: int, burst: int | None, algorithm: str,
                     framework: str = "drf") -> Policy:
    limit: dict[str, Any] = {"name": name, "key": ["cache_key", "rate"], "rate": f"{num_requests}/{duration}s",
                             "algorithm": algorithm}
    if burst is not None or algorithm == "gcra":
        limit["burst"] = burst
    raw = {"limits": [limit]}
    try:
        return build_policy(f"{framework}.{name}", raw, {"cache_key": None, "rate": None}, framework)
    except ImproperlyConfigured as exc:  # name the rate, not a POLICIES entry the user never wrote
        why = str(exc).removeprefix(f"{framework}['limits'][0]").removeprefix("['rate']").lstrip(": ")
        raise ImproperlyConfigured(f"Throttle rate {num_requests}/{duration}s ({algorithm}, burst {burst}): "
                                   f"{why}") from None


on_change(inline_policy.cache_clear)  # DESCRIPTORS may have changed
