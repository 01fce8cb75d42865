"""``RetryingTransport`` and ``AsyncRetryingTransport``: the retry helper for ``httpx``.

    httpx.Client(transport=RetryingTransport(max_attempts=4, max_wait=20))
    httpx.AsyncClient(transport=AsyncRetryingTransport(max_attempts=4, max_wait=20))

A transport given to a client replaces the client's own: pass connection options to the
inner transport (``RetryingTransport(httpx.HTTPTransport(verify=..., http2=...))``).
A body is replayed only if it was given whole (``content=bytes``, ``data=``, ``json=``);
a streamed one (a generator, ``files=``) is sent once and its 429 returned as it is.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

try:  # httpx runs on asyncio and trio through anyio (installed with httpx's httpcore)
    from anyio import sleep as async_sleep
except ImportError:  # pragma: no cover
    from asyncio import sleep as async_sleep

from .core import RetryPolicy, run_async, run_sync

__all__ = ["AsyncRetryingTransport", "RetryingTransport"]


def replayable(request: httpx.Request) -> bool:
    return isinstance(request.stream, httpx.ByteStream)


def _policy(retry: RetryPolicy | None, options: dict[str, Any]) -> RetryPolicy:
    if retry is not None and options:
        raise TypeError(f"give retry= or {sorted(options)}, not both")
    return retry or RetryPolicy(**options)


def _discard(response: httpx.Response) -> None:
    try:
        response.read()
    finally:
        response.close()


async def _adiscard(response: httpx.Response) -> None:
    try:
        await response.aread()
    finally:
        await response.aclose()


class RetryingTransport(httpx.BaseTransport):
    """A sync transport that retries 429 and 503 (see :mod:`django_gcra.client.core`).

    ``transport``: the inner transport (default ``httpx.HTTPTransport()``); ``retry``: a
    ready :class:`RetryPolicy`, or its options as keywords; ``sleep``: replaced in tests.
    """

    def __init__(self, transport: httpx.BaseTransport | None = None, *, retry: RetryPolicy | None = None,
                 sleep: Callable[[float], Any] = time.sleep, **options: Any) -> None:
        self.transport = transport if transport is not None else httpx.HTTPTransport()
        self.retry, self.sleep = _policy(retry, options), sleep

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        state = self.retry.start(request.method, str(request.url), replayable(request))
        return run_sync(state, lambda: self.transport.handle_request(request), _discard, self.sleep)

    def close(self) -> None:
        self.transport.close()


class AsyncRetryingTransport(httpx.AsyncBaseTransport):
    """:class:`RetryingTransport` for ``httpx.AsyncClient``: waits are ``await sleep(...)``
    (``anyio.sleep``, so asyncio or trio, unless given), so other tasks run meanwhile."""

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None, *, retry: RetryPolicy | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = async_sleep, **options: Any) -> None:
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        self.retry, self.sleep = _policy(retry, options), sleep

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        state = self.retry.start(request.method, str(request.url), replayable(request))
        return await run_async(state, lambda: self.transport.handle_async_request(request), _adiscard, self.sleep)

    async def aclose(self) -> None:
        await self.transport.aclose()
