"""Retry helpers for clients of rate-limited HTTP APIs (an optional extra).

    pip install requests httpx   # what the [client] extra installs; either one is enough

    requests.Session().mount("http://", RetryingAdapter())
    httpx.Client(transport=RetryingTransport())
    httpx.AsyncClient(transport=AsyncRetryingTransport())

Each retries 429 and 503 after ``Retry-After`` plus full jitter, within ``max_attempts``
tries and ``max_wait`` seconds of waiting, idempotent methods only unless told
otherwise; see :mod:`django_gcra.client.core` for the formula. Nothing here needs
Django settings, and only the HTTP library a front-end wraps needs to be installed:
the front-ends are imported when first used.
"""

from __future__ import annotations

from typing import Any

from .core import IDEMPOTENT_METHODS, RETRY_STATUSES, Pacer, RetryBudgetExhausted, RetryPolicy, RetryState
from .fields import parse_http_date, parse_retry_after, ratelimit_items

__all__ = [
    "IDEMPOTENT_METHODS",
    "RETRY_STATUSES",
    "AsyncRetryingTransport",
    "Pacer",
    "RetryBudgetExhausted",
    "RetryPolicy",
    "RetryState",
    "RetryingAdapter",
    "RetryingTransport",
    "parse_http_date",
    "parse_retry_after",
    "ratelimit_items",
]

_LAZY = {"RetryingAdapter": ("requests_adapter", "requests"),
         "RetryingTransport": ("httpx_transport", "httpx"),
         "AsyncRetryingTransport": ("httpx_transport", "httpx")}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, library = _LAZY[name]
    try:
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{module}"), name)
    except ModuleNotFoundError as exc:
        if exc.name != library:
            raise
        raise ImportError(f"django_gcra.client.{name} needs {library}: pip install {library} "
                          "(the [client] extra installs it)") from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
