"""Decision latency (p50, p99, max) and the share of fallback decisions while Redis is
healthy, slow, paused, down and recovering: measured in one run, with the circuit breaker
on (the defaults) and off, on a loopback redis-server this script starts.

    .venv/bin/python benchmarks/bench_failures.py [--seconds 2] [--timeout-ms 10]

Phases, in order, each ``--seconds`` long (one thread calling ``decide()`` in a loop,
capped at 20,000 decisions, paced every 0.5 ms so a fast breaker does not just spin):

- healthy: direct to redis-server.
- slow +3ms / slow +30ms: through a TCP proxy (a subprocess) that delays every request
  by that much: under, then over the limiter's TIMEOUT.
- paused: redis-server stopped with SIGSTOP (accepts connections, never answers).
- down: redis-server killed (connections refused).
- recovering: redis-server restarted (empty, no script loaded) right after a failed
  probe (the worst case: a whole cool-down to wait); the phase starts at once.

A control row times a bare socket ``recv`` with the same timeout against the paused
server: whatever tail it shows is the machine's scheduler, not the limiter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.slow_proxy import start_proxy
from tests.support.servers import free_port, start_redis
from tests.support.workers import setup_django

POLICY = {"limits": [{"name": "ip", "key": ["ip"], "rate": "1000000/s", "burst": 1000}], "on_failure": "open"}
PACE = 0.0005  # seconds between decisions


def proxy_main(listen: int, target: int, delay_file: str) -> None:
    """A TCP proxy that delays each client->server chunk by the ms in ``delay_file``."""

    def delay() -> float:
        try:
            with open(delay_file) as f:
                return float(f.read() or 0) / 1000
        except (OSError, ValueError):
            return 0.0

    async def main() -> None:
        server = await start_proxy(listen, target, delay, upstream=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def setup(direct: str, proxied: str, timeout_ms: float, breaker: dict) -> None:
    caches = {name: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
              for name, url in (("default", direct), ("proxied", proxied))}
    setup_django(direct, {"TIMEOUT": timeout_ms, "BREAKER": breaker, "POLICIES": {"p": POLICY}}, caches=caches)


def phase(seconds: float) -> tuple[list[float], int, float | None]:
    """(latencies, fallback decisions, seconds until the first decision Redis answered)."""
    from django_gcra import decide

    latencies, fallbacks, first_redis = [], 0, None
    begin = time.perf_counter()
    deadline = begin + seconds
    while len(latencies) < 20_000 and time.perf_counter() < deadline:
        start = time.perf_counter()
        fallback = decide("p", {"ip": "bench"}).fallback
        latencies.append(time.perf_counter() - start)
        fallbacks += fallback
        if not fallback and first_redis is None:
            first_redis = time.perf_counter() - begin
        time.sleep(PACE)
    return latencies, fallbacks, first_redis


def just_failed_probe(limit: float = 5.0) -> None:
    """Return right after a decision's probe failed (or the circuit opened): restarting
    then is the worst case for recovery, a full cool-down before the next probe. With
    the breaker off, returns after the next failed decision."""
    from django_gcra import decide
    from django_gcra.fallback import status

    def failures() -> int:
        return sum(b["failures"] for b in status()["breakers"])

    before, deadline = failures(), time.monotonic() + limit
    while failures() == before and time.monotonic() < deadline:
        decide("p", {"ip": "bench"})
        time.sleep(PACE)


def raw_socket(port: int, timeout_ms: float, n: int = 200) -> tuple[list[float], int]:
    """The floor set by the OS: a bare socket's recv timing out on the paused server
    (no redis-py, no django_gcra); its tail is the machine's scheduling noise."""
    latencies = []
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_ms / 1000) as sock:
            sock.sendall(b"PING\r\n")
            start = time.perf_counter()
            try:
                sock.recv(16)
            except TimeoutError:
                pass
            latencies.append(time.perf_counter() - start)
    return latencies, 0, None


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run_config(label: str, args, breaker: dict) -> list[tuple[str, str, list[float], int]]:
    """One child process per configuration, so Django settings start clean."""
    out = subprocess.run([sys.executable, __file__, "--child", label, "--seconds", str(args.seconds),
                          "--timeout-ms", str(args.timeout_ms), "--breaker", json.dumps(breaker)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def child(args) -> None:
    from django.test.utils import override_settings

    server = start_redis()
    delay_file = tempfile.mktemp(prefix="gcra-delay-")
    proxy_port = free_port()
    proxy = subprocess.Popen([sys.executable, __file__, "--proxy", str(proxy_port), str(server.port), delay_file])
    time.sleep(0.5)
    setup(server.url, f"redis://127.0.0.1:{proxy_port}/0", args.timeout_ms, json.loads(args.breaker))
    from django.conf import settings

    from django_gcra import decide

    results = []
    try:
        decide("p", {"ip": "warm"}, cost=0)
        results.append((args.child, "healthy", *phase(args.seconds)))
        with override_settings(DJANGO_GCRA={**settings.DJANGO_GCRA, "CACHE_ALIAS": "proxied"}):
            for ms in (3, 30):
                with open(delay_file, "w") as f:
                    f.write(str(ms))
                decide("p", {"ip": "warm"}, cost=0)
                results.append((args.child, f"slow +{ms}ms (proxy)", *phase(args.seconds)))
        server.pause()
        results.append((args.child, "paused (SIGSTOP)", *phase(args.seconds)))
        results.append((args.child, "control: raw socket, paused", *raw_socket(server.port, args.timeout_ms)))
        server.resume()
        server.kill()
        results.append((args.child, "down (killed)", *phase(args.seconds)))
        just_failed_probe()
        server.start()
        results.append((args.child, "recovering (restarted)", *phase(args.seconds)))
    finally:
        proxy.terminate()
        server.stop()
    print(json.dumps(results))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--timeout-ms", type=float, default=10)
    parser.add_argument("--child")
    parser.add_argument("--breaker")
    parser.add_argument("--proxy", nargs=3)
    args = parser.parse_args()
    if args.proxy:
        return proxy_main(int(args.proxy[0]), int(args.proxy[1]), args.proxy[2])
    if args.child:
        return child(args)
    configs = {"breaker on": {"failures": 5, "cooldown": 1.0}, "breaker off": {"failures": 10**9, "cooldown": 1.0}}
    print(f"TIMEOUT={args.timeout_ms} ms (connect and read), on_failure=open, {args.seconds:g} s per phase, "
          f"one thread, a decision every {PACE * 1000:g} ms + its own latency; BREAKER: {configs}")
    print("| breaker | phase | decisions | p50 ms | p99 ms | max ms | fallback | first Redis answer |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, breaker in configs.items():
        for _, name, latencies, fallbacks, first in run_config(label, args, breaker):
            control = name.startswith("control")
            print(f"| {label} | {name} | {len(latencies)} | {pct(latencies, 0.5):.2f} | {pct(latencies, 0.99):.2f} "
                  f"| {max(latencies) * 1000:.2f} | {'n/a' if control else f'{fallbacks / len(latencies):.1%}'} "
                  f"| {'n/a' if control else ('never' if first is None else f'{first * 1000:.0f} ms')} |")


if __name__ == "__main__":
    main()
