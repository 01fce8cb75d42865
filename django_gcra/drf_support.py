"""What the DRF throttles need that is not DRF: DRF's rate reading, scope names, the
one-limit policy of a rate, and the quota headers of several throttles (no DRF import)."""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .decision import Decision
from .http import quota_headers
from .policy import Policy, build_policy
from .rates import parse_rate as parse_gcra_rate

__all__ = ["DRF_UNITS", "combined_headers", "parse_drf_rate", "scope_name", "throttle_policy"]

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
            parsed = parse_gcra_rate(rate)
        except ValueError:
            pass
        else:
            return (parsed.count, parsed.period)
    raise ImproperlyConfigured(f"Invalid throttle rate {rate!r}: use 'N/period' such as '100/hour', '5/min' or "
                               "'10/5m'.")


@functools.lru_cache(maxsize=512)
def throttle_policy(name: str, num_requests: int, duration: int, burst: int | None,
                    algorithm: str = "gcra") -> Policy:
    """The one-limit policy ``drf.<name>`` of a throttle's rate, keyed by its cache key and
    rate; ``ImproperlyConfigured`` when the algorithm cannot run the rate (or a sliding
    limit is given a burst)."""
    limit: dict[str, Any] = {"name": name, "key": ["cache_key", "rate"], "rate": f"{num_requests}/{duration}s",
                             "algorithm": algorithm}
    if burst is not None or algorithm == "gcra":
        limit["burst"] = burst
    raw = {"limits": [limit]}
    try:
        return build_policy(f"drf.{name}", raw, {"cache_key": None, "rate": None}, "drf")
    except ImproperlyConfigured as exc:  # name the rate, not a POLICIES entry the user never wrote
        why = str(exc).removeprefix("drf['limits'][0]").removeprefix("['rate']").lstrip(": ")
        raise ImproperlyConfigured(f"Throttle rate {num_requests}/{duration}s ({algorithm}, burst {burst}): "
                                   f"{why}") from None


def combined_headers(decisions: list[Decision]) -> dict[str, str]:
    """The quota headers of several throttles' decisions on one request.

    They name the binding limit: on a denial the one with the longest wait (DRF's
    ``Retry-After`` is the longest wait), else the one with the least remaining; and
    ``RateLimit-Policy`` lists every limit of every decision. ``Retry-After`` is left
    to DRF.
    """
    rendered = [(d, quota_headers(d)) for d in decisions]
    limited = [(d, h) for d, h in rendered if "X-RateLimit-Remaining" in h]
    if not limited:
        return {}
    denied = [(d, h) for d, h in limited if not d.allowed]
    if denied:
        _, chosen = max(denied, key=lambda pair: pair[0].retry_after)
    else:
        _, chosen = min(limited, key=lambda pair: int(pair[1]["X-RateLimit-Remaining"]))
    headers = {k: v for k, v in chosen.items() if k != "Retry-After"}
    policies = list(dict.fromkeys(h["RateLimit-Policy"] for _, h in rendered if h.get("RateLimit-Policy")))
    if policies:
        headers["RateLimit-Policy"] = ", ".join(policies)
    return headers
