#!/usr/bin/env bash
# The demo: testproject on an embedded fakeredis (set REDIS_URL for a real server).
# Prints a burst of requests (allowed, then limited), then serves http://127.0.0.1:8000/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/python testproject/manage.py migrate --noinput -v 0
.venv/bin/python testproject/manage.py demo
[ "${DEMO_NO_SERVER:-}" = 1 ] && exit 0
echo "Serving the demo at http://127.0.0.1:8000/ (Ctrl-C to stop)"
exec .venv/bin/python testproject/manage.py runserver 127.0.0.1:8000
