"""django-ratelimit 4.1's test settings (its repository's test_settings.py, which the sdist
does not ship), with the caches on Redis: ``default`` on the real redis-server the test
starts, the two ``connection-errors`` caches on loopback ports nobody listens on (theirs
are an unreachable memcached and Redis), and django_gcra installed."""

import os

SECRET_KEY = "ratelimit"

_REDIS = "django_redis.cache.RedisCache"
CACHES = {
    "default": {"BACKEND": _REDIS, "LOCATION": os.environ["DRL_PEER_REDIS_URL"]},
    "connection-errors": {"BACKEND": _REDIS, "LOCATION": os.environ["DRL_PEER_DEAD_URL"]},
    "connection-errors-redis": {"BACKEND": _REDIS, "LOCATION": os.environ["DRL_PEER_DEAD_URL"],
                                "OPTIONS": {"IGNORE_EXCEPTIONS": True}},
    "instant-expiration": {"BACKEND": "django.core.cache.backends.dummy.DummyCache",
                           "LOCATION": "test-instant-expiration"},
}
RATELIMIT_USE_CACHE = "default"

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "django_gcra",
    "django_gcra.compat.django_ratelimit",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
USE_TZ = True
# The limiter's store is the default cache; a generous timeout so a loaded machine never
# turns a decision into a fallback; no audit rows from a suite about counting.
DJANGO_GCRA = {"CACHE_ALIAS": "default", "TIMEOUT": 1000, "AUDIT": {"ENABLED": False}}
