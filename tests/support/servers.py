"""Real redis-server processes on free loopback ports, for tests and benchmarks."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import redis

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RedisServer:
    port: int
    args: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None
    workdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="gcra-redis-"))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def start(self, timeout: float = 10.0) -> RedisServer:
        if not os.path.exists(REDIS_SERVER):
            raise RuntimeError("redis-server is not installed: run 'apt-get install redis-server' (see .ci/run)")
        os.makedirs(self.workdir, exist_ok=True)  # again after a stop()
        cmd = [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
               "--appendonly", "no", "--dir", self.workdir, *self.args]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.client(socket_timeout=0.5).ping():
                    return self
            except redis.exceptions.RedisError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        if self.process:
            self.process.kill()
            self.process.wait()
            self.process = None

    def pause(self) -> None:
        if self.process:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)


def start_redis(*args: str) -> RedisServer:
    return RedisServer(free_port(), list(args)).start()
