"""Exempt and deny rules in the policy plane: the system checks (E120-E125, W120), the
AccessRule admin (validated, hot-reloaded on save) and the dashboard's exempt and blocked
counts, against a real redis-server."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from django_gcra import decide
from django_gcra.engine import current, retire
from django_gcra.models import AccessRule

POLICIES = {"login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 2}]}}
DESCRIPTORS = {"tenant": "tests.support.descriptors.tenant_of"}


def ids(gcra_settings, **values):
    gcra_settings(**{"POLICIES": POLICIES, "DESCRIPTORS": DESCRIPTORS, **values})
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def test_good_rules_are_clean(gcra_settings):
    assert ids(gcra_settings, EXEMPT=[{"ip": ["10.0.0.0/8", "::1/128", "::ffff:10.0.0.1"]}, {"tenant": ["internal"]},
                                      "tests.support.access_rules.is_probe", {"header:X-Probe": ["yes"]}],
               DENY=[{"user": ["1", 2]}, "tests.support.access_rules.is_banned"]) == []


@pytest.mark.parametrize("rules, expected", [
    ({"EXEMPT": {"ip": ["10.0.0.0/8"]}}, "django_gcra.E120"),  # not a list
    ({"DENY": "tests.support.access_rules.is_probe"}, "django_gcra.E120"),
    ({"DENY": [{"ip": ["10.0.0.0/8"], "tenant": ["x"]}]}, "django_gcra.E121"),  # two keys in one rule
    ({"DENY": [{}]}, "django_gcra.E121"),
    ({"DENY": [42]}, "django_gcra.E121"),
    ({"DENY": ["nodots"]}, "django_gcra.E121"),
    ({"EXEMPT": [{"nope": ["x"]}]}, "django_gcra.E122"),
    ({"EXEMPT": [{"tenant": "internal"}]}, "django_gcra.E123"),  # values not a list
    ({"EXEMPT": [{"tenant": [None]}]}, "django_gcra.E123"),
    ({"DENY": [{"ip": ["10.0.0.0/33"]}]}, "django_gcra.E124"),
    ({"DENY": [{"ip": ["not-an-ip"]}]}, "django_gcra.E124"),
    ({"DENY": [{"ip": ["2001:db8::/129"]}]}, "django_gcra.E124"),
    ({"DENY": ["tests.support.access_rules.missing"]}, "django_gcra.E125"),  # does not import
    ({"EXEMPT": ["tests.support.access_rules.NOT_CALLABLE"]}, "django_gcra.E125"),
])
def test_each_bad_rule_has_its_check(gcra_settings, rules, expected):
    assert expected in ids(gcra_settings, **rules)


def test_a_policy_s_own_rules_are_checked_and_named(gcra_settings):
    found = ids(gcra_settings, POLICIES={"login": {**POLICIES["login"], "deny": [{"ip": ["300.1.1.1"]}]}})
    assert found == ["django_gcra.E124"]
    messages = [m.msg for m in checks.run_checks(tags=["django_gcra"])]
    assert any("DJANGO_GCRA['POLICIES']['login']['deny'][0]" in m for m in messages)
    assert ids(gcra_settings, POLICIES={"login": {**POLICIES["login"], "exempt": [
        "tests.support.access_rules.missing"]}}) == ["django_gcra.E125"]  # (imports are checked once all parse)
    messages = [m.msg for m in checks.run_checks(tags=["django_gcra"])]
    assert any("DJANGO_GCRA['POLICIES']['login']['exempt']: 'tests.support.access_rules.missing'" in m
               for m in messages)


def test_rules_in_error_stop_the_limiter(gcra_settings):
    gcra_settings(POLICIES=POLICIES, DENY=[{"ip": ["10.0.0.0/33"]}])
    with pytest.raises(ImproperlyConfigured, match="E124"):
        decide("login", {"ip": "10.1.1.1"})


# --- the admin ----------------------------------------------------------------------------

@pytest.fixture
def plane(real_redis, gcra_settings, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    gcra_settings(POLICIES=POLICIES, DESCRIPTORS=DESCRIPTORS)
    yield real_redis
    current().overrides.join(5)
    retire()


def form(**values):
    data = {"kind": "deny", "policy": "", "descriptor": "ip", "value": "203.0.113.0/24", "enabled": "on",
            "expires_at_0": "", "expires_at_1": "", "reason": "abuse"}
    data.update(values)
    return data


@pytest.mark.urls("tests.plane_urls")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("values, field, message", [
    ({"value": "203.0.113.0/33"}, "value", "not an IP address or CIDR network"),
    ({"descriptor": "nope"}, "descriptor", "Unknown descriptor"),
    ({"policy": "nope"}, "policy", "Select a valid choice"),
    ({"kind": "maybe"}, "kind", "Select a valid choice"),
])
def test_the_add_form_validates_the_rule(plane, admin_client, values, field, message):
    response = admin_client.post("/admin/django_gcra/accessrule/add/", form(**values))
    assert response.status_code == 200
    assert message in str(response.context["adminform"].form.errors[field])
    assert not AccessRule.objects.exists()


@pytest.mark.urls("tests.plane_urls")
@pytest.mark.django_db(transaction=True)
def test_a_rule_saved_in_the_admin_applies_at_once_and_names_who(plane, admin_client, admin_user,
                                                                 django_assert_num_queries):
    decide("login", {"ip": "192.0.2.1"})  # rules loaded (none)
    current().overrides.join(5)
    response = admin_client.post("/admin/django_gcra/accessrule/add/", form(policy="login"))
    assert response.status_code == 302
    rule = AccessRule.objects.get()
    assert rule.changed_by == admin_user and str(rule) == "deny ip=203.0.113.0/24 (login)"
    with django_assert_num_queries(0):
        assert decide("login", {"ip": "203.0.113.9"}).blocked
    listing = admin_client.get("/admin/django_gcra/accessrule/?active=yes")
    assert b"ip=203.0.113.0/24" in listing.content
    admin_client.post(f"/admin/django_gcra/accessrule/{rule.pk}/delete/", {"post": "yes"})
    assert not decide("login", {"ip": "203.0.113.9"}).blocked


@pytest.mark.django_db
def test_the_database_check_reports_rules_it_cannot_apply(plane):
    AccessRule.objects.create(kind="deny", descriptor="ip", value="nope")
    AccessRule.objects.create(kind="deny", policy="missing", descriptor="ip", value="10.0.0.1")
    AccessRule.objects.create(kind="exempt", descriptor="colour", value="red")
    AccessRule.objects.create(kind="exempt", descriptor="tenant", value="ok")
    found = [m for m in checks.run_checks(tags=["django_gcra"], databases=["default"]) if m.id == "django_gcra.W120"]
    assert len(found) == 3 and all("is ignored" in m.msg for m in found)
    assert all(f"AccessRule {pk} " not in m.msg for m in found for pk in AccessRule.objects.filter(
        descriptor="tenant").values_list("pk", flat=True))


# --- the dashboard ------------------------------------------------------------------------

@pytest.mark.urls("tests.plane_urls")
@pytest.mark.django_db
def test_the_dashboard_shows_exempt_and_blocked_beside_allowed_and_denied(plane, admin_client, monkeypatch):
    from django_gcra import tally
    from django_gcra.signals import observers

    gcra = {"POLICIES": POLICIES, "EXEMPT": [{"ip": ["10.0.0.0/8"]}], "DENY": [{"ip": ["203.0.113.0/24"]}]}
    from django.conf import settings

    settings.DJANGO_GCRA = {**settings.DJANGO_GCRA, **gcra}
    counts = tally.Tally(autostart=False)
    monkeypatch.setattr("django_gcra.tally.tally", counts)
    index = observers.index(tally.on_decision)
    observers[index] = counts.observe
    try:
        for ip in ["10.0.0.1"] * 4 + ["203.0.113.5"] * 3 + ["192.0.2.1"] * 3:
            decide("login", {"ip": ip})
        assert counts.flush()
    finally:
        observers[observers.index(counts.observe)] = tally.on_decision
    page = admin_client.get("/admin/django_gcra/dashboard/")
    totals = page.context["totals"]
    assert (totals["allowed"], totals["denied"], totals["exempt"], totals["blocked"]) == (2, 1, 4, 3)
    assert page.context["access"] == [("login", {"exempt": 4, "blocked": 3})]
    html = page.content.decode()
    assert '<span data-series="exempt">4 exempt</span>' in html and '<span data-series="blocked">3 blocked' in html
    assert 'id="dashboard-access"' in html
