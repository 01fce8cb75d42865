"""A process whose override table lives in a SQLite file another connection locks.

    python -m tests.support.locked_db REDIS_URL DB_PATH SECONDS

Makes one decision (the first override load), then holds ``BEGIN EXCLUSIVE`` on the
database from a second connection for SECONDS while it bumps the override version stamp
and keeps deciding; prints JSON: the slowest decision, the count, the TIMEOUT in force.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time


def main(redis_url: str, db_path: str, seconds: float) -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_gcra"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": db_path}},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}},
        DJANGO_GCRA={"AUDIT": {"ENABLED": False}, "TIMEOUT": 50, "OVERRIDE_REFRESH": 0.05, "OVERRIDE_TTL": 0.2,
                     "POLICIES": {"p": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1000000/s"}]}}},
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_gcra import decide
    from django_gcra.overrides import version_key
    from django_gcra.store import cache_connection

    decide("p", {"ip": "1.2.3.4"})  # the first load, with the database free
    locked, release = threading.Event(), threading.Event()

    def lock() -> None:
        other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN EXCLUSIVE")
        locked.set()
        release.wait(seconds + 30)
        other.execute("ROLLBACK")
        other.close()

    threading.Thread(target=lock, daemon=True).start()
    locked.wait(10)
    slowest, count, deadline = 0.0, 0, time.monotonic() + seconds
    while time.monotonic() < deadline and count < 1_000_000:
        if count % 50 == 0:
            cache_connection().incr(version_key())  # another process saved an override
        started = time.perf_counter()
        decide("p", {"ip": "1.2.3.4"})
        slowest = max(slowest, time.perf_counter() - started)
        count += 1
    release.set()
    print(json.dumps({"slowest": slowest, "count": count, "timeout": 0.050}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
