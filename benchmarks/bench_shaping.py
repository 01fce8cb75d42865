"""Pacing against sleep-and-retry on refusal, for the same workload, in one run.

    .venv/bin/python benchmarks/bench_shaping.py [--workers 16] [--jobs 10] [--rate 20/s] [--burst 5]

Starts a redis-server on loopback. ``--workers`` threads each have ``--jobs`` units of
work to push through one limit (a partner API's rate, say), started together. Each
strategy gets a fresh key:

- pace: ``django_gcra.pace(..., max_wait=--deadline)``: one script call per job, which
  reserves the job's own slot; the thread sleeps until then;
- retry: the usual loop on 429: ``decide()``; when refused, sleep the exact
  ``retry_after`` and try again (waiters told the same moment wake together);
- retry+jitter: the same, sleeping ``retry_after`` plus a uniform jitter of up to one
  more ``retry_after`` (spreads the wake-ups, at the cost of idle slots).

Printed side by side: the time until the last job started (drain), the decisions sent
(round trips to Redis), the wasted ones (refusals, each a round trip that admitted
nothing), the admitted rate after the burst, and the jobs' median and p99 time to start
(fairness). Bounded: at most --max-tries decisions per job, and every phase stops
after --deadline seconds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.servers import start_redis  # noqa: E402
from tests.support.workers import setup_django  # noqa: E402

POLICY = "partner"


@dataclass
class Result:
    name: str
    jobs: int
    started: int  # jobs admitted
    sent: int  # decisions (script calls)
    drain: float  # seconds from the start until the last job started
    median: float  # seconds a job waited to start (median)
    p99: float
    rate: float  # jobs started per second after the burst

    @property
    def wasted(self) -> int:
        return self.sent - self.started


def policies(rate: str, burst: int) -> dict:
    return {POLICY: {"limits": [{"name": "p", "key": ["tenant"], "rate": rate, "burst": burst}]}}


def _pace(descriptors: dict, deadline: float, max_tries: int) -> tuple[bool, int]:
    from django_gcra import SlotRefused, pace

    try:
        pace(POLICY, descriptors, max_wait=max(0.0, deadline - time.monotonic()))
    except SlotRefused:
        return False, 1
    return True, 1


def _retry(jitter: bool):
    from django_gcra import decide

    def attempt(descriptors: dict, deadline: float, max_tries: int) -> tuple[bool, int]:
        for tries in range(1, max_tries + 1):
            decision = decide(POLICY, descriptors)
            if decision.allowed:
                return True, tries
            wait = decision.retry_after * (1 + random.random() if jitter else 1)
            if time.monotonic() + wait > deadline:
                return False, tries
            time.sleep(wait)
        return False, max_tries

    return attempt


def run(name: str, strategy, workers: int, jobs: int, burst: int, deadline: float, max_tries: int) -> Result:
    descriptors = {"tenant": f"{name}-{uuid.uuid4().hex[:8]}"}  # a fresh key per strategy
    lock = threading.Lock()
    starts: list[float] = []
    latencies: list[float] = []
    sent = [0]
    go = threading.Event()
    t0 = [0.0]

    def work() -> None:
        go.wait()
        end = t0[0] + deadline
        for _ in range(jobs):
            asked = time.monotonic()
            if asked > end:
                return
            ok, tries = strategy(descriptors, end, max_tries)
            now = time.monotonic()
            with lock:
                sent[0] += tries
                if ok:
                    starts.append(now)
                    latencies.append(now - asked)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    t0[0] = time.monotonic()
    go.set()
    for thread in threads:
        thread.join(deadline + 30)
    starts.sort()
    drain = (starts[-1] - t0[0]) if starts else float("inf")
    after = starts[burst:]
    rate = (len(after) - 1) / (after[-1] - after[0]) if len(after) > 1 and after[-1] > after[0] else 0.0
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [0.0] * 99
    return Result(name, workers * jobs, len(starts), sent[0], drain,
                  statistics.median(latencies) if latencies else 0.0, q[98], rate)


def compare(workers: int, jobs: int, rate: str, burst: int, deadline: float = 120.0,
            max_tries: int = 1000) -> list[Result]:
    """Every strategy once, in this process (Django set up already), one after another."""
    from django_gcra import decide

    decide(POLICY, {"tenant": "warm-up"}, cost=0)  # connect and load the script first
    strategies = [("pace", _pace), ("retry", _retry(False)), ("retry+jitter", _retry(True))]
    return [run(name, strategy, workers, jobs, burst, deadline, max_tries) for name, strategy in strategies]


def table(results: list[Result]) -> str:
    head = (f"{'strategy':<14}{'jobs':>6}{'started':>9}{'sent':>7}{'wasted':>8}{'drain s':>9}"
            f"{'rate/s':>8}{'p50 s':>8}{'p99 s':>8}")
    rows = [head] + [
        f"{r.name:<14}{r.jobs:>6}{r.started:>9}{r.sent:>7}{r.wasted:>8}{r.drain:>9.2f}{r.rate:>8.1f}"
        f"{r.median:>8.2f}{r.p99:>8.2f}" for r in results]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=10, help="jobs per worker")
    parser.add_argument("--rate", default="20/s")
    parser.add_argument("--burst", type=int, default=5)
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds per strategy, at most")
    parser.add_argument("--max-tries", type=int, default=1000, help="decisions per job, at most")
    args = parser.parse_args()
    server = start_redis()
    try:
        setup_django(server.url, {"DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
                                  "POLICIES": policies(args.rate, args.burst)})
        results = compare(args.workers, args.jobs, args.rate, args.burst, args.deadline, args.max_tries)
    finally:
        server.stop()
    print(f"{args.workers} workers x {args.jobs} jobs through {args.rate} (burst {args.burst}), one run:")
    print(table(results))
    pace, retry = results[0], results[1]
    if pace.drain and retry.sent:
        print(f"retry sent {retry.sent / pace.sent:.2f}x the decisions of pace "
              f"({retry.wasted} wasted vs {pace.wasted}); drain {retry.drain / pace.drain:.2f}x pace's")


if __name__ == "__main__":
    main()
