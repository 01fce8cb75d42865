#!/usr/bin/env bash
# The tests that touch the database (models, migrations, the admin, the overrides' reload,
# the audit flusher, the commands) on PostgreSQL: on DATABASE_URL's server when it is set
# (pytest-django creates and drops test_<name> there; the role needs CREATEDB), else on a
# throwaway Debian PostgreSQL started on a free loopback port (scripts/postgres.sh; installed
# here when run as root). Arguments go to pytest; without test paths, the modules below run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-system-deps.sh
scripts/bootstrap.sh
modules=(tests/test_migrations.py tests/test_overrides.py tests/test_audit.py tests/test_admin.py
         tests/test_console.py tests/test_commands.py tests/test_plane_code_limits.py tests/test_tls_acl.py
         tests/test_compat_ratelimit.py tests/test_throttling.py tests/test_decorator.py tests/test_admin_browser.py
         tests/test_override_rules.py tests/test_access.py tests/test_access_plane.py tests/test_toolkit.py
         tests/test_metered_console.py)
for arg in "$@"; do
  case "$arg" in tests/*|*.py|*::*) modules=() ;; esac
done
if [ -z "${DATABASE_URL:-}" ]; then
  pg_dir=$(mktemp -d /tmp/gcra-pg-XXXX)
  trap 'scripts/postgres.sh stop "$pg_dir"' EXIT
  DATABASE_URL=$(scripts/postgres.sh start "$pg_dir")
  export DATABASE_URL
fi
.venv/bin/python -m pytest "$@" "${modules[@]}"
