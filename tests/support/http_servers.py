"""The client-helper site (tests/client_site) served by gunicorn on a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Site:
    url: str
    process: subprocess.Popen
    log: Any  # gunicorn's stderr: a file, so a chatty server can never block on a full pipe

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # gunicorn's master stops its workers on SIGTERM
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]


def start_site(redis_url: str, *, workers: int = 2, threads: int = 16, storm_rate: str = "50/s",
               storm_burst: int = 10, timeout: float = 30.0) -> Site:
    """Start gunicorn (gthread workers) serving the site on 127.0.0.1; wait until it answers."""
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.client_site.settings", "CLIENT_SITE_REDIS_URL": redis_url,
           "CLIENT_SITE_STORM_RATE": storm_rate, "CLIENT_SITE_STORM_BURST": str(storm_burst),
           "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
           "--threads", str(threads), "--worker-class", "gthread", "--backlog", "512", "--keep-alive", "30",
           "--graceful-timeout", "5", "--log-level", "warning", "tests.client_site.wsgi:application"]
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    site = Site(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = site.log_tail()
            site.stop()
            raise RuntimeError(f"gunicorn exited: {tail}")
        try:
            with urllib.request.urlopen(site.url + "/health/", timeout=1) as response:
                if response.status == 200:
                    return site
        except OSError:
            time.sleep(0.1)
    site.stop()
    raise RuntimeError(f"gunicorn did not answer on port {port} within {timeout} s")
