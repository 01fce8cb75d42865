"""A calendar quota's use in its current period, in ``gcra_inspect`` and on the console."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from django_gcra import audit, decide, tally
from django_gcra.engine import retire
from django_gcra.models import AuditEvent
from django_gcra.signals import observers

GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "plan": {"limits": [{"name": "rate", "key": ["tenant"], "rate": "100/m", "burst": 10},
                            {"name": "month", "key": ["tenant"], "algorithm": "quota", "quota": 3,
                             "period": "month", "tz": "Europe/Paris"}]},
    },
    "AUDIT": {"FLUSH_INTERVAL": 60},
}


@pytest.fixture(autouse=True)
def policies(gcra_settings):
    gcra_settings(**GCRA)
    yield
    retire()


@pytest.mark.redis
@pytest.mark.django_db
def test_inspect_shows_the_use_of_the_current_period(real_redis):
    decide("plan", {"tenant": "acme"}, cost=2)
    out = io.StringIO()
    call_command("gcra_inspect", "plan", "tenant=acme", "--json", stdout=out)
    _, month = json.loads(out.getvalue())["limits"]
    quota = month["quota"]
    assert (quota["used"], quota["quota"], quota["period"], quota["tz"]) == (2, 3, "month", "Europe/Paris")
    assert quota["period_start"].endswith(("+01:00", "+02:00")) and "-01T00:00:00" in quota["period_start"]
    assert month["remaining"] == 1 and month["retry_after_s"] == 0
    text = io.StringIO()
    call_command("gcra_inspect", "plan", "tenant=acme", "--cost", "2", stdout=text)
    assert "quota 3 per month (Europe/Paris)" in text.getvalue() and "used        2 of 3" in text.getvalue()
    assert decide("plan", {"tenant": "acme"}, cost=0).limits[1].remaining == 1  # nothing consumed
    status = io.StringIO()
    call_command("gcra_status", stdout=status)
    assert "month [enforce] key tenant: 3, quota per calendar month (Europe/Paris)" in status.getvalue()


@pytest.mark.django_db
@pytest.mark.urls("tests.plane_urls")
def test_the_console_shows_a_quota_used_this_period(admin_client, fake_redis, monkeypatch):
    counts = tally.Tally(autostart=False)
    monkeypatch.setattr("django_gcra.tally.tally", counts)
    index = observers.index(tally.on_decision)
    observers[index] = counts.observe
    recorder = audit.AuditRecorder(autostart=False)
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    try:
        AuditEvent.objects.all().delete()
        assert [decide("plan", {"tenant": "acme"}).allowed for _ in range(4)] == [True] * 3 + [False]
        counts.flush()
        recorder.flush()
        page = admin_client.get("/admin/django_gcra/dashboard/")
        assert page.status_code == 200
        quota = {(t["policy"], t["key"]): t["quota"] for t in page.context["top"]}
        assert quota[("plan", "tenant=acme")].startswith("3 of 3 used this month, new period in ")
    finally:
        observers[observers.index(counts.observe)] = tally.on_decision


ADD = "/admin/django_gcra/limitoverride/add/"
FORM = {"policy": "plan", "limit": "month", "match": "tenant=acme", "rate": "", "burst": "", "quota": "",
        "mode": "enforce", "enabled": "on", "expires_at_0": "", "expires_at_1": "", "reason": ""}


@pytest.mark.django_db
@pytest.mark.urls("tests.plane_urls")
@pytest.mark.parametrize("change, field", [
    ({"quota": "5", "limit": "rate"}, "quota"),  # a rate limit takes no quota
    ({"quota": "5", "rate": "5/s"}, "rate"),  # a quota takes no rate
    ({"quota": "5", "burst": "5"}, "burst"),  # nor a burst
    ({"quota": "0"}, "quota"),
])
def test_the_override_form_checks_quotas(admin_client, fake_redis, settings, change, field):
    from django_gcra.models import LimitOverride

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    response = admin_client.post(ADD, {**FORM, **change})
    assert response.status_code == 200 and field in response.context["adminform"].form.errors
    assert not LimitOverride.objects.exists()
    assert admin_client.post(ADD, {**FORM, "quota": "5000"}).status_code == 302
    assert LimitOverride.objects.get().quota == 5000


def test_the_memory_backend_decides_and_settles_quotas():
    """The in-process store (the local fallback) runs the twins: a quota beside a rate, and
    a settle of both."""
    from django_gcra.algorithm import GCRA as GCRA_ALG
    from django_gcra.algorithm import QUOTA
    from django_gcra.backends import LimitSpec
    from django_gcra.backends.memory import MemoryBackend
    from django_gcra.periods import Calendar

    clock = [1_780_000_000_000_000]
    backend = MemoryBackend(clock=lambda: clock[0])
    calendar = Calendar("day", "UTC")
    specs = [LimitSpec("r", 1_000_000, 10, True, GCRA_ALG), LimitSpec("q", 0, 5, True, QUOTA, 86_400_000_000,
                                                                      calendar)]
    assert backend.evaluate(specs, 4).allowed
    backend.settle(specs, -3, clock[0])  # 1 used of 4 reserved
    assert backend.evaluate(specs, 0).remaining == (9, 4)
    assert backend.evaluate(specs, 4).allowed and not backend.evaluate(specs, 1).allowed  # the quota binds
    denied = backend.evaluate(specs, 1)
    assert denied.retry_after == calendar.bounds_for(clock[0])[2] - clock[0]
