"""The retry decision shared by every front-end: which responses to retry, how long to
wait, when the budget is spent, and the pacing state. No HTTP library and no Django.

The wait before retry number ``n`` (1 for the first retry):

    floor  = Retry-After (seconds or HTTP-date), else the RateLimit field's t when it
             says r=0, else 0
    room   = min(max_delay, max_wait - waited so far)
    stop   if n == max_attempts, room <= 0 or floor > room   (never retry early)
    wait   = floor + random() * min(backoff_cap, backoff_base * 2 ** (n - 1), room - floor)

so a wait is never shorter than what the server asked for, the jitter on top is "full
jitter" (uniform from 0 to an exponentially growing cap), and the sum of all waits of
one request never exceeds ``max_wait``. A pacing pause (``pace=True``) is the time left
until the policy's ``t`` has passed plus ``random() * min(backoff_base, backoff_cap)``, so
the requests held by one pause do not all leave at the same instant. The front-ends run the same loop
(:func:`run_sync`, :func:`run_async`); they differ only in ``sleep`` versus ``await``.
"""

from __future__ import annotations

import logging
import random as _random
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from .fields import parse_http_date, parse_retry_after, ratelimit_items

__all__ = [
    "IDEMPOTENT_METHODS",
    "POLICY_OPTIONS",
    "RETRY_STATUSES",
    "Pacer",
    "RetryBudgetExhausted",
    "RetryPolicy",
    "RetryState",
    "run_async",
    "run_sync",
]

logger = logging.getLogger("django_gcra.client")

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})  # RFC 9110 s9.2.2
RETRY_STATUSES = frozenset({429, 503})


class Headers(Protocol):
    def get(self, name: str, default: Any = None) -> Any: ...


class Response(Protocol):
    status_code: int
    headers: Any


R = TypeVar("R", bound=Response)


class RetryBudgetExhausted(Exception):
    """A 429 or 503 that the budget does not allow to retry.

    ``response`` is the last response (its body read, so ``.text`` works), ``url`` its
    origin and path (no query string, which may hold secrets), ``attempts``
    the requests sent, ``waited`` the seconds slept, ``reason`` ``"attempts"`` (the last
    of ``max_attempts``) or ``"time"`` (the next wait would not fit in ``max_wait`` or
    ``max_delay``), ``retry_after`` the server's wait for that response (None if none).
    """

    def __init__(self, response: Any, *, method: str, url: str, attempts: int, waited: float, reason: str,
                 retry_after: float | None) -> None:
        self.response, self.method, self.url = response, method, url
        self.attempts, self.waited, self.reason, self.retry_after = attempts, waited, reason, retry_after
        after = "" if retry_after is None else f"; the server asked for {retry_after:.3g} s more"
        super().__init__(f"{method} {url}: {response.status_code} after {attempts} attempt(s) and {waited:.3f} s "
                         f"of waiting, retry budget exhausted ({reason}){after}")


class Pacer:
    """Thread-safe pacing state: when a response's ``RateLimit`` field says a policy has
    ``r=0`` with ``t``, requests to that origin and policy wait until ``t`` has passed.

    Which policy a request will meet is learnt from the responses to its path: a path is
    paced by the policies named in the last ``RateLimit`` field seen for it (so two paths
    behind one policy share a pause, and another policy of the host is not held up).
    One Pacer may be shared by several clients (pass ``pacer=``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_routes: int = 4096) -> None:
        self.clock, self.max_routes = clock, max_routes
        self._lock = threading.Lock()
        self._resume: dict[tuple[str, str], float] = {}  # (origin, policy) -> clock() when it may go
        self._routes: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()

    def delay(self, origin: str, path: str) -> tuple[float, str | None]:
        """Seconds to hold a request to ``origin`` + ``path``, and the policy that holds it."""
        now = self.clock()
        with self._lock:
            best, policy = 0.0, None
            for name in self._routes.get((origin, path), ()):
                wait = self._resume.get((origin, name), 0.0) - now
                if wait > best:
                    best, policy = wait, name
            return best, policy

    def observe(self, origin: str, path: str, ratelimit: str | None) -> None:
        """Record a response's ``RateLimit`` field for ``origin`` + ``path``."""
        items = ratelimit_items(ratelimit)
        if not items:
            return
        now = self.clock()
        with self._lock:
            self._routes[(origin, path)] = tuple(name for name, _, _ in items)
            self._routes.move_to_end((origin, path))
            while len(self._routes) > self.max_routes:
                self._routes.popitem(last=False)
            for name, remaining, reset in items:
                if remaining == 0 and reset:
                    self._resume[(origin, name)] = now + reset
                else:  # units available again (or no reset given): nothing to wait for
                    self._resume.pop((origin, name), None)
            if len(self._resume) > self.max_routes:
                self._resume = {k: v for k, v in self._resume.items() if v > now}


@dataclass(frozen=True)
class RetryPolicy:
    """Everything the three front-ends accept as keyword arguments (see the module doc
    for how the numbers combine)."""

    max_attempts: int = 3            # total tries, the first included
    max_wait: float = 30.0           # seconds: all waits (retries and pacing) of one request
    max_delay: float | None = None   # seconds: one wait at most (None: max_wait)
    backoff_base: float = 0.5        # seconds: jitter cap of the first retry, doubled per retry
    backoff_cap: float = 8.0         # seconds: the jitter cap never grows past this
    retry_statuses: Iterable[int] = RETRY_STATUSES
    retry_methods: Iterable[str] | None = None   # None: IDEMPOTENT_METHODS
    retry_non_idempotent: bool = False           # True: every method (bodies must still be replayable)
    raise_on_exhausted: bool = True  # False: return the last 429/503 instead of raising
    pace: bool = False               # wait out RateLimit r=0;t=N before the next request to that policy
    pacer: Pacer | None = None       # share pacing state between clients (implies pace=True)
    on_retry: Callable[[int, float, Any], None] | None = None   # (attempt just made, wait, response)
    clock: Callable[[], float] = time.monotonic   # for budgets and pacing
    wall_clock: Callable[[], float] = time.time   # for HTTP-dates when a response has no Date
    random: Callable[[], float] = _random.random  # uniform in [0, 1)
    methods: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, not {self.max_attempts!r}")
        for name in ("max_wait", "backoff_base", "backoff_cap") + (("max_delay",) if self.max_delay is not None
                                                                  else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, not {value!r}")
        if self.retry_methods is not None and self.retry_non_idempotent:
            raise ValueError("give retry_methods or retry_non_idempotent=True, not both")
        methods = self.retry_methods or IDEMPOTENT_METHODS
        derived: dict[str, object] = {"retry_statuses": frozenset(int(s) for s in self.retry_statuses),
                                      "methods": frozenset(m.upper() for m in methods)}
        if self.pacer is not None:
            derived["pace"] = True
        elif self.pace:
            derived["pacer"] = Pacer(self.clock)
        for name, value in derived.items():  # frozen: one policy is shared by every request of a client
            object.__setattr__(self, name, value)

    def allows_method(self, method: str) -> bool:
        return self.retry_non_idempotent or method.upper() in self.methods

    def start(self, method: str, url: str, replayable: bool = True) -> RetryState:
        """The retry state of one request (a new one per request)."""
        return RetryState(self, method.upper(), url, replayable)


POLICY_OPTIONS = frozenset(f.name for f in fields(RetryPolicy) if f.init)


class RetryState:
    """One request's attempts and waits. The front-end calls :meth:`pace_delay` before
    each send and :meth:`after` with each response; ``after`` returns the seconds to wait
    before resending, or None when the response is final."""

    def __init__(self, policy: RetryPolicy, method: str, url: str, replayable: bool) -> None:
        self.policy, self.method, self.url = policy, method, url
        parts = urlsplit(url)
        self.origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}".lower()  # no credentials
        self.path = parts.path or "/"
        self.where = self.origin + self.path  # for logs and errors: no query string (it may hold a secret)
        self.retryable = replayable and policy.allows_method(method)
        self.why_not = None if self.retryable else ("method" if replayable else "body")
        self.attempts, self.waited = 0, 0.0
        self.exhausted: str | None = None
        self.retry_after: float | None = None

    def pace_delay(self) -> float:
        """Seconds to hold the next send for pacing (0.0 without pacing). A pause longer
        than what is left of ``max_wait`` is skipped: the server has the last word."""
        pacer = self.policy.pacer
        if pacer is None:
            return 0.0
        wait, name = pacer.delay(self.origin, self.path)
        if wait <= 0:
            return 0.0
        wait += self.policy.random() * min(self.policy.backoff_base, self.policy.backoff_cap)
        if wait > self.policy.max_wait - self.waited:
            logger.debug("%s %s: pacing for %r skipped, %.3f s exceeds the budget", self.method, self.where, name, wait)
            return 0.0
        self.waited += wait
        logger.debug("%s %s: paced %.3f s for policy %r (RateLimit r=0)", self.method, self.where, wait, name)
        return wait

    def floor(self, headers: Headers) -> float | None:
        """The server's minimum wait: Retry-After (which takes precedence), else RateLimit's
        t of a policy at r=0, else None."""
        date = headers.get("date")
        now = parse_http_date(date) if date else None
        wait = parse_retry_after(headers.get("retry-after"), self.policy.wall_clock() if now is None else now)
        if wait is not None:
            return wait
        resets = [t for _, r, t in ratelimit_items(headers.get("ratelimit")) if r == 0 and t is not None]
        return float(max(resets)) if resets else None

    def after(self, status: int, headers: Headers, response: Any = None) -> float | None:
        """Record one response; the seconds to wait before resending it, or None (final:
        not retryable, or, with ``self.exhausted`` set, the budget is spent)."""
        policy = self.policy
        self.attempts += 1
        if policy.pacer is not None:
            policy.pacer.observe(self.origin, self.path, headers.get("ratelimit"))
        if status not in policy.retry_statuses:
            return None
        if not self.retryable:
            logger.debug("%s %s: %d not retried (%s)", self.method, self.where, status,
                         "non-idempotent method" if self.why_not == "method" else "body cannot be replayed")
            return None
        floor = self.retry_after = self.floor(headers)
        low = floor or 0.0
        room = policy.max_wait - self.waited
        if policy.max_delay is not None:
            room = min(room, policy.max_delay)
        if self.attempts >= policy.max_attempts:
            self.exhausted = "attempts"
        elif room <= 0 or low > room:
            self.exhausted = "time"
        if self.exhausted:
            logger.warning("%s %s: %d, retry budget exhausted (%s) after %d attempt(s) and %.3f s", self.method,
                           self.where, status, self.exhausted, self.attempts, self.waited)
            return None
        span = min(policy.backoff_cap, policy.backoff_base * 2 ** min(self.attempts - 1, 64), room - low)
        wait: float = low + policy.random() * span
        self.waited += wait
        logger.info("%s %s: %d, retrying in %.3f s (Retry-After %s; attempt %d of %d)", self.method, self.where, status,
                    wait, "none" if floor is None else f"{floor:g} s", self.attempts + 1, policy.max_attempts)
        if policy.on_retry is not None:
            policy.on_retry(self.attempts, wait, response)
        return wait

    def give_up(self, response: Any) -> RetryBudgetExhausted:
        return RetryBudgetExhausted(response, method=self.method, url=self.where, attempts=self.attempts,
                                    waited=self.waited, reason=self.exhausted or "attempts",
                                    retry_after=self.retry_after)


def run_sync(state: RetryState, send: Callable[[], R], discard: Callable[[R], None],
             sleep: Callable[[float], Any]) -> R:
    """Send until a response is final; ``discard`` reads and closes a response not returned."""
    while True:
        delay = state.pace_delay()
        if delay:
            sleep(delay)
        response = send()
        wait = state.after(response.status_code, response.headers, response)
        if wait is None:
            if state.exhausted and state.policy.raise_on_exhausted:
                discard(response)
                raise state.give_up(response)
            return response
        discard(response)
        sleep(wait)


async def run_async(state: RetryState, send: Callable[[], Awaitable[R]], discard: Callable[[R], Awaitable[None]],
                    sleep: Callable[[float], Awaitable[Any]]) -> R:
    """:func:`run_sync` with ``await``: the same decisions, in the same order."""
    while True:
        delay = state.pace_delay()
        if delay:
            await sleep(delay)
        response = await send()
        wait = state.after(response.status_code, response.headers, response)
        if wait is None:
            if state.exhausted and state.policy.raise_on_exhausted:
                await discard(response)
                raise state.give_up(response)
            return response
        await discard(response)
        await sleep(wait)


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(RetryPolicy keyword arguments, the rest)."""
    ours = {k: v for k, v in options.items() if k in POLICY_OPTIONS}
    return ours, {k: v for k, v in options.items() if k not in POLICY_OPTIONS}
