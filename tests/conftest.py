from __future__ import annotations

import pytest

from tests.support.servers import STORE, RedisServer, server_binary, start_redis
from tests.support.workers import TEST_TIMEOUT_MS


def pytest_report_header(config):
    """Which server the real-server tests start (GCRA_STORE=redis|valkey) and which database."""
    from django.conf import settings

    try:
        binary = server_binary()
    except RuntimeError as exc:
        binary = str(exc)
    return [f"store: GCRA_STORE={STORE} ({binary})", f"database: {settings.DATABASES['default']['ENGINE']}"]


@pytest.fixture(scope="session")
def redis_server():
    """The session's real server on a free loopback port: redis-server, or valkey-server
    with GCRA_STORE=valkey (tests/support/servers.py)."""
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def clocked(redis_server):
    """(client, the script driven by a fake clock): tests/support/twin.py."""
    from tests.support.twin import clocked_script

    client = redis_server.client()
    script = client.register_script(clocked_script())
    yield client, script
    client.close()


@pytest.fixture
def real_redis(redis_server: RedisServer, settings):
    """Point the default cache (and so the limiter) at the real redis-server, emptied."""
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_server.url}}
    client = redis_server.client()
    client.flushall()
    client.script_flush()
    yield client
    client.close()


@pytest.fixture
def fake_redis(settings):
    """The embedded fakeredis of tests/settings.py, emptied."""
    from django_redis import get_redis_connection

    client = get_redis_connection("default")
    client.flushall()
    return client


@pytest.fixture
def gcra_settings(settings):
    """Replace DJANGO_GCRA: ``gcra_settings(POLICIES={...})``."""

    def apply(**values):
        # A generous limiter timeout, so a loaded test machine never turns a decision into a
        # fallback by accident; the fault tests set their own tight TIMEOUT.
        settings.DJANGO_GCRA = {"TIMEOUT": TEST_TIMEOUT_MS, **values}
        return values

    return apply


@pytest.fixture(scope="session", autouse=True)
def _drop_unwritten_audit_records():
    """Tests that are not about the audit trail leave denials in the process's recorder:
    no flusher thread writes them (it would, during a test without database access, and
    log the refusal), and at exit they are dropped (the test database is gone by then).
    The tests of the flusher make a recorder of their own."""
    from django_gcra import audit

    audit.recorder.autostart = False
    yield
    with audit.recorder.lock:
        audit.recorder.buffer.clear()


@pytest.fixture(scope="session", autouse=True)
def _no_tally_flusher():
    """The console's decision counts stay in memory unless a test flushes them: a flusher
    thread writing ``rl:{tally}:*`` hashes would surprise the tests that list Redis keys."""
    from django_gcra.tally import tally

    tally.autostart = False
    yield


@pytest.fixture
def save(django_capture_on_commit_callbacks):
    """Create a LimitOverride and run its on_commit invalidation, as a real commit would."""
    from django_gcra.models import LimitOverride
    from django_gcra.overrides import cache

    def create(**fields):
        # A background reload reading the table would hold SQLite's shared-cache table lock
        # (the test database is in memory): let it finish before writing.
        cache.join(5)
        with django_capture_on_commit_callbacks(execute=True):
            return LimitOverride.objects.create(**fields)

    return create
