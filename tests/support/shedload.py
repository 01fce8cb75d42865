"""A real gunicorn server (gthread workers) on a free loopback port serving
tests/shedding_urls.py under LoadSheddingMiddleware, and a closed-loop load generator:
for the load-shedding test and benchmark. Every loop is bounded in count and time."""

from __future__ import annotations

import http.client
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ShedServer:
    mode: str  # off | fixed | adaptive
    max_in_flight: int
    threads: int = 64  # gunicorn threads: more than any load here, so no request queues before Django
    base: float = 0.05  # the view sleeps base + per_request * (requests in flight inside it)
    per_request: float = 0.025
    min_rtt_samples: int = 20
    sample_interval: float = 0.1
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    log: Any = None

    def start(self, timeout: float = 20.0) -> ShedServer:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.shed_settings", "SHED_MODE": self.mode,
               "SHED_MAX": str(self.max_in_flight), "SHED_BASE": str(self.base), "SHED_K": str(self.per_request),
               "SHED_MIN_RTT_SAMPLES": str(self.min_rtt_samples),
               "SHED_SAMPLE_INTERVAL": str(self.sample_interval), "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{self.port}", "--workers", "1",
               "--worker-class", "gthread", "--threads", str(self.threads), "--backlog", "512",
               "--timeout", "30", "--graceful-timeout", "2", "--keep-alive", "0", "--log-level", "warning",
               "tests.shed_wsgi:application"]
        # The server's log goes to a file: a pipe nobody reads would block it once full.
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"gunicorn exited: {self.log.read().decode()[-2000:]}")
            try:
                if get(self.port, "/health/")[0] == 200:
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"gunicorn did not start on port {self.port}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.log is not None:
            self.log.close()
            self.log = None

    def json(self, path: str) -> dict:
        status, _, body = get(self.port, path)
        assert status == 200, (path, status)
        return json.loads(body)

    def __enter__(self) -> ShedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def get(port: int, path: str, timeout: float = 10.0) -> tuple[int, str | None, bytes]:
    """One GET on a new connection: (status, Retry-After, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        return response.status, response.getheader("Retry-After"), response.read()
    finally:
        conn.close()


@dataclass(frozen=True)
class Result:
    at: float  # seconds since the phase started, when the response arrived
    status: int
    latency: float  # seconds
    retry_after: str | None
    body: bytes


def load(port: int, clients: int, seconds: float, path: str = "/loaded/", max_requests: int = 5000,
         pause_after_503: float = 0.1) -> list[Result]:
    """``clients`` threads, each sending one request at a time for ``seconds`` (at most
    ``max_requests`` in all); a client pauses ``pause_after_503`` after a 503 before its
    next request (a client retrying soon, not a busy loop)."""
    results: list[Result] = []
    lock = threading.Lock()
    start = time.monotonic()
    deadline = start + seconds
    barrier = threading.Barrier(clients, timeout=10)

    def client() -> None:
        barrier.wait()
        while time.monotonic() < deadline:
            with lock:
                if len(results) >= max_requests:
                    return
            sent = time.monotonic()
            try:
                status, retry_after, body = get(port, path)
            except OSError:
                status, retry_after, body = 0, None, b""
            done = time.monotonic()
            with lock:
                results.append(Result(done - start, status, done - sent, retry_after, body))
            if status == 503:
                time.sleep(pause_after_503)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
    return results


def p99(values: list[float]) -> float:
    return percentile(values, 0.99)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]
