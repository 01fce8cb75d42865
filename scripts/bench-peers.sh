#!/usr/bin/env bash
# The comparative benchmark in one command: the peers and matplotlib into .venv, then
# benchmarks/bench_peers.py against a redis-server it starts on loopback. Options pass
# through (--help lists them). About 1.5 minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-system-deps.sh
scripts/bootstrap.sh
.venv/bin/python -m pip install -q --disable-pip-version-check -r benchmarks/requirements.txt
exec .venv/bin/python -m benchmarks.bench_peers "$@"
