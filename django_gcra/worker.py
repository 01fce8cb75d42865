"""``Worker``: the one kind of background thread the package runs, and the one fork hook.

Every job that runs off the request path (the audit flusher, the console's tally, the
concurrency slots' keeper, lease prefetches and their late replies, the share sync of
multi-region budgets, the override and access-rule refresh) is a ``Worker``: a daemon
thread made on first use that calls its ``step`` whenever it is woken and whenever the
delay ``step`` returned has passed; it also runs jobs handed to it with ``submit``.
``stop()`` ends it (after a last step) and joins it. Nothing a caller's next step depends
on is handed to a worker.

A forked child has none of its parent's threads: after a fork every worker forgets its
thread, queue and locks (it starts again on its next use), and the callbacks registered
with ``after_fork`` run, in registration order. This module holds the package's only
``os.register_at_fork``.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable

__all__ = ["Worker", "after_fork"]

logger = logging.getLogger("django_gcra")

_workers: weakref.WeakSet[Worker] = weakref.WeakSet()
_fork_callbacks: list[Callable[[], None]] = []


class Worker:
    """A named background loop. ``step()`` runs ``first`` seconds (or ``first()``) after the
    thread starts (None: when first woken), then whenever it is woken or the seconds it returned have
    passed (None: when woken); an exception it raises is logged and the loop goes on."""

    def __init__(self, name: str, step: Callable[[], float | None] | None = None,
                 first: Callable[[], float | None] | float | None = 0.0) -> None:
        self.name, self.step, self.first = name, step, first
        self._forget()
        _workers.add(self)

    def _forget(self) -> None:
        self._cond = threading.Condition(threading.RLock())  # re-entrant: a finalizer may submit while held
        self._thread: threading.Thread | None = None
        self._jobs: deque[Callable[[], None]] = deque()
        self._woken = False
        self._stopping = False
        self._last_step = True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread unless it runs (or was stopped)."""
        if self._thread is not None or self._stopping:
            return
        with self._cond:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name=f"django_gcra-{self.name}", daemon=True)
                self._thread.start()

    def wake(self) -> None:
        """Run ``step`` now (starting the thread if needed)."""
        with self._cond:
            self._woken = True
            self._cond.notify()
        self.start()

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the thread, after the jobs submitted before it."""
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()
        self.start()

    def stop(self, timeout: float = 5.0, last_step: bool = True) -> None:
        """End the thread after a last step (``last_step``; the jobs submitted run in any
        case); wait for it at most ``timeout`` seconds. A stopped worker stays stopped
        until ``restart()``."""
        with self._cond:
            self._stopping = True
            self._last_step = last_step
            self._cond.notify()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def restart(self) -> None:
        """Undo ``stop()``: the next use starts the thread again."""
        self.stop()
        with self._cond:
            self._thread, self._stopping = None, False

    def _run(self) -> None:
        delay = (self.first() if callable(self.first) else self.first) if self.step is not None else None
        while True:
            with self._cond:
                if not (self._jobs or self._woken or self._stopping):
                    self._cond.wait(delay)
                jobs, self._jobs = list(self._jobs), deque()
                self._woken, stopping, last_step = False, self._stopping, self._last_step
            for job in jobs:
                self._guarded(job)
            if self.step is not None and (last_step or not stopping):
                delay = self._guarded(self.step)
            if stopping:
                return

    def _guarded(self, call: Callable[[], float | None]) -> float | None:
        try:
            return call()
        except Exception:  # the thread must outlive any bug
            logger.exception("django_gcra: background worker %s failed", self.name)
            return 1.0


def after_fork(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` in a forked child, after every worker forgot its thread; returns it."""
    _fork_callbacks.append(callback)
    return callback


def _in_child() -> None:
    for worker in list(_workers):
        worker._forget()
    for callback in _fork_callbacks:
        callback()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
