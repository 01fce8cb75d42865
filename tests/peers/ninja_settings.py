"""Settings for django-ninja's own throttling tests (tests/peers/test_ninja_suite.py): the
default cache (ninja's throttles' store, and django_gcra's) on the real redis-server the
test starts, django_gcra installed, a generous limiter timeout and no audit trail."""

import os

SECRET_KEY = "ninja"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django_gcra"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": os.environ["NINJA_PEER_REDIS_URL"]}}
DJANGO_GCRA = {"TIMEOUT": 1000, "AUDIT": {"ENABLED": False}}
