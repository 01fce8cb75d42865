"""The resilience settings (timeouts, breaker, local fallback), validated in one place.

``problems()`` feeds the system checks (django_gcra.E040-E049 / W040-W049); the readers
raise ``ImproperlyConfigured`` on a bad value, so a typo never silently disables a guard.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from ..conf import setting
from ..policy import Problem

__all__ = ["timeouts", "breaker_params", "fallback_processes", "fallback_log_interval", "problems"]

_T = TypeVar("_T")
_memos: list[Any] = []


def memo(func: Callable[[], _T]) -> Callable[[], _T]:
    """Cache a reader until DJANGO_GCRA or CACHES changes: it runs on every decision."""
    cached = functools.cache(func)
    _memos.append(cached)
    return cached


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DJANGO_GCRA", "CACHES"):
        for cached in _memos:
            cached.cache_clear()


setting_changed.connect(_forget)

SLOW_TIMEOUT_MS = 1000  # above this a slow Redis visibly stalls every request (W040)


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0


def _timeout_problems() -> list[Problem]:
    out = []
    for name in ("TIMEOUT", "CONNECT_TIMEOUT"):
        value = setting(name)
        if value is None and name == "CONNECT_TIMEOUT":
            continue
        if not _positive(value):
            out.append(Problem("django_gcra.E040", f"DJANGO_GCRA[{name!r}] is {value!r}; it must be a positive "
                               "number of milliseconds.", "The default is 10 (ms)."))
        elif value > SLOW_TIMEOUT_MS:
            out.append(Problem("django_gcra.W040", f"DJANGO_GCRA[{name!r}] is {value} ms: while Redis is slow, "
                               "every rate-limited request can wait that long.",
                               f"Keep the limiter's timeouts at a few ms (at most {SLOW_TIMEOUT_MS})."))
    return out


def _breaker_problems() -> list[Problem]:
    raw = setting("BREAKER")
    failures = raw.get("failures", 5) if isinstance(raw, dict) else None
    cooldown = raw.get("cooldown", 1.0) if isinstance(raw, dict) else None
    unknown = set(raw) - {"failures", "cooldown"} if isinstance(raw, dict) else set()
    if (not isinstance(raw, dict) or unknown or isinstance(failures, bool) or not isinstance(failures, int)
            or failures < 1 or not _positive(cooldown)):
        return [Problem("django_gcra.E041", f"DJANGO_GCRA['BREAKER'] is {raw!r}; it must be "
                        "{'failures': int >= 1, 'cooldown': seconds > 0}.")]
    return []


def _fallback_problems() -> list[Problem]:
    out = []
    processes = setting("FALLBACK_PROCESSES")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        out.append(Problem("django_gcra.E042", f"DJANGO_GCRA['FALLBACK_PROCESSES'] is {processes!r}; it must be an "
                           "integer >= 1 (the number of processes sharing a limit)."))
    interval = setting("FALLBACK_LOG_INTERVAL")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
        out.append(Problem("django_gcra.E043", f"DJANGO_GCRA['FALLBACK_LOG_INTERVAL'] is {interval!r}; it must be "
                           "a number of seconds >= 0."))
    return out


def _local_problems() -> list[Problem]:
    from ..conf import _load

    if setting("FALLBACK_PROCESSES") != 1:
        return []
    out = []
    for policy in _load()[0].policies.values():
        if policy.on_failure != "local":
            continue
        for limit in policy.limits:
            if limit.fallback_rate is None:
                out.append(Problem(
                    "django_gcra.W041", f"Policy {policy.name!r} limit {limit.name!r} fails over to a local limit at "
                    "its full rate: while Redis is down every process admits the whole limit.",
                    "Set DJANGO_GCRA['FALLBACK_PROCESSES'] to the number of processes, or give the limit a "
                    "'fallback_rate'."))
    return out


def _cluster_problems() -> list[Problem]:
    from django.conf import settings

    from .cluster import ClusterClient, startup_nodes

    config = getattr(settings, "CACHES", {}).get(setting("CACHE_ALIAS"), {})
    client_class = config.get("OPTIONS", {}).get("CLIENT_CLASS")
    if client_class not in (ClusterClient, f"{ClusterClient.__module__}.{ClusterClient.__name__}"):
        return []
    try:
        startup_nodes(config.get("LOCATION", ""))
    except ImproperlyConfigured as exc:
        return [Problem("django_gcra.E044", f"{exc} (CACHES[{setting('CACHE_ALIAS')!r}]['LOCATION'])",
                        "List the cluster's startup nodes as redis://host:port URLs.")]
    return []


def problems() -> list[Problem]:
    return (_timeout_problems() + _breaker_problems() + _fallback_problems() + _local_problems()
            + _cluster_problems())


def _raise_first(found: list[Problem]) -> None:
    errors = [p for p in found if p.is_error]
    if errors:
        raise ImproperlyConfigured(f"{errors[0].msg} ({errors[0].id})")


@memo
def timeouts() -> tuple[float, float]:
    """(read, connect) timeouts of the limiter's own Redis calls, in seconds."""
    _raise_first(_timeout_problems())
    read = setting("TIMEOUT")
    connect = setting("CONNECT_TIMEOUT")
    return read / 1000, (read if connect is None else connect) / 1000


@memo
def breaker_params() -> tuple[int, float]:
    """(consecutive failures that open the circuit, cool-down seconds)."""
    _raise_first(_breaker_problems())
    raw = setting("BREAKER")
    return raw.get("failures", 5), float(raw.get("cooldown", 1.0))


@memo
def fallback_processes() -> int:
    _raise_first(_fallback_problems())
    return setting("FALLBACK_PROCESSES")


@memo
def fallback_log_interval() -> float:
    _raise_first(_fallback_problems())
    return float(setting("FALLBACK_LOG_INTERVAL"))
