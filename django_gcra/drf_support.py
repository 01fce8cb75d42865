"""What the DRF throttles need that is not DRF: the quota headers of several throttles (no
DRF import). DRF's rate reading, scope names and the one-limit policy of a rate live in
``catalog`` (the plane lists and overrides DRF scopes) and are re-exported here."""

from __future__ import annotations

from .catalog import DRF_UNITS, parse_drf_rate, scope_name, throttle_policy
from .decision import Decision
from .http import quota_headers

__all__ = ["DRF_UNITS", "combined_headers", "parse_drf_rate", "scope_name", "throttle_policy"]


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
