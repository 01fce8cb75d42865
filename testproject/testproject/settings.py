"""The demo project. Without REDIS_URL it runs on an embedded fakeredis whose Lua runs
the same GCRA script as a real server; set REDIS_URL=redis://127.0.0.1:6379/0 for a real one."""

import os
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
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("REDIS_URL"):
    CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": os.environ["REDIS_URL"]}}
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

# Surfaces demo (issue 3): the middleware applies ROUTES; DRF's rates feed the GCRA throttles.
MIDDLEWARE += ["django_gcra.middleware.RateLimitMiddleware"]
DJANGO_GCRA["POLICIES"]["routed"] = {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 3}]}
DJANGO_GCRA["ROUTES"] = [{"path": r"^/surfaces/mw/", "policy": "routed"}]
REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "10/5m"}}
