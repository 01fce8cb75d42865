"""Where lease prefetches run off the request path (``lease_backend``).

- ``submit``: a background ``Worker``, made on first use, runs the prefetches of
  ``decide()``.
- ``run_in_loop``: a prefetch of ``adecide()`` as a task of the running event loop (held
  here until it ends: the loop keeps only weak references to its tasks).
- ``collect_late``: a prefetch sent ahead on a request thread's connection has its reply
  read by a request, as a rule; one that no request has read within ``LATE_AFTER``
  seconds (its thread went idle, or ended) is read by a collector ``Worker``, which
  sleeps while none are waiting.

A forked child starts with none of the parent's threads, tasks or waiting replies.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from ..worker import Worker, after_fork

__all__ = ["LATE_AFTER", "collect_late", "run_in_loop", "submit", "tasks"]

logger = logging.getLogger("django_gcra")
LATE_AFTER = 0.05  # seconds

tasks: set[asyncio.Task[Any]] = set()  # prefetches running as event-loop tasks (strong references)
_late: deque[tuple[float, Callable[[], None]]] = deque()  # (when sent, its collect), oldest first
_late_lock = threading.Lock()


def submit(job: Callable[[], None]) -> None:
    """Run ``job`` on the background worker."""
    _prefetcher.submit(job)


def run_in_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine`` as a task of the running event loop."""
    task = asyncio.get_running_loop().create_task(coroutine)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def collect_late(collect: Callable[[], None]) -> None:
    """Have ``collect`` called after ``LATE_AFTER`` seconds (it reads nothing if a request
    has read the reply by then)."""
    with _late_lock:
        idle = not _late
        _late.append((time.monotonic(), collect))
    if idle:
        _collector.wake()


def _collect_due() -> float | None:
    """Read the replies waiting for ``LATE_AFTER`` or longer; the seconds until the next is due."""
    while True:
        with _late_lock:
            if not _late:
                return None
            due = _late[0][0] + LATE_AFTER - time.monotonic()
            if due > 0:
                return due
            collect = _late.popleft()[1]
        try:
            collect()
        except Exception:  # pragma: no cover (collect hands a broken connection's error to the prefetch)
            logger.exception("django_gcra: reading a lease prefetch's reply failed")


_prefetcher = Worker("lease-prefetch")
_collector = Worker("lease-collector", _collect_due)


@after_fork
def _forget_in_child() -> None:
    global _late_lock
    _late_lock = threading.Lock()
    tasks.clear()
    _late.clear()  # the parent's connections: the child forgot its leases
