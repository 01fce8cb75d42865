#!/usr/bin/env python
"""The demo's embedded store: fakeredis (whose Lua runs the real GCRA script) served on a
loopback TCP port, so the demo server and every management command run beside it share
one store. No Redis server needed.

    python testproject/embedded_redis.py [--port 0] [--url-file PATH]

Writes ``redis://127.0.0.1:<port>/0`` to the URL file (default ``$DEMO_STORE_FILE`` or ``testproject/.embedded-redis``)
once it listens, and removes the file when it stops.
"""

import argparse
import os
import signal
import sys
from pathlib import Path

from fakeredis import TcpFakeServer

DEFAULT_URL_FILE = Path(os.environ.get("DEMO_STORE_FILE") or Path(__file__).resolve().parent / ".embedded-redis")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="loopback port; 0 (default) picks a free one")
    parser.add_argument("--url-file", type=Path, default=DEFAULT_URL_FILE)
    args = parser.parse_args()
    server = TcpFakeServer(("127.0.0.1", args.port), server_type="redis")
    server.daemon_threads, server.block_on_close = True, False  # exit with clients still connected
    url = f"redis://127.0.0.1:{server.server_address[1]}/0"
    args.url_file.write_text(url + "\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"Embedded store (fakeredis) at {url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        args.url_file.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
