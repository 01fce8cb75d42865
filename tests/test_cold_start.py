"""Cold start of an async process (issue 12, item 2): a fresh uvicorn process whose first
traffic is 64 requests at once, a healthy loopback redis-server and the default
``TIMEOUT`` (10 ms). Opening the limiter's connections must not be taken for Redis being
down: no decision may fall back, and the circuit breaker must stay closed.

The server is a subprocess (``tests/support/cold_app.py``), so nothing in it is warm: no
connection, no loaded script, no Django request ever served. The client is raw asyncio
sockets: all 64 connections are accepted first, then every request is written at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import RedisServer, free_port

pytestmark = [pytest.mark.slow, pytest.mark.redis]

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 64
ROUNDS = 8  # requests per connection: the burst, then 7 more back to back
DEADLINE = 20.0  # seconds for all the traffic


def start_server(redis_url: str, port: int) -> subprocess.Popen:
    env = {**os.environ, "GCRA_REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "tests.support.cold_app:app", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--loop", "asyncio", "--http", "h11", "--lifespan", "off", "--no-access-log",
         "--log-level", "warning", "--backlog", "256"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # listening; no HTTP request, so nothing gets warm
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    stop_server(proc)
    raise RuntimeError("uvicorn did not start listening")


def stop_server(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode(errors="replace")


async def request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, url: str) -> tuple[int, dict, bytes]:
    writer.write(f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), head
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
    if headers.get("transfer-encoding") != "chunked":
        return status, headers, await reader.readexactly(int(headers.get("content-length", "0")))
    body = b""
    for _ in range(100):
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        body += (await reader.readexactly(size + 2))[:size]
        if not size:
            return status, headers, body
    raise AssertionError("too many chunks")


async def burst(port: int) -> tuple[list[int], int, dict]:
    """64 connections, then every first request at once, then ROUNDS - 1 more on each;
    return (statuses, fallback decisions by X-Fallback, the server's /status/)."""
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(CLIENTS)]
    go = asyncio.Event()
    statuses: list[int] = []
    fallbacks = 0

    async def client(reader, writer):
        nonlocal fallbacks
        await go.wait()
        for _ in range(ROUNDS):
            status, headers, _ = await request(reader, writer, "/limited/")
            statuses.append(status)
            fallbacks += headers.get("x-fallback") == "1"

    tasks = [asyncio.ensure_future(client(r, w)) for r, w in conns]
    await asyncio.sleep(0.2)  # every connection accepted by the server before the burst
    go.set()
    await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)
    _, _, body = await request(*conns[0], "/status/")
    for _, writer in conns:
        writer.close()
    return statuses, fallbacks, json.loads(body)


def evalsha_calls(server: RedisServer) -> int:
    client = server.client()
    try:
        return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    finally:
        client.close()


def test_cold_async_process_serves_a_burst_without_fallback(redis_server):
    port = free_port()
    calls_before = evalsha_calls(redis_server)
    proc = start_server(redis_server.url, port)
    try:
        statuses, fallbacks, status = asyncio.run(burst(port))
    finally:
        stderr = stop_server(proc)
    served = len(statuses)
    summary = (f"{served} requests, {fallbacks} fallback decisions; server: {status['fallback']} fallback, "
               f"pools {status['pools']}, breakers {status['breakers']}, last error {status['last_error']!r}\n"
               f"{stderr[-2000:]}")
    assert served == CLIENTS * ROUNDS and set(statuses) == {200}, summary
    # The defaults were in force (10 ms), and the decisions did reach Redis.
    assert status["timeout"] == status["connect_timeout"] == 0.010, summary
    assert evalsha_calls(redis_server) - calls_before >= served - status["fallback"], summary
    assert fallbacks == 0 and status["fallback"] == 0, summary
    assert status["breakers"] and all(b["state"] == "closed" and b["opened"] == 0 for b in status["breakers"]), \
        summary
