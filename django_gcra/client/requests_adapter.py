"""``RetryingAdapter``: the retry helper for ``requests``.

    session = requests.Session()
    session.mount("http://", RetryingAdapter(max_attempts=4, max_wait=20))
    session.mount("https://", RetryingAdapter(max_attempts=4, max_wait=20))

Retries happen below the Session, once per hop (redirects and auth hooks run above).
A body is replayed only if it is bytes or str (what ``data=``, ``json=`` and ``files=``
produce); a generator or file object is sent once and its 429 returned as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from requests.adapters import BaseAdapter, HTTPAdapter
from requests.models import PreparedRequest, Response

from .core import RetryPolicy, run_sync, split_options

__all__ = ["RetryingAdapter"]


def replayable(body: Any) -> bool:
    return body is None or isinstance(body, (bytes, str))


def discard(response: Response) -> None:
    """Read the (small) body so the pooled connection is reused, then release it."""
    try:
        response.content  # noqa: B018 - reading caches the body for a RetryBudgetExhausted
    finally:
        response.close()


class RetryingAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` that retries 429 and 503 (see :mod:`django_gcra.client.core`).

    ``inner``: an adapter to send through (default: this adapter's own pools).
    ``retry``: a ready :class:`RetryPolicy`; otherwise RetryPolicy's options
    (``max_attempts``, ``max_wait``, ``pace``, ``on_retry``...) as keywords. Other keywords
    go to ``HTTPAdapter`` (``pool_connections``, ``pool_maxsize``, ``max_retries``...).
    ``sleep``: replaced in tests.
    """

    def __init__(self, inner: BaseAdapter | None = None, *, retry: RetryPolicy | None = None,
                 sleep: Callable[[float], Any] = time.sleep, **options: Any) -> None:
        ours, adapter_options = split_options(options)
        if retry is not None and ours:
            raise TypeError(f"give retry= or {sorted(ours)}, not both")
        super().__init__(**adapter_options)
        self.retry = retry or RetryPolicy(**ours)
        self.inner, self.sleep = inner, sleep

    def send(self, request: PreparedRequest, stream: bool = False, timeout: Any = None, verify: Any = True,
             cert: Any = None, proxies: Any = None) -> Response:
        once = self.inner.send if self.inner is not None else super().send
        state = self.retry.start(request.method or "GET", request.url or "", replayable(request.body))
        return run_sync(state, lambda: once(request, stream=stream, timeout=timeout, verify=verify, cert=cert,
                                            proxies=proxies), discard, self.sleep)

    def close(self) -> None:
        super().close()
        if self.inner is not None:
            self.inner.close()
