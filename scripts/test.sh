#!/usr/bin/env bash
# The whole test suite. Needs Debian's redis-server (installed here when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-system-deps.sh
scripts/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
