"""A database of its own for tests whose separate processes share one (as a deployment's
processes do): a file SQLite database, or, when DATABASE_URL names a PostgreSQL server
(tests/settings.py), a fresh database created on that server and dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def scratch_database(directory: Path) -> Iterator[dict[str, Any]]:
    """A Django DATABASES entry for an empty database, removed on exit."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        yield {"ENGINE": "django.db.backends.sqlite3", "NAME": str(directory / "db.sqlite3"), "OPTIONS": {"timeout": 10}}
        return
    import dj_database_url
    import psycopg
    from psycopg import sql

    config = dj_database_url.parse(url)
    if "postgresql" not in config["ENGINE"]:
        raise RuntimeError(f"DATABASE_URL: the tests that share a database across processes know SQLite and "
                           f"PostgreSQL, not {config['ENGINE']}")
    server = {"host": config["HOST"] or None, "port": config["PORT"] or None, "user": config["USER"] or None,
              "password": config["PASSWORD"] or None, "dbname": config["NAME"], "autocommit": True}
    name = f"gcra_scratch_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(**server) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield {**config, "NAME": name}
    finally:
        with psycopg.connect(**server) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
