"""What a concurrency limit costs per request, against a rate limit alone, in one run.

    .venv/bin/python -m benchmarks.bench_concurrency [--ops 3000] [--rounds 5]

One real redis-server on loopback, one client thread making decisions as a request
would: ``decide()``, then (for the policies with a concurrency limit) ``release()`` when
the "response" is done. Contenders, alternated in rounds (medians quoted):

- ``rate``: one GCRA limit (the baseline);
- ``rate_conc``: the same rate and a concurrency limit on the same key, in one script call;
- ``conc``: the concurrency limit alone.

For each: decisions/s (decide + release, on the request thread), round trips on the
request path (writes to the socket by the request thread) and off it (by the slot
keeper's background thread: pipelined ZREMs and heartbeat extensions), commands sent,
and Redis server time per decision (INFO commandstats usec of the commands the client
sends: EVALSHA, whose usec includes the commands the script runs, plus ZREM and EVAL).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import threading
import time
from collections.abc import Iterator

from tests.support.servers import start_redis
from tests.support.workers import setup_django

from .wire import watching_writes

RATE = {"name": "user", "key": ["user"], "rate": "100000/s", "burst": 1000}
CONC = {"name": "running", "key": ["user"], "max": 1000, "ttl": 30}
POLICIES = {
    "rate": {"limits": [RATE]},
    "rate_conc": {"limits": [RATE], "concurrency": [CONC]},
    "conc": {"concurrency": [CONC]},
}
CLIENT_SENT = ("evalsha", "eval", "zrem", "script|load")


@contextlib.contextmanager
def writes() -> Iterator[dict[str, collections.Counter[str]]]:
    """Per thread kind ('request' or 'keeper'): the socket writes ('writes') and the commands in
    them, redis-py's and the direct runner's (``wire.watching_writes``)."""
    seen: dict[str, collections.Counter[str]] = {"request": collections.Counter(), "keeper": collections.Counter()}

    def record(names: list[str]) -> None:
        kind = "keeper" if threading.current_thread().name.startswith("django_gcra-slots") else "request"
        seen[kind]["writes"] += 1
        seen[kind].update(names)

    with watching_writes(record):
        yield seen


def usec(client) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["usec"] for k, v in client.info("commandstats").items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=3000, help="decisions per round and contender")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    server = start_redis()
    try:
        setup_django(server.url, {"POLICIES": POLICIES})
        from django_gcra import decide
        from django_gcra.engine import current

        client = server.client()
        keeper = current().stores.backend().keeper

        def request(policy: str, i: int) -> None:
            decision = decide(policy, {"user": f"u{i % 100}"})
            assert decision.allowed
            decision.release()

        for policy in POLICIES:
            request(policy, 0)  # connect, load the script, start the keeper
        keeper.flush()
        rates: dict[str, list[float]] = {p: [] for p in POLICIES}
        cost: dict[str, dict[str, float]] = {p: collections.defaultdict(float) for p in POLICIES}
        for _ in range(args.rounds):  # alternate, so noise hits every contender alike
            for policy in POLICIES:
                before = usec(client)
                with writes() as seen:
                    start = time.perf_counter()
                    for i in range(args.ops):
                        request(policy, i)
                    elapsed = time.perf_counter() - start
                    deadline = time.monotonic() + 10
                    while keeper._queue and time.monotonic() < deadline:  # the releases of this round reach Redis
                        time.sleep(0.001)
                    keeper.flush()
                after = usec(client)
                rates[policy].append(args.ops / elapsed)
                c = cost[policy]
                c["server_us"] += sum(after.get(k, 0) - before.get(k, 0) for k in CLIENT_SENT)
                c["request_writes"] += seen["request"]["writes"]
                c["keeper_writes"] += seen["keeper"]["writes"]
                for kind in ("request", "keeper"):
                    for name, n in seen[kind].items():
                        if name != "writes":
                            c[f"{kind}:{name}"] += n

        n = args.rounds * args.ops
        print(f"redis-server {client.info('server')['redis_version']} on 127.0.0.1, one request thread, "
              f"{args.rounds} rounds x {args.ops} decisions (decide + release), medians of decisions/s")
        print(f"{'policy':<11}{'decisions/s':>12}{'vs rate':>9}{'RTT/req':>9}{'RTT off-path':>13}"
              f"{'Redis us/req':>13}  commands per request (request thread | keeper thread)")
        for policy in POLICIES:
            c = cost[policy]
            median = statistics.median(rates[policy])
            ratio = statistics.median(r / b for r, b in zip(rates[policy], rates["rate"]))  # round by round
            sent = ", ".join(f"{k.split(':', 1)[1]} {v / n:.2f}" for k, v in sorted(c.items())
                             if k.startswith("request:") and v / n >= 0.005)  # (not the tally's rare writes)
            off = ", ".join(f"{k.split(':', 1)[1]} {v / n:.3f}" for k, v in sorted(c.items())
                            if k.startswith("keeper:")) or "-"
            print(f"{policy:<11}{median:>12,.0f}{ratio:>8.2f}x{c['request_writes'] / n:>9.3f}"
                  f"{c['keeper_writes'] / n:>13.3f}{c['server_us'] / n:>13.2f}  {sent} | {off}")
        print(f"keeper: released {keeper_stat('released')}, failures {keeper_stat('release_failures')}")
    finally:
        server.stop()


def keeper_stat(name: str) -> int:
    from django_gcra.fallback import status

    counts = status()["slots"]  # this process's concurrency slots' counters
    return counts[name]


if __name__ == "__main__":
    main()
