"""Where lease prefetches run off the request path (``lease_backend``).

- ``submit``: one background thread, made on first use, runs the prefetches of
  ``decide()``.
- ``run_in_loop``: a prefetch of ``adecide()`` as a task of the running event loop (held
  here until it ends: the loop keeps only weak references to its tasks).
- ``collect_late``: a prefetch sent ahead on a request thread's connection has its reply
  read by a request, as a rule; one that no request has read within ``LATE_AFTER``
  seconds (its thread went idle, or ended) is read by a collector thread, which runs
  while any are waiting and then ends.

A forked child starts with none of the parent's threads, tasks or waiting replies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["LATE_AFTER", "collect_late", "run_in_loop", "submit", "tasks"]

logger = logging.getLogger("django_gcra")
LATE_AFTER = 0.05  # seconds

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()
tasks: set[asyncio.Task[Any]] = set()  # prefetches running as event-loop tasks (strong references)
_late: deque[tuple[float, Callable[[], None]]] = deque()  # (when sent, its collect), oldest first
_late_lock = threading.Lock()
_collector: threading.Thread | None = None


def submit(job: Callable[[], None]) -> None:
    """Run ``job`` on the background thread."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="django_gcra-lease")
        _executor.submit(job)


def run_in_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine`` as a task of the running event loop."""
    task = asyncio.get_running_loop().create_task(coroutine)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def collect_late(collect: Callable[[], None]) -> None:
    """Have ``collect`` called after ``LATE_AFTER`` seconds (it reads nothing if a request
    has read the reply by then)."""
    global _collector
    with _late_lock:
        _late.append((time.monotonic(), collect))
        if _collector is None:
            _collector = threading.Thread(target=_collect_loop, name="django_gcra-lease-collector", daemon=True)
            _collector.start()


def _collect_loop() -> None:
    global _collector
    while True:
        time.sleep(LATE_AFTER)
        cutoff = time.monotonic() - LATE_AFTER
        while True:
            with _late_lock:
                if not _late:
                    _collector = None
                    return
                if _late[0][0] > cutoff:
                    break
                collect = _late.popleft()[1]
            try:
                collect()
            except Exception:  # pragma: no cover (collect hands a broken connection's error to the prefetch)
                logger.exception("django_gcra: reading a lease prefetch's reply failed")


def _forget_in_child() -> None:
    global _executor, _executor_lock, _collector, _late_lock
    _executor = _collector = None  # no thread behind the parent's executor or collector
    _executor_lock, _late_lock = threading.Lock(), threading.Lock()
    tasks.clear()
    _late.clear()  # the parent's connections: the child forgot its leases


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
