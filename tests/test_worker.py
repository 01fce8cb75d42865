"""The one kind of background thread (``django_gcra.worker.Worker``) and the one fork hook."""

from __future__ import annotations

import os
import threading
import time

import pytest

from django_gcra.worker import Worker, after_fork


def wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    return predicate()


def test_started_on_demand_steps_on_its_interval_and_stops_after_a_last_step():
    steps = []
    worker = Worker("t-interval", lambda: steps.append(1) or 0.01)
    time.sleep(0.05)
    assert not steps and not worker.running  # nothing until first used
    worker.start()
    assert wait_for(lambda: len(steps) >= 3)
    worker.stop()
    assert not worker.running
    done = len(steps)
    time.sleep(0.05)
    assert len(steps) == done  # stopped stays stopped
    worker.start()
    assert not worker.running
    worker.restart()
    worker.start()
    assert wait_for(lambda: len(steps) > done)
    worker.stop()


def test_a_step_waiting_for_a_wake_runs_only_when_woken():
    steps = []
    worker = Worker("t-wake", lambda: steps.append(1), first=None)
    worker.start()
    time.sleep(0.05)
    assert steps == []
    worker.wake()
    assert wait_for(lambda: steps == [1])
    time.sleep(0.05)
    assert steps == [1]
    worker.stop()


def test_jobs_run_in_order_on_the_workers_thread():
    seen = []
    worker = Worker("t-jobs")
    for i in range(5):
        worker.submit(lambda i=i: seen.append((i, threading.current_thread().name)))
    assert wait_for(lambda: len(seen) == 5)
    assert [i for i, _ in seen] == list(range(5))
    assert {name for _, name in seen} == {"django_gcra-t-jobs"}
    worker.stop()


def test_a_failing_step_is_logged_and_the_loop_goes_on(caplog):
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return None

    worker = Worker("t-fail", step)
    with caplog.at_level("ERROR", logger="django_gcra"):
        worker.start()
        assert wait_for(lambda: "background worker t-fail failed" in caplog.text)
    worker.wake()
    assert wait_for(lambda: len(calls) >= 2)
    worker.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_has_no_thread_of_its_parent_and_starts_its_own():
    steps = []
    worker = Worker("t-fork", lambda: steps.append(os.getpid()) or 0.01)
    forked = []
    after_fork(lambda: forked.append(os.getpid()))
    worker.start()
    assert wait_for(lambda: steps)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        ok = (not worker.running and forked == [os.getpid()])
        worker.start()
        ok = ok and wait_for(lambda: os.getpid() in steps, 5)
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    worker.stop()
    assert answer == b"1"
    assert forked == []  # the parent ran no fork callback
