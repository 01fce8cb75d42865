"""The measurements of ``bench_peers``: rounds, commands, Redis time, memory, and 8-process over-admission.

Every loop is bounded in count, and the over-admission loop in time as well.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.workers import timed_loop

from ..wire import sent_commands
from .contenders import STRICT, Contender, build, promise, setup_django

Workload = Callable[[int], tuple[str, str]]  # decision index -> (tenant, user)


@dataclass
class Timing:
    rates: list[float] = field(default_factory=list)  # decisions per second, one per round
    latencies: list[int] = field(default_factory=list)  # ns per decision, every round
    cpu: list[float] = field(default_factory=list)  # client CPU us per decision, one per round

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu_us(self) -> float:
        return statistics.median(self.cpu)

    def percentile(self, q: int) -> float:
        """Latency percentile in microseconds."""
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1] / 1000

    def round_percentiles(self, q: int) -> list[float]:
        """The latency percentile of each round, in microseconds (the spread of the figures)."""
        per = len(self.latencies) // max(len(self.rates), 1)
        return [statistics.quantiles(self.latencies[i:i + per], n=100, method="inclusive")[q - 1] / 1000
                for i in range(0, per * len(self.rates), per)]


def one_round(contender: Contender, workload: Workload, ops: int, offset: int, timing: Timing) -> None:
    decide, clock = contender.decide, time.perf_counter_ns
    samples = [0] * ops
    cpu = time.process_time()
    start = clock()
    for i in range(ops):
        before = clock()
        decide(*workload(offset + i))
        samples[i] = clock() - before
    timing.rates.append(ops / ((clock() - start) / 1e9))
    timing.cpu.append((time.process_time() - cpu) / ops * 1e6)
    timing.latencies += samples


def rounds(cases: dict[tuple[str, str], tuple[Contender, Workload]], ops: int, n_rounds: int
           ) -> dict[tuple[str, str], Timing]:
    """Run every case ``ops`` times per round, alternating cases within each round (their
    order rotating from round to round)."""
    for contender, workload in cases.values():
        contender.decide(*workload(0))  # connect, load scripts
    timings = {case: Timing() for case in cases}
    order = list(cases.items())
    for n in range(n_rounds):  # short alternating rounds, so noise hits every contender alike,
        k = n % len(order)  # in an order rotating from round to round (no case always after the same one)
        for case, (contender, workload) in order[k:] + order[:k]:
            one_round(contender, workload, ops, n * ops, timings[case])
    return timings


def interleaved(a: Contender, b: Contender, workload: Workload, ops: int, n_rounds: int, offset: int
                ) -> tuple[list[float], list[float]]:
    """Per round, ``a``'s decisions/s over ``b``'s, and ``b``'s median decision time over
    ``a``'s (which a stall of the machine in one decision does not move), with the two
    alternating decision by decision on the same workload (each call timed on its own,
    which goes first swapped every decision), so a change in the machine's load hits both alike."""
    clock = time.perf_counter_ns
    summed, medians = [], []
    for n in range(n_rounds):
        spent: tuple[list[int], list[int]] = ([], [])  # a's, b's
        for i in range(ops):
            tenant, user = workload(offset + n * ops + i)
            for times, decide in ((spent[0], a.decide), (spent[1], b.decide)) if i % 2 else \
                    ((spent[1], b.decide), (spent[0], a.decide)):
                before = clock()
                decide(tenant, user)
                times.append(clock() - before)
        summed.append(sum(spent[1]) / sum(spent[0]))
        medians.append(statistics.median(spent[1]) / statistics.median(spent[0]))
    return summed, medians


def _commandstats(client) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in client.info("commandstats").items()}


def _command_usec(client) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["usec"] for k, v in client.info("commandstats").items()}


@dataclass(frozen=True)
class Commands:
    round_trips: float  # commands the client sent, per decision
    server: float  # commands Redis ran, per decision, those inside scripts included
    detail: str  # e.g. "evalsha 1.00 | get 1.00, set 1.00, time 1.00"


def commands(client, contender: Contender, workload: Workload, n: int) -> Commands:
    """Commands per decision: what the client sends (``wire.sent_commands``) and what
    Redis runs (``INFO commandstats`` deltas)."""
    contender.decide(*workload(0))
    before = _commandstats(client)
    with sent_commands() as sent:
        for i in range(n):
            contender.decide(*workload(i))
    after = _commandstats(client)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta = {k: v for k, v in delta.items() if v and k != "info"}
    sent_kinds = sorted(set(sent))
    in_scripts = {k: v - sent.count(k) for k, v in delta.items() if v > sent.count(k)}
    detail = (", ".join(f"{k} {sent.count(k) / n:.2f}" for k in sent_kinds) + " | "
              + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(in_scripts.items())))
    return Commands(len(sent) / n, sum(delta.values()) / n, detail)


def server_times(client, cases: dict[str, tuple[Contender, Workload]], n: int, rounds: int) -> dict[str, list[float]]:
    """Redis's own time per decision, us, one figure per round: the ``INFO commandstats``
    usec of the commands each contender sends (a script's usec covers the commands it
    runs, so those are not added again), the contenders alternating within each round,
    so a change in the machine's load hits them alike."""
    for contender, workload in cases.values():
        contender.decide(*workload(0))  # scripts loaded, connections made
    per: dict[str, list[float]] = {key: [] for key in cases}
    for _ in range(rounds):
        for key, (contender, workload) in cases.items():
            before = _command_usec(client)
            with sent_commands() as sent:
                for i in range(n):
                    contender.decide(*workload(i))
            after = _command_usec(client)
            per[key].append(sum(after.get(k, 0) - before.get(k, 0) for k in set(sent) if k != "info") / n)
    return per


@dataclass(frozen=True)
class Memory:
    bytes_per_identity: float
    keys_per_identity: float


def memory(client, contender: Contender, users: int, decisions: int) -> Memory:
    """``MEMORY USAGE`` summed over every key one user's ``decisions`` leave, measured
    right after them on an emptied database, averaged over ``users`` users."""
    total = keys = 0
    for k in range(users):
        client.flushdb()
        for _ in range(decisions):
            contender.decide("mt", f"m{k}")
        names = list(client.scan_iter(count=100))
        keys += len(names)
        total += sum(client.memory_usage(name, samples=0) or 0 for name in names)
    return Memory(total / users, keys / users)


# ---------------------------------------------------------------- over-admission

_built: dict[str, Contender] = {}
_url = ""


def worker_init(url: str, port: int) -> None:
    global _url
    _url = url
    setup_django(url, port)


def hammer(key: str, hot: str, start_at: float, duration: float, max_calls: int = 100_000
           ) -> tuple[int, int, float, float]:
    """In a worker: decide on one hot key from ``start_at`` for ``duration`` seconds."""
    if key not in _built:
        _built[key] = build(key, _url, "strict")
        _built[key].decide("warm", "warm")  # connect and load scripts before the clock starts
    decide = _built[key].decide
    return timed_loop(lambda: decide("ot", hot), start_at, duration, max_calls)


@dataclass(frozen=True)
class Admission:
    admitted: int
    calls: int
    promised: float
    elapsed: float

    @property
    def ratio(self) -> float:
        return self.admitted / self.promised


def over_admission(client, url: str, port: int, algorithms: dict[str, str], processes: int, duration: float
                   ) -> dict[str, Admission]:
    """``processes`` spawned processes decide on one key per contender for ``duration`` s;
    ``algorithms`` maps each contender's key in ``FACTORIES`` to its algorithm family."""
    ctx = multiprocessing.get_context("spawn")
    results = {}
    with ctx.Pool(processes, initializer=worker_init, initargs=(url, port)) as pool:
        lead = 4.0  # the first time, the spawned interpreters still import Django
        for key, algorithm in algorithms.items():
            client.flushdb()
            start_at = time.time() + lead  # time for every worker to build the contender
            lead = 1.0
            runs = pool.starmap(hammer, [(key, f"hot-{key}", start_at, duration)] * processes)
            first, last = min(r[2] for r in runs), max(r[3] for r in runs)
            results[key] = Admission(sum(r[0] for r in runs), sum(r[1] for r in runs),
                                     promise(algorithm, STRICT, first, last), last - first)
    return results
