"""A calendar quota's use in its current period, in ``gcra_inspect`` and on the console."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from django_gcra import audit, decide, tally
from django_gcra.models import AuditEvent
from django_gcra.overrides import cache
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
    cache.reset()


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
