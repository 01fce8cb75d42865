#!/usr/bin/env bash
# Outside-in: install the built wheel into a fresh venv, wire it into a fresh Django project
# with DESIGN.md's settings, and decide against a real redis-server on a free loopback port.
#   scripts/smoke_wheel.sh path/to/django_gcra-*.whl
set -euo pipefail
wheel=$(readlink -f "$1")
tmp=$(mktemp -d /tmp/gcra-smoke-XXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --daemonize yes \
  --pidfile "$tmp/redis.pid" --dir "$tmp" >/dev/null
trap 'kill "$(cat "$tmp/redis.pid")" 2>/dev/null || true; rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check "$wheel" "djangorestframework>=3.14"
cd "$tmp"
"$tmp/venv/bin/django-admin" startproject mysite .
mkdir myapp && touch myapp/__init__.py
cat > myapp/limits.py <<'PY'
def tenant_of(request):
    return request.headers.get("X-Tenant")
def tier_of(request):
    return request.headers.get("X-Tier")
def api_key_of(request):
    return request.headers.get("X-Api-Key")
PY
cat >> mysite/settings.py <<PY
INSTALLED_APPS += ["rest_framework", "django_gcra"]
MIDDLEWARE.insert(MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
                  "django_gcra.middleware.RateLimitMiddleware")
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:$port/0"}}
DJANGO_GCRA = {
    "CACHE_ALIAS": "default",
    "KEY_PREFIX": "rl",
    "DESCRIPTORS": {"tenant": "myapp.limits.tenant_of", "tier": "myapp.limits.tier_of",
                    "api_key": "myapp.limits.api_key_of"},
    "POLICIES": {
        "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "1000/s", "burst": 200},
                           {"name": "user", "key": ["tenant", "user"], "rate": "50/s", "burst": 20}],
                "on_failure": "open"},
        "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 5}], "on_failure": "closed"},
        "search": {"limits": [{"name": "key", "key": ["api_key"], "rate": "500/s", "burst": 100,
                               "fallback_rate": "25/s"}], "on_failure": "local", "lease": {"size": 10, "ttl": 1.0}},
        "export": {"limits": [{"name": "tenant", "key": ["tenant"], "burst": 10,
                               "rate": {"free": "60/m", "paid": "6000/m"}}], "mode": "shadow"},
    },
    "ROUTES": [{"path": r"^/api/", "policy": "api"}],
    "TRUSTED_PROXIES": 0,
}
PY
py="$tmp/venv/bin/python"
"$py" manage.py check --fail-level WARNING
"$py" manage.py migrate -v 0
"$py" manage.py shell -c '
from django_gcra import decide
from django_gcra.algorithm import gcra
results = [decide("login", {"ip": "203.0.113.9"}) for _ in range(6)]
assert [d.allowed for d in results] == [True] * 5 + [False], results
assert 0 < results[-1].retry_after <= 12 and results[-1].headers()["Retry-After"] == "12", results[-1]
composite = decide("api", {"tenant": "acme", "user": "7"})
assert composite.allowed and composite.limit == "user" and composite.remaining == 19, composite
assert gcra(None, 0, 200_000, 3).remaining == 2
print("smoke ok:", results[-1].headers())
'
