"""DRF throttle classes backed by ``decide()``: the only module that imports DRF.

Drop-in replacements for DRF's throttles that read ``DEFAULT_THROTTLE_RATES`` live
(DRF's read them once, at class definition) and accept every rate of
``django_gcra.rates`` (``"10/5m"`` too). A rate of N per period admits a burst of N
(``burst`` on the class changes it), then one request every period/N: a smooth
refill instead of DRF's rolling window. ``wait()`` is the exact retry-after.

Quota headers: ``allow_request`` puts them in the view's ``headers``, which DRF's
``finalize_response`` copies onto every response, the 429 included. DRF builds the
429 itself (from ``wait()``); a cost above the burst raises ``Throttled`` without a
wait, and a ``closed`` policy whose store is unreachable raises a 503.
"""

from __future__ import annotations

import functools
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from .decision import Decision
from .http import denial_message, denial_status, quota_headers
from .identity import descriptor_names, descriptors_for
from .limiter import decide, get_policy
from .policy import Policy, Problem, parse_policy

__all__ = [
    "GCRAAnonRateThrottle",
    "GCRARateThrottle",
    "GCRAScopedRateThrottle",
    "GCRAThrottle",
    "GCRAUserRateThrottle",
    "PolicyThrottle",
    "RateLimitUnavailable",
]


class RateLimitUnavailable(exceptions.APIException):
    status_code = 503
    default_detail = "Rate limiting is temporarily unavailable."
    default_code = "rate_limit_unavailable"

    def __init__(self, wait: int) -> None:
        super().__init__()
        self.wait = wait  # DRF's exception handler turns it into Retry-After


def _restrictiveness(decision: Decision) -> tuple[bool, int]:
    return (decision.allowed, decision.remaining)


class GCRAThrottle(BaseThrottle):
    """Base: subclasses return the policy, descriptors and cost for a request."""

    decision: Decision | None = None

    def get_policy(self, request: Any, view: Any) -> tuple[Policy | str, dict[str, Any]] | None:
        raise NotImplementedError

    def get_cost(self, request: Any, view: Any) -> int:
        cost = getattr(view, "ratelimit_cost", 1)
        return cost(request) if callable(cost) else cost

    def allow_request(self, request: Any, view: Any) -> bool:
        found = self.get_policy(request, view)
        if found is None:
            return True
        policy, descriptors = found
        self.decision = decision = decide(policy, descriptors, self.get_cost(request, view), request=request)
        self._publish(view, decision)
        if decision.allowed:
            return True
        if denial_status(decision) == 503:
            raise RateLimitUnavailable(int(quota_headers(decision)["Retry-After"]))
        if decision.impossible:
            raise exceptions.Throttled(detail=denial_message(decision))
        return False

    def _publish(self, view: Any, decision: Decision) -> None:
        """Hand the quota headers to DRF's finalize_response (the most restrictive throttle wins)."""
        current = getattr(view, "_gcra_decision", None)
        if current is not None and _restrictiveness(current) <= _restrictiveness(decision):
            return
        headers = getattr(view, "headers", None)
        if not isinstance(headers, dict):
            return
        view._gcra_decision = decision
        headers.update({k: v for k, v in quota_headers(decision).items() if k != "Retry-After"})

    def wait(self) -> float | None:
        """Seconds until this request would be admitted: exact; None if it never will."""
        if self.decision is None or self.decision.allowed or self.decision.impossible:
            return None
        return self.decision.retry_after


@functools.lru_cache(maxsize=256)
def _rate_policy(name: str, rate: str, burst: int | None, keys: tuple[tuple[str, str], ...]) -> Policy:
    problems: list[Problem] = []
    limits = [{"name": limit, "key": [key], "rate": rate, "burst": burst} for key, limit in keys]
    policy = parse_policy(name, {"limits": limits}, {}, problems)
    errors = [p for p in problems if p.is_error]
    if policy is None or errors:
        raise ImproperlyConfigured(f"{name}: {errors[0].msg if errors else 'invalid rate'}")
    return policy


class GCRARateThrottle(GCRAThrottle):
    """DRF's SimpleRateThrottle, on GCRA: ``scope`` names a rate in DEFAULT_THROTTLE_RATES
    (or set ``rate``); authenticated users are keyed by pk, anonymous ones by IP."""

    scope: str | None = None
    rate: str | None = None
    burst: int | None = None
    # (descriptor, limit name) pairs; the descriptor missing for a request skips its limit
    limit_names: tuple[tuple[str, str], ...] = (("user", "{scope}"), ("ip", "{scope}-ip"))

    def get_rate(self) -> str | None:
        if self.rate is not None:
            return self.rate
        if not getattr(self, "scope", None):
            raise ImproperlyConfigured(f"{type(self).__name__} needs a 'rate' or a 'scope'.")
        rates = api_settings.DEFAULT_THROTTLE_RATES  # read live: override_settings applies
        if self.scope not in rates:
            raise ImproperlyConfigured(f"No default throttle rate set for {self.scope!r} scope")
        return rates[self.scope]  # type: ignore[no-any-return]

    def get_descriptors(self, request: Any, view: Any) -> dict[str, Any] | None:
        """``{"user": pk}`` or ``{"ip": address}``; None skips throttling."""
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return {"user": str(user.pk), "ip": None}
        return {"user": None, **descriptors_for(request, ["ip"])}

    def get_policy(self, request: Any, view: Any) -> tuple[Policy | str, dict[str, Any]] | None:
        rate = self.get_rate()
        if rate is None:
            return None
        descriptors = self.get_descriptors(request, view)
        if descriptors is None:
            return None
        scope = self.scope or "rate"
        keys = tuple((key, limit.format(scope=scope)) for key, limit in self.limit_names)
        policy = _rate_policy(f"drf.{scope}", rate, self.burst, keys)
        return policy, descriptors


class GCRAAnonRateThrottle(GCRARateThrottle):
    """Anonymous requests only, by IP (scope ``anon``)."""

    scope = "anon"
    limit_names = (("ip", "{scope}"),)

    def get_descriptors(self, request: Any, view: Any) -> dict[str, Any] | None:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return None
        return descriptors_for(request, ["ip"])


class GCRAUserRateThrottle(GCRARateThrottle):
    """Users by pk, anonymous requests by IP (scope ``user``)."""

    scope = "user"


class GCRAScopedRateThrottle(GCRARateThrottle):
    """The rate of the view's ``throttle_scope``; views without one are not throttled."""

    scope_attr = "throttle_scope"

    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        return super().allow_request(request, view)


class PolicyThrottle(GCRAThrottle):
    """The policy named by the view's ``ratelimit_policy`` (cost: ``ratelimit_cost``)."""

    def get_policy(self, request: Any, view: Any) -> tuple[Policy | str, dict[str, Any]] | None:
        name = getattr(view, "ratelimit_policy", None)
        if not name:
            return None
        policy = get_policy(name)
        return policy, descriptors_for(request, descriptor_names(policy))
