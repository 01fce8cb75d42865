"""Settings of the served site. The fixture (tests/support/http_servers.py) passes the redis-server
in CLIENT_SITE_REDIS_URL and the storm limit in CLIENT_SITE_STORM_RATE / _BURST."""

import os

from tests.support.workers import TEST_TIMEOUT_MS

SECRET_KEY = "client-site"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
ROOT_URLCONF = "tests.client_site.urls"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_gcra"]
MIDDLEWARE = ["tests.client_site.views.arrivals"]
# One in-memory database per process, shared by its threads (wsgi.py creates the
# overrides table): decisions take a deployment's path without a database server.
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": "file:client_site?mode=memory&cache=shared"}}
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                      "LOCATION": os.environ.get("CLIENT_SITE_REDIS_URL", "redis://127.0.0.1:6379/0")}}
per_client = ["header:X-Client"]
DJANGO_GCRA = {
    "AUDIT": {"ENABLED": False},
    "TIMEOUT": TEST_TIMEOUT_MS,
    "POLICIES": {
        "tight": {"limits": [{"name": "tight", "key": per_client, "rate": "1/s", "burst": 1}]},
        "minute": {"limits": [{"name": "minute", "key": per_client, "rate": "1/m", "burst": 1}]},
        # Every client of one run shares this limit: the storm's one limited endpoint.
        "storm": {"limits": [{"name": "storm", "key": ["header:X-Run"],
                              "rate": os.environ.get("CLIENT_SITE_STORM_RATE", "50/s"),
                              "burst": int(os.environ.get("CLIENT_SITE_STORM_BURST", "10"))}]},
    },
}
