"""Settings for the test suite: an embedded fakeredis (with Lua) unless a test points
CACHES at the real redis-server that the fixtures start; SQLite in memory unless
DATABASE_URL names another database (e.g. ``postgres://user:password@127.0.0.1:5432/gcra``:
pytest-django creates and drops ``test_<name>`` beside it; scripts/postgres.sh starts one)."""

import atexit
import os
import shutil
import tempfile

import fakeredis

SECRET_KEY = "tests"
DEBUG = False
USE_TZ = True
ROOT_URLCONF = "tests.urls"
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",  # the live server serves the admin's CSS to the browser tests
    "rest_framework",
    "django_gcra",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
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
# SQLite in a file of this process's own, not in memory: the shared-cache in-memory database
# that Django's tests use by default has table locks, which fail a background thread's write
# at once ("database table is locked") while another connection reads; a file database's
# locks wait up to "timeout" seconds instead, as a real deployment's would.
_DB_DIR = tempfile.mkdtemp(prefix="gcra-tests-db-")
atexit.register(shutil.rmtree, _DB_DIR, ignore_errors=True)
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(_DB_DIR, "db.sqlite3"),
                         "TEST": {"NAME": os.path.join(_DB_DIR, "test.sqlite3")}, "OPTIONS": {"timeout": 20}}}
if os.environ.get("DATABASE_URL"):
    import dj_database_url

    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"])}
STATIC_URL = "/static/"  # the live server (browser tests) serves static files under it
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://embedded:6379/0",
        # One FakeServer for every connection: fakeredis creates a server per (host, port) on first
        # use without a lock, so two threads connecting at once could get two servers.
        "OPTIONS": {"CONNECTION_POOL_KWARGS": {"connection_class": fakeredis.FakeRedisConnection,
                                               "server": fakeredis.FakeServer()}},
    }
}
DJANGO_GCRA = {
    "TIMEOUT": 1000,  # ms: generous on a loaded test machine (the fault tests set their own)
    "POLICIES": {
        "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 5}], "on_failure": "closed"},
    },
}
