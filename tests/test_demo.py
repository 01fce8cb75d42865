"""The README's demo keeps working: the testproject shows allowed, then limited, shadow
decisions are visible, and commands run beside the demo share the server's store."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANAGE = [sys.executable, "testproject/manage.py"]


def run(args, **env):
    result = subprocess.run([*MANAGE, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_demo_command_shows_allowed_then_limited():
    stdout = run(["demo"])
    statuses = [line.split(":")[1].split()[0] for line in stdout.splitlines() if line.strip().startswith("#")]
    assert "200" in statuses and "429" in statuses
    assert statuses.index("200") < statuses.index("429")


def test_demo_shadow_lines_show_the_shadow_decision():
    stdout = run(["demo"])
    preview = stdout.split("GET /preview/")[1].splitlines()[1:]
    assert "shadow: within the limit (remaining 1)" in preview[0]
    # 12 s at 5/min, less the time since the first request (rounded to 0.1 s: 11.9 on a slow run)
    would = re.search(r"shadow: would have been denied \(retry after (\d+\.\d) s\); served anyway", preview[2])
    assert would is not None and 11.0 <= float(would.group(1)) <= 12.0
    assert all(line.split(":")[1].split()[0] == "200" for line in preview)


@pytest.fixture
def embedded_store(tmp_path):
    """testproject/embedded_redis.py on a free loopback port, as scripts/demo.sh starts it."""
    url_file = tmp_path / "store-url"
    proc = subprocess.Popen([sys.executable, "testproject/embedded_redis.py", "--url-file", str(url_file)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 30
    while not (url_file.exists() and url_file.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "the embedded store did not start"
        time.sleep(0.05)
    yield url_file
    proc.terminate()
    proc.wait(10)
    assert not url_file.exists(), "the store leaves no stale URL behind"


def test_commands_beside_the_demo_share_its_embedded_store(embedded_store):
    env = {"DEMO_STORE_FILE": str(embedded_store)}
    run(["demo", "--requests", "4"], **env)  # /hello/: burst 3, so 3 allowed and 1 denied
    inspected = run(["gcra_inspect", "hello", "ip=192.0.2.10", "--json"], **env)
    assert '"remaining": 0' in inspected, inspected
    browser = run(["gcra_inspect", "hello", "ip=127.0.0.1", "--json"], **env)
    assert '"remaining": 3' in browser, browser  # the trace left the browser's address alone
    # A process without the store file has its own empty store: the contrast the file avoids.
    alone = run(["gcra_inspect", "hello", "ip=192.0.2.10", "--json"], DEMO_STORE_FILE=os.devnull + "-none")
    assert '"remaining": 3' in alone, alone
