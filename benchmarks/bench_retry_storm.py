"""A retry storm: many clients against one limited endpoint, naive retry against the helper.

    .venv/bin/python benchmarks/bench_retry_storm.py [--clients 200] [--rate 20/s] [--burst 5]
                                                     [--driver threads|asyncio]

Starts a redis-server and gunicorn (tests/client_site, 2 workers x 16 threads) on
loopback. Each strategy gets a fresh limit (its own X-Run) and the same number of
clients, started together, each wanting ONE admitted GET /storm/:

- naive: resend at once after every 429 (at most --max-tries sends per client);
- helper: the retry helper with ``max_attempts=20, max_wait=--deadline``: Retry-After
  plus full jitter;
- helper+pace: the same with ``pace=True`` and one pacing state shared by all clients.

``--driver threads`` (the default): one thread and one ``requests.Session`` per client
(``RetryingAdapter`` for the helper). ``--driver asyncio``: one task per client on one
event loop, sharing one ``httpx.AsyncClient`` (``AsyncRetryingTransport``).

Printed side by side, from the same run: the requests the SERVER received (counted by
the site in Redis) per admitted request, the rate at which they arrived, the time until
the last client was admitted (drain), the median client's time to admission, and the
clients that gave up. Every phase stops by itself after --deadline seconds.

Naive retry can only storm as fast as this machine serves (client and server share its
cores), so its requests per admitted request grow with a faster server; the helper's
depend on Retry-After and the jitter, not on the server's speed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import httpx  # noqa: E402
import requests  # noqa: E402

from django_gcra.client import AsyncRetryingTransport, Pacer, RetryBudgetExhausted, RetryingAdapter  # noqa: E402


@dataclass
class Result:
    name: str
    clients: int
    received: int      # requests the server saw
    admitted: int      # of which admitted (2xx)
    gave_up: int       # clients never admitted (budget spent, or the deadline)
    drain: float       # seconds from the start until the last admission
    median: float      # seconds the median admitted client waited for its admission

    @property
    def per_admitted(self) -> float:
        return self.received / self.admitted if self.admitted else float("inf")


async def _anaive(client: httpx.AsyncClient, url: str, headers: dict, max_tries: int, deadline: float) -> bool:
    for _ in range(max_tries):
        if time.monotonic() > deadline:
            return False
        response = await client.get(url, headers=headers)
        if response.status_code < 400:
            return True
        _expected(response)
    return False


async def _ahelper(client: httpx.AsyncClient, url: str, headers: dict, max_tries: int, deadline: float) -> bool:
    try:
        response = await asyncio.wait_for(client.get(url, headers=headers), max(0.0, deadline - time.monotonic()))
    except (RetryBudgetExhausted, asyncio.TimeoutError):
        return False
    return _expected(response) < 400


def _naive(session: requests.Session, url: str, headers: dict, max_tries: int, deadline: float) -> bool:
    for _ in range(max_tries):
        if time.monotonic() > deadline:
            return False
        response = session.get(url, headers=headers, timeout=30)
        if response.status_code < 400:
            return True
        _expected(response)
    return False


def _helper(session: requests.Session, url: str, headers: dict, max_tries: int, deadline: float) -> bool:
    try:  # max_wait <= the deadline bounds the helper (see strategies)
        return _expected(session.get(url, headers=headers, timeout=30)) < 400
    except RetryBudgetExhausted:
        return False


def _expected(response) -> int:
    if response.status_code not in (200, 429, 503):
        raise RuntimeError(f"unexpected {response.status_code}: {response.text[:200]}")
    return response.status_code


def _result(name: str, clients: int, redis_client, run: str, admitted_at: list[float]) -> Result:
    received = int(redis_client.get(f"site:{run}:received") or 0)
    admitted = int(redis_client.get(f"site:{run}:admitted") or 0)
    nan = float("nan")
    return Result(name, clients, received, admitted, clients - len(admitted_at), max(admitted_at, default=nan),
                  statistics.median(admitted_at) if admitted_at else nan)


async def astorm(site_url: str, redis_client, name: str, options: dict | None, *, clients: int, deadline: float,
                 max_tries: int) -> Result:
    """``clients`` tasks sharing one AsyncClient; naive when ``options`` is None."""
    run = f"{name}-{uuid.uuid4().hex[:8]}"
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    transport = None if options is None else AsyncRetryingTransport(httpx.AsyncHTTPTransport(limits=limits),
                                                                     **options)
    attempt = _anaive if options is None else _ahelper
    admitted_at: list[float] = []
    async with httpx.AsyncClient(transport=transport, limits=limits, timeout=30) as client:
        started = time.monotonic()

        async def one() -> None:
            if await attempt(client, site_url + "/storm/", {"X-Run": run}, max_tries, started + deadline):
                admitted_at.append(time.monotonic() - started)

        await asyncio.gather(*(one() for _ in range(clients)))
    return _result(name, clients, redis_client, run, admitted_at)


def storm(site_url: str, redis_client, name: str, options: dict | None, *, clients: int, deadline: float,
          max_tries: int) -> Result:
    """``clients`` threads, each with its own Session; naive when ``options`` is None."""
    run = f"{name}-{uuid.uuid4().hex[:8]}"
    if options is not None and options.get("pace"):
        options = {**options, "pacer": Pacer()}  # one pacing state for all the clients of the run
        del options["pace"]
    attempt = _naive if options is None else _helper
    admitted_at: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    started = 0.0

    def one() -> None:
        with requests.Session() as session:
            if options is not None:
                session.mount("http://", RetryingAdapter(**options))
            barrier.wait()
            if attempt(session, site_url + "/storm/", {"X-Run": run}, max_tries, started + deadline):
                with lock:
                    admitted_at.append(time.monotonic() - started)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    started = time.monotonic()
    barrier.wait()
    for t in threads:
        t.join(deadline + 40)  # a client is bounded by the deadline (and its 30 s socket timeout)
    return _result(name, clients, redis_client, run, admitted_at)


def strategies(deadline: float) -> list[tuple[str, dict]]:
    """(name, AsyncRetryingTransport options); naive has no transport of ours."""
    helper = {"max_attempts": 20, "max_wait": deadline}
    return [("naive", {}), ("helper", helper), ("helper+pace", {**helper, "pace": True})]


def compare(site_url: str, redis_client, *, clients: int, deadline: float, max_tries: int, driver: str = "threads",
            names: tuple[str, ...] = ("naive", "helper", "helper+pace"), settle: float = 2.0) -> list[Result]:
    """Every strategy in turn against the same server, each on a fresh limit."""
    results = []
    for name, options in strategies(deadline):
        if name not in names:
            continue
        options = None if name == "naive" else options
        if driver == "asyncio":
            result = asyncio.run(astorm(site_url, redis_client, name, options, clients=clients, deadline=deadline,
                                        max_tries=max_tries))
        else:
            result = storm(site_url, redis_client, name, options, clients=clients, deadline=deadline,
                           max_tries=max_tries)
        results.append(result)
        time.sleep(settle)  # let the server's queues empty before the next strategy
    return results


def table(results: list[Result]) -> str:
    rows = [("strategy", "clients", "received", "admitted", "per admitted", "received/s", "drain s", "median s",
             "gave up")]
    rows += [(r.name, str(r.clients), str(r.received), str(r.admitted), f"{r.per_admitted:.2f}",
              f"{r.received / r.drain:.0f}", f"{r.drain:.2f}", f"{r.median:.2f}", str(r.gave_up)) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]
    base = results[0]
    for r in results[1:]:
        lines.append(f"{r.name}: {base.per_admitted / r.per_admitted:.1f}x fewer requests per admitted request "
                     f"than {base.name}; drain {r.drain / base.drain:.2f}x {base.name}'s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rate", default="20/s", help="the storm endpoint's limit (shared by all clients)")
    parser.add_argument("--burst", type=int, default=5)
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds each strategy may run at most")
    parser.add_argument("--max-tries", type=int, default=1000, help="sends per naive client at most")
    parser.add_argument("--driver", choices=("threads", "asyncio"), default="threads")
    args = parser.parse_args()

    from tests.support.http_servers import start_site
    from tests.support.servers import start_redis

    redis_server = start_redis()
    site = None
    try:
        site = start_site(redis_server.url, storm_rate=args.rate, storm_burst=args.burst)
        client = redis_server.client()
        print(f"{args.clients} clients ({args.driver}), one admitted GET each, against one limit of {args.rate} "
              f"burst {args.burst} (gunicorn 2x16 threads, redis-server, all on loopback; "
              f"Python {sys.version.split()[0]})")
        results = compare(site.url, client, clients=args.clients, deadline=args.deadline, max_tries=args.max_tries,
                          driver=args.driver)
        print(table(results))
    finally:
        if site is not None:
            site.stop()
        redis_server.stop()


if __name__ == "__main__":
    main()
