"""Settings of the gunicorn server in tests/test_slots_load.py: RateLimitMiddleware over
tests/slots_urls.py, with a per-tenant concurrency limit (429 when full) on /slow/ and a
capacity limit (key [], 503 when full) on /cap/. ``SLOTS_REDIS_URL`` comes from the
harness; the limits' max come from ``SLOTS_MAX`` and ``SLOTS_CAP``."""

import os

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.slots_urls"
MIDDLEWARE = ["django_gcra.middleware.RateLimitMiddleware"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": "file:django_gcra_slots?mode=memory&cache=shared"}}
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": os.environ["SLOTS_REDIS_URL"]}}
DJANGO_GCRA = {
    "AUDIT": {"ENABLED": False},
    "TIMEOUT": 2000,
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "running": {"concurrency": [{"name": "running", "key": ["tenant"], "max": int(os.environ["SLOTS_MAX"]),
                                     "ttl": 30}]},
        "cap": {"concurrency": [{"name": "capacity", "key": [], "max": int(os.environ["SLOTS_CAP"]), "ttl": 30}]},
    },
    "ROUTES": [{"path": r"^/slow/", "policy": "running"}, {"path": r"^/cap/", "policy": "cap"}],
}
