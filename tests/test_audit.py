"""The audit trail: outcomes, coalescing, bounds, and failures that never reach a request."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from django_gcra import decide
from django_gcra.audit import AuditRecorder, key_of
from django_gcra.models import AuditEvent

GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "browser": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 2}]},
        "trial": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 2}], "mode": "shadow"},
        "local": {"limits": [{"name": "ip", "key": ["ip"], "rate": "60/m", "burst": 2, "fallback_rate": "1/m"}],
                  "on_failure": "local"},
        "closed": {"limits": [{"name": "ip", "key": ["ip"], "rate": "60/m"}], "on_failure": "closed"},
        "bulk": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/h", "burst": 1}]},
    },
}


@pytest.fixture
def rec(monkeypatch, db):
    """A recorder without its thread: the test decides when to flush."""
    from django_gcra import audit

    audit.recorder.buffer.clear()  # what earlier tests buffered must not land in this test's database
    AuditEvent.objects.all().delete()  # nor what their flusher wrote outside their transactions
    recorder = AuditRecorder(autostart=False)
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    return recorder


@pytest.fixture(autouse=True)
def policies(gcra_settings):
    gcra_settings(**GCRA)


def rows(**filters):
    return list(AuditEvent.objects.filter(**filters).order_by("time"))


@pytest.mark.django_db
@pytest.mark.urls("tests.plane_urls")
def test_shadow_mode_sends_no_429_and_records_a_shadow_denied_row(client, fake_redis, rec, gcra_settings):
    gcra_settings(**{**GCRA, "POLICIES": {**GCRA["POLICIES"], "browser": GCRA["POLICIES"]["trial"]}})
    statuses = [client.get("/limited/?tenant=acme").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 200]
    assert rec.flush() == 1
    (row,) = rows()
    assert (row.outcome, row.policy, row.limit, row.key, row.count) == ("shadow_denied", "browser", "tenant",
                                                                        "tenant=acme", 2)
    assert (row.method, row.path, row.descriptors) == ("GET", "/limited/", {"tenant": "acme"})
    assert 0 < row.retry_after <= 2.0


@pytest.mark.django_db
@pytest.mark.urls("tests.plane_urls")
def test_a_denial_records_a_denied_row_with_its_retry_after(client, fake_redis, rec):
    statuses = [client.get("/limited/?tenant=acme").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    rec.flush()
    (row,) = rows()
    assert (row.outcome, row.count, row.cost) == ("denied", 1, 1)
    assert 0.9 < row.retry_after <= 1.0


@pytest.mark.django_db
def test_fallback_denials_are_audited_local_and_closed_alike(settings, rec):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:9/0"}}
    local = [decide("local", {"ip": "1.2.3.4"}) for _ in range(3)]
    assert [d.allowed for d in local] == [True, False, False] and all(d.fallback for d in local)
    closed = decide("closed", {"ip": "1.2.3.4"})
    assert not closed.allowed and closed.unavailable
    rec.flush()
    found = sorted((row.outcome, row.policy, row.limit, row.key, row.count) for row in rows())
    assert found == [("fallback_denied", "closed", "", "ip=1.2.3.4", 1),  # refused while the store is down
                     ("fallback_denied", "local", "ip", "ip=1.2.3.4", 2)]


@pytest.mark.django_db
def test_allowed_decisions_are_not_audited(fake_redis, rec):
    decide("browser", {"tenant": "a"})
    assert rec.flush() == 0 and not rows()


@pytest.mark.django_db
def test_disabled_audit_buffers_nothing(fake_redis, rec, gcra_settings):
    gcra_settings(**GCRA, AUDIT={"ENABLED": False})
    for _ in range(5):
        decide("bulk", {"ip": "1"})
    assert rec.buffer == {}


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_ten_thousand_denials_for_one_key_leave_few_rows_counting_them_all(real_redis, gcra_settings,
                                                                           monkeypatch):
    from django_gcra import audit

    gcra_settings(**GCRA, AUDIT={"FLUSH_INTERVAL": 0.2})
    audit.recorder.buffer.clear()
    AuditEvent.objects.all().delete()
    recorder = AuditRecorder()  # with its background flusher thread
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    assert decide("bulk", {"ip": "9.9.9.9"}).allowed
    started = time.monotonic()
    denied = sum(not decide("bulk", {"ip": "9.9.9.9"}).allowed for _ in range(10_000))
    elapsed = time.monotonic() - started
    assert denied == 10_000
    deadline = time.monotonic() + 10
    while AuditEvent.objects.count() == 0 or recorder.buffer:  # the thread writes what is left
        assert time.monotonic() < deadline, "the audit thread never flushed"
        time.sleep(0.05)
    recorder.stop()
    events = rows()
    assert sum(e.count for e in events) == 10_000
    assert len(events) <= elapsed / 0.2 + 3  # at most one row per flush interval for the key
    assert {(e.outcome, e.key) for e in events} == {("denied", "ip=9.9.9.9")}
    # Every write succeeds (the test database is a file, tests/settings.py: a write waits for
    # a reader's lock instead of failing with "database table is locked"), none is lost.
    assert recorder.failures == 0 and recorder.dropped == 0


@pytest.mark.django_db
def test_the_buffer_is_bounded_and_drops_are_counted(fake_redis, rec, gcra_settings):
    gcra_settings(**GCRA, AUDIT={"MAX_BUFFER": 3})
    for ip in range(10):
        decide("bulk", {"ip": str(ip)})
        decide("bulk", {"ip": str(ip)})  # denied
    assert len(rec.buffer) == 3 and rec.dropped == 7
    assert rec.flush() == 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.plane_urls")
def test_a_database_failing_during_a_flush_fails_no_request(client, fake_redis, rec, caplog):
    with connection.cursor() as cursor:  # a real failure: the table is gone
        cursor.execute("ALTER TABLE django_gcra_auditevent RENAME TO gcra_moved_away")
    try:
        statuses = [client.get("/limited/?tenant=acme").status_code for _ in range(4)]
        assert rec.flush() == 0  # no exception
        statuses += [client.get("/limited/?tenant=acme").status_code for _ in range(2)]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE gcra_moved_away RENAME TO django_gcra_auditevent")
    assert statuses == [200, 200, 429, 429, 429, 429]
    assert (rec.failures, rec.dropped) == (1, 0)  # the failed write's rows were kept
    assert "audit write failed" in caplog.text
    assert rec.flush() == 1 and rows()[0].count == 4  # recovered: the two kept and the two since, one row


@pytest.mark.django_db
def test_a_failed_write_keeps_its_rows_within_the_buffer_bound(fake_redis, rec, gcra_settings, monkeypatch, caplog):
    """A locked database fails a flush: its rows wait for the next one, merged with the
    records that came since; only what does not fit in MAX_BUFFER is lost, and counted."""
    from django.db.utils import OperationalError

    from django_gcra.models import AuditEvent

    gcra_settings(**GCRA, AUDIT={"MAX_BUFFER": 3})
    for ip in ("1", "2"):
        for _ in range(3):
            decide("bulk", {"ip": ip})  # one allowed, two denied each
    assert len(rec.buffer) == 2
    write = AuditEvent.objects.bulk_create

    def locked(*args, **kwargs):
        if rec.failures == 0:
            decide("bulk", {"ip": "1"})  # denied while the write is under way: merged with its row
        raise OperationalError("database table is locked")

    monkeypatch.setattr(AuditEvent.objects, "bulk_create", locked)
    assert rec.flush() == 0 and (rec.failures, rec.dropped) == (1, 0)
    assert len(rec.buffer) == 2 and rec.buffer[("bulk", "ip", "ip=1", "denied")].count == 3
    decide("bulk", {"ip": "3"}), decide("bulk", {"ip": "3"})  # a third entry: the buffer is full (3)
    assert rec.flush() == 0 and (rec.failures, rec.dropped) == (2, 0)
    assert "3 rows kept for the next flush, 0 records lost" in caplog.text
    decide("bulk", {"ip": "4"}), decide("bulk", {"ip": "4"})  # a fourth: beyond the bound, dropped
    assert rec.dropped == 1
    monkeypatch.setattr(AuditEvent.objects, "bulk_create", write)
    assert rec.flush() == 3
    assert {e.key: e.count for e in rows()} == {"ip=1": 3, "ip=2": 2, "ip=3": 1}


@pytest.mark.django_db
@pytest.mark.urls("tests.plane_urls")
def test_a_broken_recorder_fails_no_request(client, fake_redis, rec, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise MemoryError("no room")

    monkeypatch.setattr(rec, "record", broken)
    assert [client.get("/limited/").status_code for _ in range(3)] == [200, 200, 429]
    assert "could not record an audit event" in caplog.text


def test_keys_are_bounded_and_distinct():
    long_a, long_b = {"tenant": "x" * 10_000 + "a"}, {"tenant": "x" * 10_000 + "b"}
    assert len(key_of(long_a)) <= 255 and key_of(long_a) != key_of(long_b)
    many = {f"d{i}": "v" * 100 for i in range(10)}
    assert len(key_of(many)) == 255 and key_of(many) != key_of({**many, "d9": "w" * 100})
    assert key_of({"user": "7", "tenant": "acme"}) == "tenant=acme,user=7"


def test_keys_escape_values_so_two_identities_never_merge():
    # tenant="x,user=y" + user="z" and tenant="x" + user="y,user=z" once gave one row
    assert key_of({"tenant": "x,user=y", "user": "z"}) != key_of({"tenant": "x", "user": "y,user=z"})


@pytest.mark.parametrize("level", ["policy", "limit", "override"])
@pytest.mark.django_db
def test_shadow_would_denies_are_audited_at_every_level(fake_redis, rec, gcra_settings, level,
                                                        django_capture_on_commit_callbacks):
    from django_gcra.engine import current, retire
    from django_gcra.models import LimitOverride

    trial = {"name": "trial", "key": ["ip"], "rate": "1/m", "burst": 1}
    policy = {"limits": [{"name": "hard", "key": ["ip"], "rate": "60/m", "burst": 5},
                         {**trial, "mode": "shadow"} if level == "limit" else trial]}
    if level == "policy":
        policy["mode"] = "shadow"
    gcra_settings(**{**GCRA, "POLICIES": {"lvl": policy}})
    if level == "override":
        current()  # the engine in force reloads in this thread at the commit (sees the test's transaction)
        with django_capture_on_commit_callbacks(execute=True):
            LimitOverride.objects.create(policy="lvl", limit="trial", match={"ip": "5.5.5.5"}, mode="shadow")
    try:
        decisions = [decide("lvl", {"ip": "5.5.5.5"}) for _ in range(3)]
    finally:
        retire()
    assert all(d.allowed for d in decisions) and decisions[-1].shadow
    rec.flush()
    assert [(r.outcome, r.policy, r.limit, r.key, r.count) for r in rows()] == [
        ("shadow_denied", "lvl", "trial", "ip=5.5.5.5", 2)]


@pytest.mark.django_db
def test_rows_a_failed_write_at_exit_keeps_are_reported_lost(fake_redis, rec, monkeypatch, caplog):
    """At exit there is no next flush: the kept rows are counted and logged as lost."""
    from django.db.utils import OperationalError

    from django_gcra import audit
    from django_gcra.models import AuditEvent

    for _ in range(3):
        decide("bulk", {"ip": "exit"})  # one allowed, two denied

    def locked(*args, **kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(AuditEvent.objects, "bulk_create", locked)
    audit._flush_at_exit()
    assert (rec.failures, rec.dropped) == (1, 2)
    assert "2 audit records lost at exit" in caplog.text
