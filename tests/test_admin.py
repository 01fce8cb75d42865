"""The admin, through Django's test client: form validation, bulk actions, audit and report pages."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from django_gcra.engine import retire
from django_gcra.models import AuditEvent, LimitOverride
from django_gcra.overrides import version_key

GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "browser": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 2}]},
        "api": {"limits": [{"name": "user", "key": ["tenant", "user"], "rate": "6/m"}]},
    },
}
ADD = "/admin/django_gcra/limitoverride/add/"
FORM = {"policy": "browser", "limit": "tenant", "match": "tenant=acme", "rate": "", "burst": "40",
        "mode": "enforce", "enabled": "on", "expires_at_0": "", "expires_at_1": "", "reason": ""}

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.plane_urls")]


@pytest.fixture(autouse=True)
def policies(gcra_settings, fake_redis, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast admin_user
    gcra_settings(**GCRA)
    AuditEvent.objects.all().delete()  # rows other tests' audit flushers may have left outside their transactions
    yield
    retire()


@pytest.mark.parametrize("change, field, message", [
    ({"limit": "user"}, "limit", "Policy browser has no limit &#x27;user&#x27;; its limits: tenant."),
    ({"limit": "nope"}, "limit", "Select a valid choice. nope is not one of the available choices."),
    ({"match": "user=7"}, "match", "Policy browser does not use descriptor(s) user; it uses tenant."),
    ({"match": "tenant acme"}, "match", "Line 1 (&#x27;tenant acme&#x27;) has no &#x27;=&#x27;: write name=value"),
    ({"match": "tenant=acme\n=x"}, "match", "Line 2 (&#x27;=x&#x27;) names no descriptor before &#x27;=&#x27;."),
    ({"match": "tenant="}, "match", "Line 1: descriptor tenant has no value."),
    ({"match": "tenant=a\ntenant=b"}, "match", "Line 2: descriptor tenant is given twice."),
    ({"match": '["acme"]'}, "match", "Line 1 (&#x27;[&quot;acme&quot;]&#x27;) has no &#x27;=&#x27;"),
    ({"match": '{"tenant": {"a": 1}}'}, "match", "Descriptor values must be strings: tenant."),
    ({"match": '{"tenant": '}, "match", "Not a JSON object"),
    ({"rate": "lots"}, "rate", "invalid rate &#x27;lots&#x27;"),
    ({"policy": "ghost"}, "policy", "Select a valid choice."),
    ({"burst": "0"}, "burst", "The burst must be at least 1."),
])
def test_the_add_form_validates_against_the_policy(admin_client, change, field, message):
    response = admin_client.post(ADD, {**FORM, **change})
    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert message in response.content.decode()
    assert not LimitOverride.objects.exists()


def test_the_limit_choices_are_grouped_by_policy_and_the_configured_values_are_beside_them(admin_client):
    page = admin_client.get(ADD).content.decode()
    assert '<optgroup label="api">' in page and '<optgroup label="browser">' in page
    assert '<option value="tenant">tenant (key: tenant)</option>' in page
    assert 'id="gcra-limits"' in page and '"rates": {"": "60/m"}' in page and 'id="gcra-effective"' in page


def test_name_value_lines_and_json_objects_are_both_saved_as_a_match(admin_client):
    assert admin_client.post(ADD, {**FORM, "match": " tenant = acme \n\n"}).status_code == 302
    assert admin_client.post(ADD, {**FORM, "match": '{"tenant": "beta"}'}).status_code == 302
    assert sorted(o.match["tenant"] for o in LimitOverride.objects.all()) == ["acme", "beta"]


def test_the_change_form_shows_the_match_as_lines(admin_client):
    override = LimitOverride.objects.create(policy="api", limit="user", match={"tenant": "acme", "user": "7"})
    page = admin_client.get(f"/admin/django_gcra/limitoverride/{override.pk}/change/").content.decode()
    assert "tenant=acme\nuser=7</textarea>" in page


def test_the_add_form_takes_initial_values_from_the_query_string(admin_client):
    page = admin_client.get(ADD + "?policy=browser&limit=tenant&match=tenant%3Dtrial").content.decode()
    assert "tenant=trial</textarea>" in page


def test_the_add_form_saves_who_and_bumps_the_version(admin_client, admin_user, fake_redis,
                                                      django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(ADD, {**FORM, "match": "tenant=42"})
    assert response.status_code == 302
    override = LimitOverride.objects.get()
    assert (override.match, override.burst, override.changed_by) == ({"tenant": "42"}, 40, admin_user)
    assert fake_redis.get(version_key()) == b"1"


def test_a_blank_match_applies_to_every_request(admin_client):
    assert admin_client.post(ADD, {**FORM, "match": ""}).status_code == 302
    assert LimitOverride.objects.get().match == {}


@pytest.mark.parametrize("action, field, value", [
    ("make_enabled_False", "enabled", False), ("make_enabled_True", "enabled", True),
    ("make_mode_shadow", "mode", "shadow"), ("make_mode_enforce", "mode", "enforce"),
])
def test_bulk_actions_update_and_invalidate_like_a_save(admin_client, admin_user, fake_redis, action, field, value,
                                                         django_capture_on_commit_callbacks):
    rows = [LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": t}, burst=9,
                                         enabled=not value if field == "enabled" else True,
                                         mode="enforce" if value == "shadow" else "shadow") for t in "ab"]
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post("/admin/django_gcra/limitoverride/",
                                     {"action": action, "_selected_action": [r.pk for r in rows]})
    assert response.status_code == 302
    assert {(getattr(r, field), r.changed_by) for r in LimitOverride.objects.all()} == {(value, admin_user)}
    assert fake_redis.get(version_key()) == b"1"


def test_the_override_list_filters_and_searches(admin_client):
    LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": "acme"}, reason="launch")
    LimitOverride.objects.create(policy="api", limit="user", match={"tenant": "zeta"}, enabled=False)
    LimitOverride.objects.create(policy="api", limit="user", match={}, expires_at=timezone.now())
    page = admin_client.get("/admin/django_gcra/limitoverride/?q=launch")
    assert page.context["cl"].result_count == 1
    assert admin_client.get("/admin/django_gcra/limitoverride/?q=zeta").context["cl"].result_count == 1  # in match
    assert admin_client.get("/admin/django_gcra/limitoverride/?active=yes").context["cl"].result_count == 1
    assert admin_client.get("/admin/django_gcra/limitoverride/?active=expired").context["cl"].result_count == 1
    assert admin_client.get("/admin/django_gcra/limitoverride/?policy=api").context["cl"].result_count == 2


def test_the_audit_admin_is_read_only_with_a_date_hierarchy(admin_client):
    now = timezone.now()
    AuditEvent.objects.create(time=now, last_time=now, policy="browser", limit="tenant", outcome="denied",
                              key="tenant=acme", count=3)
    page = admin_client.get("/admin/django_gcra/auditevent/?q=acme")
    assert page.status_code == 200 and page.context["cl"].result_count == 1
    assert page.context["cl"].date_hierarchy == "time"
    assert b"shadow-report-link" in page.content
    assert admin_client.get("/admin/django_gcra/auditevent/add/").status_code == 403
    row = AuditEvent.objects.get()
    assert b'name="policy"' not in admin_client.get(f"/admin/django_gcra/auditevent/{row.pk}/change/").content


def test_the_shadow_report_ranks_keys_and_charts_the_period(admin_client):
    now = timezone.now()
    for minutes, key, count, outcome in [(5, "tenant=acme", 7, "shadow_denied"), (70, "tenant=acme", 3, "shadow_denied"),
                                         (30, "tenant=beta", 4, "shadow_denied"), (10, "tenant=gamma", 99, "denied"),
                                         (60 * 30, "tenant=old", 50, "shadow_denied")]:
        at = now - datetime.timedelta(minutes=minutes)
        AuditEvent.objects.create(time=at, last_time=at, policy="browser", limit="tenant", outcome=outcome, key=key,
                                  count=count, retry_after=0.5)
    page = admin_client.get("/admin/django_gcra/auditevent/shadow-report/?period=24h")
    assert page.status_code == 200
    keys = [(row["key"], row["total"]) for row in page.context["keys"]]
    assert keys == [("tenant=acme", 10), ("tenant=beta", 4)]  # denied and too-old rows are not in it
    assert page.context["total"] == 14 and len(page.context["bars"]) == 24
    assert sum(bar.count for bar in page.context["bars"]) == 14
    assert b'id="shadow-chart"' in page.content and page.content.count(b'class="bar"') == 24
    hour = admin_client.get("/admin/django_gcra/auditevent/shadow-report/?period=1h&policy=browser")
    assert [row["key"] for row in hour.context["keys"]] == ["tenant=acme", "tenant=beta"]
    assert hour.context["total"] == 11


def test_the_shadow_report_needs_the_admin(client):
    assert client.get("/admin/django_gcra/auditevent/shadow-report/").status_code == 302  # to the login page
