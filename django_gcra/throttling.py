"""DRF throttle classes backed by ``decide()``: the only module that imports DRF at import time.

``GCRAAnonRateThrottle``, ``GCRAUserRateThrottle``, ``GCRAScopedRateThrottle`` and
``GCRARateThrottle`` are DRF's four classes with the decision moved into one Redis
script call: what a DRF subclass overrides keeps working (``scope``, ``rate``,
``THROTTLE_RATES``, ``get_cache_key``, ``cache_format``, ``get_ident``, ``parse_rate``,
``num_requests``, ``duration``, ``wait``, ``throttle_success``/``throttle_failure``).
The string ``get_cache_key`` returns is the bucket's identity (None: not throttled),
together with the rate, so two throttles with one scope and different rates never share
a bucket. A rate of N per period admits a burst of N (``burst`` on the class changes it),
then one request every period/N: a smooth refill instead of DRF's rolling window. With
``algorithm = "sliding_log"`` on the class, the throttle keeps DRF's own semantics
(never more than N in any rolling period), race-free; ``"sliding_window"`` is the
weighted two-window counter (O(1) memory). Sliding throttles take no ``burst``.
``wait()`` is the exact retry-after. Time is Redis's: ``timer`` and ``cache`` overrides
cannot be honoured, and a subclass defining them gets a ``ThrottleOverrideWarning``.

Quota headers: ``allow_request`` puts them in the view's ``headers``, which DRF's
``finalize_response`` copies onto every response, the 429 included. With several GCRA
throttles on a view they name the binding limit (on a denial the longest wait, which
is DRF's ``Retry-After``; otherwise the least remaining) and ``RateLimit-Policy`` lists
the limits of every throttle evaluated. A request a deny rule refuses raises
``AccessForbidden`` (403, ``{"error": "forbidden", ...}``). A cost above the burst raises ``Throttled``
without a wait, and a ``closed`` policy whose store is unreachable raises a 503, as does
a full concurrency limit of ``key: []`` (``PolicyThrottle`` on a policy with
``concurrency``: its slots are released when the response is closed, or when the view
raises an exception DRF does not turn into a response).
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions
from rest_framework.settings import api_settings
from rest_framework.throttling import (
    AnonRateThrottle,
    BaseThrottle,
    ScopedRateThrottle,
    SimpleRateThrottle,
    UserRateThrottle,
)

from .conf import get_settings
from .decision import Decision
from .drf_support import combined_headers, parse_drf_rate, scope_name, throttle_policy
from .http import denial_message, denial_status, retry_after_header
from .identity import client_ip, descriptor_names, descriptors_for, normalise_ip
from .limiter import decide, get_policy
from .policy import Policy
from .surface import Metered, release_when_done

__all__ = [
    "AccessForbidden",
    "GCRAAnonRateThrottle",
    "GCRARateThrottle",
    "GCRAScopedRateThrottle",
    "GCRAThrottle",
    "GCRAUserRateThrottle",
    "PolicyThrottle",
    "RateLimitUnavailable",
    "ThrottleOverrideWarning",
    "combined_headers",
    "parse_drf_rate",
    "scope_name",
]

UNHONOURED = ("timer", "cache")  # time and state are Redis's


class ThrottleOverrideWarning(RuntimeWarning):
    """A throttle subclass overrides something django_gcra cannot honour (``timer``, ``cache``)."""


class RateLimitUnavailable(exceptions.APIException):
    status_code = 503
    default_detail = "Rate limiting is temporarily unavailable."
    default_code = "rate_limit_unavailable"

    def __init__(self, wait: int, detail: str | None = None) -> None:
        super().__init__(detail)
        self.wait = wait  # DRF's exception handler turns it into Retry-After


class AccessForbidden(exceptions.APIException):
    """A deny rule refused the request: 403 with ``{"error": "forbidden", "message": ...}``."""

    status_code = 403
    default_code = "forbidden"

    def __init__(self, message: str) -> None:
        super().__init__({"error": "forbidden", "message": message})


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
        return self._decide(request, view, *found)

    def get_metered(self, view: Any) -> Metered | None:
        """How this throttle's decisions are settled after the response (PolicyThrottle: the
        view's ``ratelimit_settle`` / ``ratelimit_count_when``); None: never."""
        return None

    def _decide(self, request: Any, view: Any, policy: Policy | str, descriptors: Mapping[str, Any]) -> bool:
        self.decision = decision = decide(policy, descriptors, self.get_cost(request, view), request=request)
        if decision.slots is not None:
            _release_with(view, decision)
        if decision.settlement is not None:
            metered = self.get_metered(view)
            if metered is not None:
                _settle_with(view, decision, metered)
        self._publish(view, decision)
        if decision.blocked:
            raise AccessForbidden(denial_message(decision))
        if denial_status(decision) == 503:
            raise RateLimitUnavailable(int(retry_after_header(decision.retry_after)),
                                       denial_message(decision) if decision.capacity else None)
        if decision.allowed:
            return self.throttle_success()
        result = self.throttle_failure()
        if decision.impossible:
            raise exceptions.Throttled(detail=denial_message(decision))
        return result

    def throttle_success(self) -> bool:
        return True

    def throttle_failure(self) -> bool:
        return False

    @staticmethod
    def _publish(view: Any, decision: Decision) -> None:
        """Hand the quota headers of every GCRA throttle so far to DRF's finalize_response."""
        headers = getattr(view, "headers", None)
        if not isinstance(headers, dict) or not hasattr(view, "__dict__"):
            return
        decisions = view.__dict__.setdefault("_gcra_decisions", [])
        decisions.append(decision)
        for name in view.__dict__.get("_gcra_published", ()):
            headers.pop(name, None)
        combined = combined_headers(decisions)
        headers.update(combined)
        view._gcra_published = tuple(combined)

    def wait(self) -> float | None:
        """Seconds until this request would be admitted: exact; None if it never will."""
        if self.decision is None or self.decision.allowed or self.decision.impossible or self.decision.blocked:
            return None  # (blocked: a deny rule; no wait helps)
        return self.decision.retry_after


def _view_function(view: Any, name: str) -> Any:
    """The view's ``name`` as a callable of (request, response): a method or staticmethod as
    it is bound, and a plain function of two arguments set on the class (``ratelimit_settle =
    tokens_used``) unbound, as its author wrote it."""
    found = getattr(view, name, None)
    raw = inspect.getattr_static(view, name, None)
    if inspect.isfunction(raw) and inspect.ismethod(found):
        try:
            positional = [p for p in inspect.signature(raw).parameters.values()
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            return found
        if len(positional) == 2:
            return raw
    return found


def _settle_with(view: Any, decision: Decision, metered: Metered) -> None:
    """Settle ``decision`` with the response DRF finalizes (the one of an exception the view
    handled too, such as a 401); a streamed body once it is closed."""
    if not hasattr(view, "__dict__") or not callable(getattr(view, "finalize_response", None)):
        return  # no response to follow: the estimate stands
    finalize = view.finalize_response

    def finalize_response(request: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
        view.finalize_response = finalize
        response = finalize(request, response, *args, **kwargs)
        return metered.after(request, response, decision)

    view.finalize_response = finalize_response


def _release_with(view: Any, decision: Decision) -> None:
    """Release ``decision``'s slots with the response DRF finalizes (on close: streamed
    bodies after their last chunk), or when the view raises past ``handle_exception``."""
    if not hasattr(view, "__dict__") or not callable(getattr(view, "finalize_response", None)):
        decision.release()  # no view to follow: the slot cannot outlive this call
        return
    finalize, handle = view.finalize_response, view.handle_exception

    def finalize_response(request: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
        view.finalize_response = finalize
        response = finalize(request, response, *args, **kwargs)
        return release_when_done(response, decision)

    def handle_exception(exc: Exception) -> Any:
        try:
            return handle(exc)
        except BaseException:
            decision.release()
            raise

    view.finalize_response, view.handle_exception = finalize_response, handle_exception


def _trusted_proxies_set() -> bool:
    value = getattr(settings, "DJANGO_GCRA", {})
    return isinstance(value, Mapping) and "TRUSTED_PROXIES" in value


_warned: weakref.WeakSet[type] = weakref.WeakSet()


def _warn_unhonoured(cls: type, name: str, stacklevel: int) -> None:
    _warned.add(cls)
    warnings.warn(f"{cls.__module__}.{cls.__qualname__} overrides {name!r}, which django_gcra cannot honour: time "
                  "and throttle state come from Redis (one script call per decision).", ThrottleOverrideWarning,
                  stacklevel=stacklevel)


class _LiveRates:
    """DRF's ``DEFAULT_THROTTLE_RATES`` at each access (DRF's copy them once, at import,
    so ``override_settings`` never reaches them). A subclass's own ``THROTTLE_RATES`` wins."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return api_settings.DEFAULT_THROTTLE_RATES


class GCRARateThrottle(GCRAThrottle, SimpleRateThrottle):
    """DRF's ``SimpleRateThrottle`` on GCRA: subclasses override ``get_cache_key`` as in
    DRF; ``scope`` names a rate in ``THROTTLE_RATES`` (``DEFAULT_THROTTLE_RATES``, read
    live), or set ``rate``; ``burst`` (default: the rate's count) and ``algorithm``
    (``"gcra"``, ``"sliding_log"`` for DRF's rolling window, ``"sliding_window"``; None:
    the ``DRF_ALGORITHM`` setting, default ``"gcra"``) are django_gcra's own."""

    THROTTLE_RATES: Any = _LiveRates()
    burst: int | None = None
    algorithm: str | None = None
    _never = False  # a rate of 0 admits nothing, and no wait helps

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in UNHONOURED:
            if name in cls.__dict__:
                _warn_unhonoured(cls, name, stacklevel=3)

    def parse_rate(self, rate: Any) -> tuple[int | None, int | None]:
        return parse_drf_rate(rate)

    def get_ident(self, request: Any) -> Any:
        """The client's address: by ``DJANGO_GCRA['TRUSTED_PROXIES']`` when that is set, else
        by DRF's ``NUM_PROXIES`` rule; with ``NUM_PROXIES`` unset, ``REMOTE_ADDR`` (DRF would
        use the whole, client-forgeable X-Forwarded-For). IPv6 addresses are grouped by
        ``IPV6_PREFIX`` (default /64), so a client cannot dodge the limit within its network."""
        if _trusted_proxies_set():
            return client_ip(request)
        hops = api_settings.NUM_PROXIES
        xff = request.META.get("HTTP_X_FORWARDED_FOR")
        address = request.META.get("REMOTE_ADDR")
        if hops and xff is not None:
            entries = xff.split(",")
            address = entries[-min(hops, len(entries))]
        return normalise_ip(address) if address else address

    def limit_name(self) -> str:
        """The limit's name in headers, the audit trail and metrics: the scope (or the class name)."""
        return scope_name(str(self.scope) if getattr(self, "scope", None) else type(self).__name__)

    def gcra_policy(self) -> Policy | None:
        """The one-limit policy of ``num_requests`` per ``duration`` (None for a rate of 0);
        ``ImproperlyConfigured`` when they are not whole numbers GCRA can run."""
        values = []
        for label in ("num_requests", "duration"):
            value = getattr(self, label, None)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ImproperlyConfigured(f"{type(self).__name__}.{label} is {value!r}: give a whole number.")
            values.append(value)
        num, duration = values
        return None if num == 0 else throttle_policy(self.limit_name(), num, duration, self.burst,
                                                    self.algorithm or get_settings().drf_algorithm)

    def get_policy(self, request: Any, view: Any) -> tuple[Policy | str, dict[str, Any]] | None:
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return None
        policy = self.gcra_policy()
        if policy is None:
            return None
        limit = policy.limits[0]  # the rate and burst are part of the bucket's identity
        return policy, {"cache_key": str(self.key), "rate": f"{limit.rates[None]}/{limit.burst}"}

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        cls = type(self)
        if cls.timer is not SimpleRateThrottle.timer and cls not in _warned:  # set after the class was made
            _warn_unhonoured(cls, "timer", stacklevel=4)
        self.decision, self._never = None, False
        found = self.get_policy(request, view)
        if found is None:
            if self.key is None:
                return True
            self._never = True  # "0/m": DRF refuses every request too
            return self.throttle_failure()
        return self._decide(request, view, *found)

    def wait(self) -> float | None:
        """Exact after a decision; before any (or when DRF's ``history`` is set by hand), DRF's estimate."""
        if self._never:
            return None
        if self.decision is None:
            return SimpleRateThrottle.wait(self)  # type: ignore[no-any-return]
        return GCRAThrottle.wait(self)


class GCRAAnonRateThrottle(GCRARateThrottle, AnonRateThrottle):
    """DRF's ``AnonRateThrottle``: anonymous requests only, by ``get_ident`` (scope ``anon``)."""

    scope = "anon"


class GCRAUserRateThrottle(GCRARateThrottle, UserRateThrottle):
    """DRF's ``UserRateThrottle``: users by pk, anonymous requests by ``get_ident`` (scope ``user``)."""

    scope = "user"


class GCRAScopedRateThrottle(GCRARateThrottle, ScopedRateThrottle):
    """DRF's ``ScopedRateThrottle``: the rate of the view's ``throttle_scope``; views without
    one are not throttled."""

    def __init__(self) -> None:
        pass  # the rate is known only once the view is, as in DRF

    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)


class PolicyThrottle(GCRAThrottle):
    """The policy named by the view's ``ratelimit_policy`` (cost: ``ratelimit_cost``;
    metered costs: ``ratelimit_settle(request, response) -> int`` or
    ``ratelimit_count_when(request, response) -> bool``: a method, a staticmethod, or a
    function of (request, response) set on the class)."""

    def get_metered(self, view: Any) -> Metered | None:
        settle = _view_function(view, "ratelimit_settle")
        count_when = _view_function(view, "ratelimit_count_when")
        if settle is None and count_when is None:
            return None
        if settle is not None and count_when is not None:
            raise ImproperlyConfigured(f"{type(view).__name__} sets ratelimit_settle and ratelimit_count_when; "
                                       "give one of them.")
        return Metered(settle, count_when)

    def get_policy(self, request: Any, view: Any) -> tuple[Policy | str, dict[str, Any]] | None:
        name = getattr(view, "ratelimit_policy", None)
        if not name:
            return None
        policy = get_policy(name)
        return policy, descriptors_for(request, descriptor_names(policy))
