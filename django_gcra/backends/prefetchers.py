"""Where lease prefetches run off the request path (``lease_backend``).

One ``Prefetchers`` per engine (its leases'):

- ``submit``: a background ``Worker``, made on first use, runs the prefetches of
  ``decide()``.
- ``run_in_loop``: a prefetch of ``adecide()`` as a task of the running event loop (held
  here until it ends: the loop keeps only weak references to its tasks).
- ``collect_late``: a prefetch sent ahead on a request thread's connection has its reply
  read by a request, as a rule; one that no request has read within ``LATE_AFTER``
  seconds (its thread went idle, or ended) is read by a collector ``Worker``, which
  sleeps while none are waiting.

A forked child builds its own engine: none of the parent's threads, tasks or waiting replies.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from ..worker import Worker

__all__ = ["LATE_AFTER", "Prefetchers"]

logger = logging.getLogger("django_gcra")
LATE_AFTER = 0.05  # seconds


class Prefetchers:
    """The prefetches of one engine's leases: its background worker, its event-loop tasks
    and the replies waiting for the collector."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()  # prefetches running as event-loop tasks (strong references)
        self._late: deque[tuple[float, Callable[[], None]]] = deque()  # (when sent, its collect), oldest first
        self._late_lock = threading.Lock()
        self.prefetcher = Worker("lease-prefetch")
        self.collector = Worker("lease-collector", self._collect_due)

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the background worker."""
        self.prefetcher.submit(job)

    def run_in_loop(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run ``coroutine`` as a task of the running event loop."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def collect_late(self, collect: Callable[[], None]) -> None:
        """Have ``collect`` called after ``LATE_AFTER`` seconds (it reads nothing if a request
        has read the reply by then)."""
        with self._late_lock:
            idle = not self._late
            self._late.append((time.monotonic(), collect))
        if idle:
            self.collector.wake()

    def _collect_due(self) -> float | None:
        """Read the replies waiting for ``LATE_AFTER`` or longer; the seconds until the next is due."""
        while True:
            with self._late_lock:
                if not self._late:
                    return None
                due = self._late[0][0] + LATE_AFTER - time.monotonic()
                if due > 0:
                    return due
                collect = self._late.popleft()[1]
            try:
                collect()
            except Exception:  # pragma: no cover (collect hands a broken connection's error to the prefetch)
                logger.exception("django_gcra: reading a lease prefetch's reply failed")

    def close(self) -> None:
        """Run what was submitted and stop both threads (the engine is retired)."""
        self.prefetcher.stop()
        self.collector.stop()
