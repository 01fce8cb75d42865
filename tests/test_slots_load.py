"""Concurrency limits under real concurrency: gunicorn (3 processes x 8 threads) on
loopback serving a slow view behind RateLimitMiddleware, hammered by many client threads;
in-flight requests are counted inside the view across processes. And a process holding
slots, killed with SIGKILL: its slots are free again within the ttl, and not much before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
MAX, CAP = 2, 3


@pytest.fixture(scope="module")
def site(redis_server):
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.slots_settings", "SLOTS_REDIS_URL": redis_server.url,
           "SLOTS_MAX": str(MAX), "SLOTS_CAP": str(CAP), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "3", "--threads", "8",
           "--worker-class", "gthread", "--backlog", "512", "--graceful-timeout", "5", "--log-level", "warning",
           "tests.slots_wsgi:application"]
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "gunicorn did not start"
            try:
                with urllib.request.urlopen(url + "/health/", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def get(url: str, tenant: str) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, headers={"X-Tenant": tenant})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def hammer(url: str, tenants: list[str], deny: int, need: int = 8, threads: int = 32,
           max_requests: int = 2000, max_seconds: float = 20.0) -> list[tuple[int, dict[str, str]]]:
    """Requests from many threads until `need` of both 200 and `deny` came back (or a bound is hit).

    Ending on the answers, not on a count, keeps the test about the limit: on a fast machine
    a fixed count of 429s can all come back inside one slow response, on a slow one late."""
    results: list[tuple[int, dict[str, str]]] = []
    deadline = time.monotonic() + max_seconds
    counter = iter(range(max_requests))

    def enough() -> bool:
        statuses = [status for status, _ in results]
        return statuses.count(200) >= need and statuses.count(deny) >= need

    def worker() -> None:
        for i in counter:  # a shared iterator: every index once across the threads
            if time.monotonic() > deadline or enough():
                return
            results.append(get(url, tenants[i % len(tenants)]))

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(worker) for _ in range(threads)]:
            future.result()
    return results


def live_slots(client, pattern: str) -> int:
    """Slots whose expiry (their score) is still ahead of Redis time."""
    seconds, micros = client.time()
    now = seconds * 1_000_000 + micros
    return sum(client.zcount(key, f"({now}", "+inf") for key in client.scan_iter(pattern))


def wait_until_free(client, pattern: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if live_slots(client, pattern) == 0:
            return True
        time.sleep(0.05)
    return False


def test_never_more_than_max_in_flight_per_tenant_the_rest_429(site, redis_server):
    client = redis_server.client()
    client.flushall()
    results = hammer(site + "/slow/?s=0.2", ["a", "b"], deny=429)
    statuses = [status for status, _ in results]
    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(200) >= 8 and statuses.count(429) >= 8
    for status, headers in results:
        if status == 429:
            assert headers["Retry-After"] == "1"
            assert headers["RateLimit-Policy"] == f'"running";q={MAX};qu="concurrent-requests"'
    for tenant in ("a", "b"):
        assert int(client.get(f"probe:peak:slow:{tenant}")) == MAX  # reached, never passed, across 3 processes
    assert wait_until_free(client, "rl:*running~conc*")  # every slot released after its response


def test_a_capacity_limit_answers_503(site, redis_server):
    client = redis_server.client()
    client.flushall()
    results = hammer(site + "/cap/?s=0.2", ["a", "b", "c", "d"], deny=503)
    statuses = [status for status, _ in results]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) >= 8 and statuses.count(503) >= 8
    assert all(headers["Retry-After"] == "1" for status, headers in results if status == 503)
    assert int(client.get("probe:peak:cap:all")) == CAP
    assert wait_until_free(client, "rl:*capacity~conc*")


def test_sigkill_of_a_holder_frees_its_slots_within_ttl(redis_server):
    client = redis_server.client()
    client.flushall()
    ttl = 3.0
    gcra = {"DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
            "POLICIES": {"p": {"concurrency": [{"name": "running", "key": ["tenant"], "max": 2, "ttl": ttl}]}}}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.support.slot_workers", redis_server.url, json.dumps(gcra), "p",
         json.dumps({"tenant": "k"}), "2"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "held"
        time.sleep(2 * ttl)  # two ttls: the holder's heartbeat kept its slots alive all along
        assert live_slots(client, "rl:*running~conc*") == 2
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        killed = time.monotonic()
        while live_slots(client, "rl:*running~conc*") and time.monotonic() - killed < ttl + 5:
            time.sleep(0.02)
        freed = time.monotonic() - killed
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    # Extended every ttl / 3, so free between 2/3 of a ttl and a ttl after the kill (slack for a busy machine).
    assert ttl * 2 / 3 - 0.3 <= freed <= ttl + 1.5, freed
