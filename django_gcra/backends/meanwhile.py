"""Work to do while a store reply is in flight.

A decision's round trip to Redis leaves its thread idle for tens of microseconds. Book-
keeping that need not precede the request (a leased policy counting a cold key's heat:
``LeasingBackend``) is queued here with ``later`` and run by the next request written on
a connection of this process (``direct.DirectRunner``, the asyncio multiplexer), between
its write and its read: it costs that request no time. A caller that may not reach such
a request runs the leftovers before it needs them (``LeasingBackend.still_cold``).

Queued work is a callable, or a leased policy's plan that is not memoized (queued by
``store.backend_for_plan``, with no frame of its own), which its lease wrapper counts
(``p.backend.count_sent(p)``). It runs on whichever thread writes next, with that
connection's lock held: it must be quick, thread-safe, and never call the store. An
error in it is logged, and never reaches the request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["later", "pending", "run"]

logger = logging.getLogger("django_gcra")

# The queue (read by the writers as ``if pending:``, one global test per request).
pending: list[Any] = []
# later(work): run ``work`` while the next request's reply is in flight (the list's own
# append: a C call, no Python frame on the caller's request path).
later: Callable[[Any], None] = pending.append


def run() -> None:
    """Run the queued work (a writer, after its write and before its read)."""
    while pending:
        try:
            work = pending.pop()
        except IndexError:  # another thread took the last one
            return
        try:
            if callable(work):
                work()
            else:  # a plan sent to the store uncounted: its wrapper counts it
                work.backend.count_sent(work)
        except Exception:
            logger.exception("django_gcra: work queued to run during a store call failed")
