"""Testing a project that uses django_gcra: ``reset_limits()``, ``limiter_clock()`` and
``assert_rate_limited()`` (docs/howto/testing.md). The pytest plugin
(``django_gcra.pytest_plugin``) offers them as the fixtures ``gcra_reset`` and ``gcra_clock``.

The package never imports this module, and the clock refuses to start outside Django's test
environment (``django.test.utils.setup_test_environment()``, called by pytest-django and by
Django's test runner): no setting, header or stray import turns it on in production.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from .backends import clock as script_clock
from .conf import forget_built, get_settings
from .reset import forget_process_state, store_aliases
from .store import cache_connection

__all__ = ["LimiterClock", "assert_rate_limited", "limiter_clock", "reset_limits"]

F = TypeVar("F", bound=Callable[..., Any])
BATCH = 500  # keys per UNLINK round trip in reset_limits


def reset_limits() -> int:
    """Forget every limiter state of this project: delete the store's keys under
    ``KEY_PREFIX`` on every cache alias in use (``CACHE_ALIAS``, the policies' own, every
    region's; on Redis Cluster, on every primary), and this process's leases, memoized
    plans, circuit breakers and fallback counters. Returns the number of keys deleted."""
    pattern = _glob_escape(get_settings().prefix) + ":*"
    aliases = store_aliases()
    forget_process_state()
    deleted = 0
    for alias in aliases:
        for client in _primary_connections(cache_connection(alias)):  # (Redis Cluster: SCAN every primary)
            deleted += _unlink_matching(client, pattern)
    forget_process_state()  # (a decision of another thread meanwhile)
    return deleted


def _unlink_matching(client: Any, pattern: str) -> int:
    deleted, batch = 0, []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= BATCH:
            deleted += _unlink(client, batch)
            batch = []
    if batch:
        deleted += _unlink(client, batch)
    return deleted


def _unlink(client: Any, keys: list[bytes]) -> int:
    """One UNLINK per key (a cluster node's keys are of many slots), pipelined."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
    return sum(int(n) for n in pipe.execute())


def _primary_connections(client: Any) -> list[Any]:
    """``client`` itself, or on Redis Cluster a plain client of each primary."""
    if not hasattr(client, "get_primaries"):
        return [client]
    return [node.redis_connection or client.get_redis_connection(node) for node in client.get_primaries()]


def _store_now_us() -> int:
    """The store's ``TIME`` (``CACHE_ALIAS``; on Redis Cluster, a primary's), in microseconds."""
    seconds, micros = _primary_connections(cache_connection(get_settings().cache_alias))[0].time()
    return int(seconds) * 1_000_000 + int(micros)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class LimiterClock:
    """The store's time for this process's decisions while it is active (``limiter_clock``)."""

    def __init__(self, start: float | None = None) -> None:
        if start is not None and not (isinstance(start, (int, float)) and not isinstance(start, bool)
                                      and math.isfinite(start) and start >= 0):
            raise ValueError(f"start must be Unix seconds (a finite number >= 0), not {start!r}")
        self.start = start
        self._clock: script_clock.ScriptClock | None = None

    @property
    def now(self) -> float:
        """The clock's time, Unix seconds."""
        return self._active().now_us / 1e6

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward (the only way it moves); returns ``now``."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
                math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"advance() takes a finite number of seconds >= 0, not {seconds!r}")
        clock = self._active()
        clock.now_us += round(seconds * 1_000_000)
        return clock.now_us / 1e6

    def _active(self) -> script_clock.ScriptClock:
        if self._clock is None:
            raise RuntimeError("this limiter_clock() is not active (use it as `with limiter_clock() as clock:`)")
        return self._clock

    def __enter__(self) -> LimiterClock:
        if self._clock is not None:
            raise RuntimeError("this limiter_clock() is already active")
        script_clock.require_test_environment()  # (install checks it too; here before any store call)
        now_us = _store_now_us() if self.start is None else round(self.start * 1_000_000)
        clock = script_clock.ScriptClock(now_us)
        script_clock.install(clock)
        self._clock = clock
        forget_built()  # every backend and plan is built again: on the clocked store, without leases
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        clock, self._clock = self._clock, None
        if clock is not None:
            script_clock.uninstall(clock)
            forget_built()  # back to the store's own time, and its leases

    def __call__(self, func: F) -> F:
        """As a decorator: the clock is active while ``func`` runs (a coroutine function too)."""
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                with self:
                    return await func(*args, **kwargs)
            return awrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)
        return wrapper  # type: ignore[return-value]


def limiter_clock(start: float | None = None) -> LimiterClock:
    """A clock the store's scripts read instead of the server's ``TIME`` while it is
    active, in this process only::

        with limiter_clock() as clock:
            ...
            clock.advance(2.5)

    It starts at the store's current time (or at ``start``, Unix seconds) and moves only by
    ``clock.advance()``. Also a decorator (``@limiter_clock()``; keep the object to advance
    it). While it is active, decisions are one plain ``EVAL`` each, never served from a
    lease, and the keys they write expire a day later than usual. ``RuntimeError`` outside
    Django's test environment, or while another clock is active."""
    return LimiterClock(start)


def _status(response: Any) -> int:
    status = getattr(response, "status_code", None)
    if not isinstance(status, int):
        raise AssertionError(f"expected an HTTP response with a status_code, got {response!r}")
    return status


def _retry_after(response: Any) -> str | None:
    headers = getattr(response, "headers", None)
    if headers is not None and "Retry-After" in headers:
        return str(headers["Retry-After"])
    try:
        return str(response["Retry-After"])
    except (KeyError, TypeError):
        return None


def assert_rate_limited(call: Callable[[], Any], after: int) -> Any:
    """Call ``call()`` ``after`` times expecting responses that are not 429, then once more
    expecting a 429 with ``Retry-After``; return that response. The ``AssertionError``
    names the call (1-based) that differed."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"after must be an int >= 0, not {after!r}")
    for n in range(1, after + 1):
        status = _status(call())
        if status == 429:
            raise AssertionError(f"call {n} of {after + 1} was rate limited (429); expected the first {after} "
                                 "to pass")
    response = call()
    status = _status(response)
    if status != 429:
        raise AssertionError(f"call {after + 1} answered {status}; expected 429 after {after} call(s)")
    if _retry_after(response) is None:
        raise AssertionError(f"call {after + 1} answered 429 without a Retry-After header")
    return response
