"""gcra_inspect, gcra_status and gcra_prune_audit."""

from __future__ import annotations

import datetime
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_gcra import decide
from django_gcra.engine import current, retire
from django_gcra.models import AuditEvent, LimitOverride

GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 5},
                           {"name": "user", "key": ["tenant", "user"], "rate": "6/m", "burst": 2}]},
        "rolling": {"limits": [{"name": "log", "key": ["tenant"], "rate": "2/h", "algorithm": "sliding_log"},
                               {"name": "win", "key": ["tenant"], "rate": "3/h", "algorithm": "sliding_window"}]},
    },
}


@pytest.fixture(autouse=True)
def policies(gcra_settings):
    gcra_settings(**GCRA)
    yield
    retire()


def run(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def inspect(*descriptors):
    return json.loads(run("gcra_inspect", "api", *descriptors, "--json"))


@pytest.mark.redis
@pytest.mark.django_db
def test_inspect_peeks_without_consuming(real_redis):
    assert inspect("tenant=acme", "user=7")["limits"][0]["tat"] is None  # nothing stored yet
    for _ in range(2):
        decide("api", {"tenant": "acme", "user": "7"})
    first = inspect("tenant=acme", "user=7")
    second = inspect("tenant=acme", "user=7")
    tenant, user = first["limits"]
    assert (tenant["remaining"], user["remaining"]) == (3, 0)
    assert tenant["tat"] == second["limits"][0]["tat"] and user["tat"] == second["limits"][1]["tat"]  # unchanged
    assert [int(v) for v in real_redis.mget([tenant["key"], user["key"]])] == [tenant["tat"], user["tat"]]
    assert 9.0 < user["retry_after_s"] <= 10.0 and tenant["retry_after_s"] == 0
    denied = decide("api", {"tenant": "acme", "user": "7"})
    assert not denied.allowed and abs(denied.retry_after - user["retry_after_s"]) < 0.5


@pytest.mark.redis
@pytest.mark.django_db
def test_inspect_reads_sliding_limits_without_consuming(real_redis):
    for _ in range(2):
        decide("rolling", {"tenant": "acme"})
    result = json.loads(run("gcra_inspect", "rolling", "tenant=acme", "--json"))
    log, win = result["limits"]
    assert (log["algorithm"], len(log["state"]), log["remaining"]) == ("sliding_log", 2, 0)
    assert 3590 < log["retry_after_s"] <= 3600 and log["tat"] is None
    assert (win["algorithm"], win["state"][1:], win["remaining"], win["retry_after_s"]) == ("sliding_window", [2, 0], 1, 0)
    assert real_redis.zcard(log["key"]) == 2  # nothing consumed
    text = run("gcra_inspect", "rolling", "tenant=acme")
    assert "2 entries" in text and "sliding_window 3/3600s (N 3)" in text


@pytest.mark.redis
@pytest.mark.django_db
def test_inspect_shows_overrides_and_skipped_descriptors(real_redis, django_capture_on_commit_callbacks):
    current()  # the engine in force reloads in this thread at the commit (sees the test's transaction)
    with django_capture_on_commit_callbacks(execute=True):
        LimitOverride.objects.create(policy="api", limit="tenant", match={"tenant": "acme"}, burst=50)
    result = inspect("tenant=acme")
    assert result["skipped"] == ["user"]
    assert [(row["limit"], row["burst"]) for row in result["limits"]] == [("tenant", 50)]
    text = run("gcra_inspect", "api", "tenant=acme", "--cost", "100")
    assert "retry-after never (cost > burst)" in text and "absent (rested)" in text


def test_inspect_rejects_bad_input():
    with pytest.raises(CommandError, match="unknown rate-limit policy 'nope'"):
        run("gcra_inspect", "nope")
    with pytest.raises(CommandError, match="is not name=value"):
        run("gcra_inspect", "api", "tenant")


@pytest.mark.redis
@pytest.mark.django_db
def test_status_reports_policies_overrides_redis_and_the_script(real_redis):
    LimitOverride.objects.create(policy="api", limit="user", match={"tenant": "acme"}, mode="shadow", reason="trial")
    LimitOverride.objects.create(policy="api", limit="user", match={"tenant": "gone"}, burst=9,
                                 expires_at=timezone.now() - datetime.timedelta(minutes=1))
    text = run("gcra_status")
    assert "api: mode enforce, on_failure open" in text and "- user [enforce] key tenant+user: 6/60s, burst 2" in text
    assert "api.user [tenant=acme]: mode shadow" in text and "tenant=gone" not in text
    assert "reachable: PING in" in text and "not loaded" in text
    decide("api", {"tenant": "acme", "user": "1"})
    assert ": loaded" in run("gcra_status")


@pytest.mark.django_db
def test_status_fails_when_redis_is_unreachable(settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:9/0"}}
    with pytest.raises(CommandError, match="Redis is unreachable"):
        run("gcra_status")


@pytest.mark.django_db
def test_prune_audit_honours_the_retention(gcra_settings):
    gcra_settings(**GCRA, AUDIT={"RETENTION_DAYS": 7})
    AuditEvent.objects.all().delete()  # rows other tests' audit flushers may have left
    now = timezone.now()
    for days in (1, 6, 8, 30):
        at = now - datetime.timedelta(days=days)
        AuditEvent.objects.create(time=at, last_time=at, policy="api", limit="tenant", outcome="denied", key=f"d={days}")
    assert "2 audit rows" in run("gcra_prune_audit", "--dry-run")
    assert AuditEvent.objects.count() == 4
    assert "deleted 2 audit rows" in run("gcra_prune_audit")
    assert sorted(AuditEvent.objects.values_list("key", flat=True)) == ["d=1", "d=6"]
    run("gcra_prune_audit", "--days", "2")
    assert list(AuditEvent.objects.values_list("key", flat=True)) == ["d=1"]


@pytest.mark.django_db
def test_status_lists_the_inline_limits_and_the_drf_scopes(fake_redis, settings):
    settings.ROOT_URLCONF = "tests.surfaces_urls"  # imported by gcra_status: its views register their limits
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "100/h", "uploads": "10/5m"}}
    text = run("gcra_status")
    inline = text.split("Inline @ratelimit limits")[1].split("DRF throttle scopes")[0]
    assert "- view.tests.surfaces_urls.inline_sync.5-per-60s-b2 [enforce] key ip: 5/m, burst 2" in inline
    assert "- tight [enforce] key ip: 1/s, burst 1" in inline and "login" not in inline  # policy= is configured
    assert "django.utils.decorators" not in inline
    drf = text.split("DRF throttle scopes")[1].split("Overrides in force")[0]
    assert "- anon: 100/h" in drf and "- uploads: 10/5m" in drf
