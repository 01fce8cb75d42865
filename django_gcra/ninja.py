"""django-ninja throttles backed by ``decide()``: the only module that imports django-ninja.

``AnonRateThrottle``, ``AuthRateThrottle``, ``UserRateThrottle`` and ``SimpleRateThrottle``
are ``ninja.throttling``'s classes (subclasses of them) with the decision moved into one
Redis script call: the same constructor (``AnonRateThrottle("100/m")``, or the scope's rate
from ninja's ``NINJA_DEFAULT_THROTTLE_RATES``), the same rate strings (ninja's own
``parse_rate``), the same ``scope``, ``cache_format``, ``get_cache_key``. The string
``get_cache_key`` returns is the bucket's identity (None: not throttled), together with
the rate. A rate of N per period admits a burst of N (``burst`` on the class changes it),
then one request every period/N; ``algorithm = "sliding_log"`` keeps ninja's rolling
window, race-free. ``wait()`` is the exact retry-after (ninja rounds it up into
``Retry-After``). Time and state are Redis's: ``timer``, ``cache`` and ``history`` are not
used.

``PolicyThrottle("api")`` decides the configured policy ``api`` with its descriptors,
tiers and overrides (``cost``: an int or a callable of the request).

Every decision goes through ``decide()``: failure policy, shadow mode, overrides, the
audit trail, metrics and the ``decision`` signal are the same as for every other surface,
and ``request.ratelimit`` holds the decision. ninja renders a throttle's denial itself
(its ``Throttled`` exception handler); the first denial of a throttle here, in a request
routed by Django's URLconf, hands the ``NinjaAPI`` that serves it the project's handler
(``adopt``), so the denial is the project's 429 (JSON body, quota headers; a 503 when a
``closed`` policy cannot reach its store) with nothing to call. ``install(api)`` does that
up front and also adds the quota headers to the API's other responses.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponseBase
from ninja import throttling
from ninja.errors import Throttled

from .decision import Decision
from .drf_support import scope_name, throttle_policy
from .http import apply_quota_headers, denied_response
from .identity import client_ip, descriptor_names, descriptors_for, normalise_ip
from .limiter import decide, get_policy
from .policy import Policy
from .surface import cost_of, record

__all__ = ["AnonRateThrottle", "AuthRateThrottle", "PolicyThrottle", "SimpleRateThrottle", "Throttled",
           "UserRateThrottle", "adopt", "install"]

MAX_LIMIT_NAME = 58  # a policy name ("ninja." + the limit's) has at most 64 characters


def _limit_name(scope: str) -> str:
    name = scope_name(scope)
    if len(name) <= MAX_LIMIT_NAME:
        return name
    return f"{name[:45]}-{hashlib.sha256(scope.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def _trusted_proxies_set() -> bool:
    value = getattr(settings, "DJANGO_GCRA", {})
    return isinstance(value, Mapping) and "TRUSTED_PROXIES" in value


class _GCRADecided:
    """What every throttle here shares: the decision, ``request.ratelimit`` and ``wait()``.

    ninja keeps one throttle instance per API, router or operation and calls
    ``allow_request(request)`` then, on a denial, ``wait()`` in the same thread with no
    await between them. The last decision is therefore kept per thread: concurrent
    requests served by other threads never change the ``wait()`` of this one.
    """

    def _local(self) -> threading.local:
        return self.__dict__.setdefault("_gcra_local", threading.local())  # type: ignore[no-any-return]

    @property
    def decision(self) -> Decision | None:
        """The decision of this thread's last ``allow_request`` (None before one, or when not limited)."""
        return getattr(self._local(), "decision", None)

    def _decide(self, request: HttpRequest, policy: Policy, descriptors: Mapping[str, Any], cost: int = 1) -> bool:
        decision = record(request, decide(policy, descriptors, cost, request=request))
        self._local().decision = decision
        if not decision.allowed:
            adopt(request)  # (before ninja looks up its Throttled handler for this very denial)
        return decision.allowed

    def _forget(self) -> None:
        local = self._local()
        local.decision, local.never = None, False

    def wait(self) -> float | None:
        """Seconds until the denied request would be admitted: exact; None if it never will
        (or the last request was admitted)."""
        decision = self.decision
        if decision is None or decision.allowed or decision.impossible or getattr(self._local(), "never", False):
            return None
        return decision.retry_after


class SimpleRateThrottle(_GCRADecided, throttling.SimpleRateThrottle):
    """ninja's ``SimpleRateThrottle`` on GCRA: subclasses override ``get_cache_key`` as in
    ninja; ``scope`` names a rate in ``THROTTLE_RATES`` or the constructor takes one;
    ``burst`` (default: the rate's count) and ``algorithm`` (``"gcra"``, ``"sliding_log"``,
    ``"sliding_window"``) are django_gcra's own."""

    burst: int | None = None
    algorithm: str = "gcra"

    def get_ident(self, request: HttpRequest) -> str | None:
        """The client's address: by ``DJANGO_GCRA['TRUSTED_PROXIES']`` when that is set, else
        by ninja's ``NINJA_NUM_PROXIES`` rule; with it unset, ``REMOTE_ADDR`` (ninja would use
        the whole, client-forgeable X-Forwarded-For). IPv6 addresses are grouped by
        ``IPV6_PREFIX`` (default /64)."""
        if _trusted_proxies_set():
            return client_ip(request)
        from ninja.conf import settings as ninja_settings

        hops = ninja_settings.NUM_PROXIES
        xff = request.META.get("HTTP_X_FORWARDED_FOR")
        address = request.META.get("REMOTE_ADDR")
        if hops and xff is not None:
            entries = xff.split(",")
            address = entries[-min(hops, len(entries))].strip()
        return normalise_ip(address) if address else address

    def limit_name(self) -> str:
        """The limit's name in headers, the audit trail and metrics: the scope (or the class name)."""
        return _limit_name(str(self.scope) if getattr(self, "scope", None) else type(self).__name__)

    def gcra_policy(self) -> Policy | None:
        """The one-limit policy ``ninja.<scope>`` of ``num_requests`` per ``duration`` (None for
        a rate of 0); ``ImproperlyConfigured`` when they are not whole numbers GCRA can run."""
        values = []
        for label in ("num_requests", "duration"):
            value = getattr(self, label, None)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ImproperlyConfigured(f"{type(self).__name__}.{label} is {value!r}: give a whole number.")
            values.append(value)
        num, duration = values
        if num == 0:
            return None
        return throttle_policy(self.limit_name(), num, duration, self.burst, self.algorithm, framework="ninja")

    def allow_request(self, request: HttpRequest) -> bool:
        self._forget()
        key = self.key = self.get_cache_key(request)  # (``key`` as ninja sets it; the decision uses the local)
        if key is None or self.rate is None:
            return True
        policy = self.gcra_policy()
        if policy is None:  # "0/m": ninja refuses every request too, and no wait helps
            self._local().never = True
            return self.throttle_failure()
        limit = policy.limits[0]  # the rate and burst are part of the bucket's identity
        allowed = self._decide(request, policy, {"cache_key": str(key),
                                                 "rate": f"{limit.rates[None]}/{limit.burst}"})
        return self.throttle_success() if allowed else self.throttle_failure()

    def throttle_success(self) -> bool:
        return True

    def throttle_failure(self) -> bool:
        return False


class AnonRateThrottle(SimpleRateThrottle, throttling.AnonRateThrottle):
    """ninja's ``AnonRateThrottle``: requests without ``request.auth`` only, by ``get_ident`` (scope ``anon``)."""

    scope = "anon"


class AuthRateThrottle(SimpleRateThrottle, throttling.AuthRateThrottle):
    """ninja's ``AuthRateThrottle``: by ``request.auth`` (hashed), else by ``get_ident`` (scope ``auth``)."""

    scope = "auth"


class UserRateThrottle(SimpleRateThrottle, throttling.UserRateThrottle):
    """ninja's ``UserRateThrottle``: users by pk, anonymous requests by ``get_ident`` (scope ``user``)."""

    scope = "user"


class PolicyThrottle(_GCRADecided, throttling.BaseThrottle):
    """The configured policy ``policy`` (``DJANGO_GCRA['POLICIES']``), with its descriptors,
    tiers and overrides; ``cost`` is an int or a callable of the request. The policy is
    looked up at each request (an unknown name is a ``KeyError`` naming the configured
    ones); a policy with concurrency limits is refused (ninja has no hook to release a slot
    when the response ends: use ``@ratelimit`` or the middleware)."""

    def __init__(self, policy: str, cost: int | Callable[[HttpRequest], int] = 1) -> None:
        if not isinstance(policy, str) or not policy:
            raise ImproperlyConfigured(f"PolicyThrottle({policy!r}): give the name of a configured policy.")
        if not callable(cost) and (isinstance(cost, bool) or not isinstance(cost, int) or cost < 0):
            raise ImproperlyConfigured(f"PolicyThrottle({policy!r}, cost={cost!r}): the cost must be an int >= 0 "
                                       "or a callable of the request.")
        self.policy, self.cost = policy, cost

    def allow_request(self, request: HttpRequest) -> bool:
        self._forget()
        policy = get_policy(self.policy)
        if policy.concurrency:
            raise ImproperlyConfigured(f"PolicyThrottle({self.policy!r}): the policy has concurrency limits, which a "
                                       "ninja throttle cannot release; use @ratelimit or RateLimitMiddleware.")
        return self._decide(request, policy, descriptors_for(request, descriptor_names(policy)),
                            cost_of(self.cost, request))

    def __repr__(self) -> str:
        return f"PolicyThrottle({self.policy!r})"


# -- The project's responses on a NinjaAPI ---------------------------------------------------


def _api_serving(request: HttpRequest) -> Any | None:
    """The ``NinjaAPI`` whose operation serves ``request``: its URL pattern's view belongs to
    a ninja ``PathView`` (a closure over it, or a bound method of it in older releases); None
    when the request was not routed by Django's URLconf (ninja's ``TestClient``)."""
    func = getattr(getattr(request, "resolver_match", None), "func", None)
    view = getattr(func, "__self__", None)
    if view is None:
        for cell in getattr(func, "__closure__", None) or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if hasattr(contents, "operations"):
                view = contents
                break
    for operation in getattr(view, "operations", None) or ():
        api = getattr(operation, "api", None)
        if api is not None:
            return api
    return None


def adopt(request: HttpRequest) -> None:
    """Give the ``NinjaAPI`` serving ``request`` the project's ``Throttled`` handler, once
    (``install`` without the quota headers of allowed responses, which ninja builds into
    its views up front)."""
    api = _api_serving(request)
    if api is not None and not getattr(api, "_gcra_throttled", False):
        _handle_throttled(api)


def _handle_throttled(api: Any) -> None:
    lookup = getattr(api, "_lookup_exception_handler", None)  # the handler in place: ninja's, or the user's
    default = lookup(Throttled(wait=None)) if lookup is not None else None

    def throttled(request: HttpRequest, exc: Throttled) -> HttpResponseBase:
        decision = getattr(request, "ratelimit", None)
        if isinstance(decision, Decision) and not decision.allowed:
            return denied_response(request, decision)
        if default is not None:
            return default(request, exc)
        return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)

    api.add_exception_handler(Throttled, throttled)
    api._gcra_throttled = True


def install(api: Any) -> Any:
    """Make ``api`` (a ``NinjaAPI``) answer its throttles' denials with the project's 429 (or
    503) and add the quota headers to its other responses. Call it before the API's URLs
    are built (``api.urls``); returns ``api``.

    The denial: ``DENIED_VIEW`` if set, else the JSON body ``{"error", "message",
    "retry_after_seconds"}`` with ``Retry-After`` and the quota headers, whenever a throttle
    of this module denied the request; a denial by any other throttle keeps ninja's
    response. The quota headers of allowed responses need django-ninja >= 1.5
    (``add_decorator``); on older releases only the denials carry them.
    """
    if not getattr(api, "_gcra_throttled", False):
        _handle_throttled(api)
    if hasattr(api, "add_decorator"):
        api.add_decorator(quota_headers, mode="view")
    return api


def _headed(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    decision = getattr(request, "ratelimit", None)
    return apply_quota_headers(response, decision) if isinstance(decision, Decision) else response


def quota_headers(run: Callable[..., Any]) -> Callable[..., Any]:
    """A ninja view decorator (``api.add_decorator(quota_headers, mode="view")``, which
    ``install`` does): the quota headers of ``request.ratelimit`` on the response."""
    if iscoroutinefunction(run):
        @functools.wraps(run)
        async def arun(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            return _headed(request, await run(request, *args, **kwargs))

        return arun

    @functools.wraps(run)
    def srun(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return _headed(request, run(request, *args, **kwargs))

    return srun
