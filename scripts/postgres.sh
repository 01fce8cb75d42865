#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests: Debian's PostgreSQL (installed here when run as
# root), a cluster initdb'd in DIR, listening on a free 127.0.0.1 port only (no system service,
# nothing on 5432), trust authentication for its superuser "postgres".
#   scripts/postgres.sh start DIR     prints the DATABASE_URL (postgres://postgres@127.0.0.1:PORT/postgres)
#   scripts/postgres.sh stop DIR      stops it and removes DIR
# As root, the cluster belongs to the "postgres" user (PostgreSQL refuses to run as root).
set -euo pipefail
cmd="${1:-}"; dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,7p' "$0" >&2; exit 2; }

bindir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$found" ] && [ -x "$found/initdb" ] && echo "$found"
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
  start)
    if ! bin=$(bindir); then
      if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "Please install PostgreSQL (Debian: apt-get install postgresql), or set DATABASE_URL" >&2
        exit 1
      fi
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq postgresql >/dev/null
      bin=$(bindir)
    fi
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    # fsync off: a throwaway test server; the socket directory inside DIR, not /var/run.
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" >/dev/null
    echo "postgres://postgres@127.0.0.1:$port/postgres"
    ;;
  stop)
    if [ -d "$dir/data" ] && bin=$(bindir); then
      as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *) echo "unknown command: $cmd (start|stop)" >&2; exit 2 ;;
esac
