"""An override the limiter cannot run is refused by the admin form and by ``full_clean``
with the settings' own ranges, and one stored anyway (``objects.create``, SQL, a settings
change) shows as "not in force" with the reason in the admin list and on the dashboard.
The dashboard counts the allowed decisions of each limit."""

from __future__ import annotations

import html
import re

import pytest
from django.core.exceptions import ValidationError

from django_gcra import decide, tally
from django_gcra.engine import retire
from django_gcra.models import AuditEvent, LimitOverride
from django_gcra.signals import observers

GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "browser": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 2}]},
        "exports": {"limits": [{"name": "log", "key": ["tenant"], "rate": "5/h", "algorithm": "sliding_log"}]},
        "jobs": {"concurrency": [{"name": "running", "key": ["tenant"], "max": 2, "ttl": 60}]},
    },
}
ADD = "/admin/django_gcra/limitoverride/add/"
LIST = "/admin/django_gcra/limitoverride/"
DASHBOARD = "/admin/django_gcra/dashboard/"
FORM = {"policy": "browser", "limit": "tenant", "match": "tenant=acme", "rate": "", "burst": "", "quota": "",
        "mode": "enforce", "enabled": "on", "expires_at_0": "", "expires_at_1": "", "reason": ""}
REFILL = "years to refill; the most is 143"
# A burst beyond a 32-bit column: PostgreSQL's integer range is checked by Django's own
# validator first (SQLite has none), so either message refuses it.
INT_RANGE = "less than or equal to 2147483647"

# (fields, the field in error, a part of its message): what the limiter could not run.
HOSTILE = [
    ({"rate": "1/100000000000d"}, "rate", REFILL),
    ({"burst": 2**40}, "burst", (REFILL, INT_RANGE)),
    ({"rate": "1000/s", "burst": 2**43}, "burst", (REFILL, INT_RANGE)),
    ({"rate": "1/d", "burst": 2**20}, "burst", REFILL),  # (a burst any database's integer column holds)
    ({"quota": 2**41}, "quota", "from 1 to 1,099,511,627,776"),
    ({"quota": 1000}, "quota", "is a gcra limit, not a calendar quota"),
    ({"policy": "exports", "limit": "log", "burst": 9}, "burst", "sliding_log limit: it takes no burst"),
    ({"policy": "exports", "limit": "log", "rate": "20000/h"}, "rate", "the most is 10,000"),
    ({"policy": "jobs", "limit": "running", "burst": 100_001}, "burst", "at most 100,000, not 100,001"),
    ({"policy": "jobs", "limit": "running", "rate": "5/s"}, "rate", "concurrency limit: it has no rate"),
    ({"limit": "running"}, "limit", "Policy browser has no limit 'running'; its limits: tenant."),
]

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.plane_urls")]


@pytest.fixture(autouse=True)
def plane(gcra_settings, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast admin_user
    gcra_settings(**GCRA)
    AuditEvent.objects.all().delete()
    yield
    retire()


def form_data(fields):
    data = {**FORM, **{k: str(v) for k, v in fields.items()}}
    if "policy" in fields:
        data["match"] = "tenant=acme"
    return data


@pytest.mark.parametrize("fields, field, message", HOSTILE)
def test_the_admin_form_refuses_what_the_limiter_could_not_run(admin_client, fake_redis, fields, field, message):
    response = admin_client.post(ADD, form_data(fields))
    assert response.status_code == 200, "saved"
    errors = response.context["adminform"].form.errors
    messages = message if isinstance(message, tuple) else (message,)
    assert field in errors and any(m in " ".join(errors[field]) for m in messages), errors
    assert any(m in html.unescape(response.content.decode()) for m in messages)
    assert not LimitOverride.objects.exists()


def test_the_admin_form_saves_the_largest_values_the_settings_allow(admin_client, fake_redis):
    assert admin_client.post(ADD, form_data({"rate": "1000/s", "burst": 10**9})).status_code == 302
    assert admin_client.post(ADD, form_data({"policy": "jobs", "limit": "running", "burst": 100_000})).status_code == 302
    assert sorted(LimitOverride.objects.values_list("burst", flat=True)) == [100_000, 10**9]


@pytest.mark.parametrize("fields, field, message", HOSTILE)
def test_full_clean_refuses_what_the_limiter_could_not_run(fields, field, message):
    override = LimitOverride(**{"policy": "browser", "limit": "tenant", "match": {"tenant": "acme"}, **fields})
    with pytest.raises(ValidationError) as raised:
        override.full_clean()
    messages = message if isinstance(message, tuple) else (message,)
    assert any(m in " ".join(raised.value.message_dict[field]) for m in messages)


@pytest.mark.parametrize("fields, field, message", [
    ({"policy": "ghost"}, "policy", "Policy 'ghost' is not configured"),
    ({"match": {"user": "7"}}, "match", "Policy browser does not use descriptor(s) user; it uses tenant."),
    ({"match": ["acme"]}, "match", "The match must map descriptor names to values"),
    ({"rate": "lots"}, "rate", "invalid rate 'lots'"),
])
def test_full_clean_refuses_what_only_the_orm_can_write(fields, field, message):
    override = LimitOverride(**{"policy": "browser", "limit": "tenant", "match": {"tenant": "acme"}, **fields})
    with pytest.raises(ValidationError) as raised:
        override.full_clean()
    assert message in " ".join(raised.value.message_dict[field])


def test_full_clean_accepts_a_runnable_override():
    LimitOverride(policy="browser", limit="tenant", match={"tenant": "acme"}, rate="100/s", burst=500).full_clean()


def test_an_override_stored_without_validation_shows_not_in_force_with_the_reason(admin_client, fake_redis, save,
                                                                                  caplog):
    bad = save(policy="browser", limit="tenant", match={"tenant": "acme"}, rate="1/100000000000d")  # objects.create
    save(policy="browser", limit="tenant", match={"tenant": "beta"}, burst=9)
    # The limiter ignores it (and says why in the log)...
    assert decide("browser", {"tenant": "acme"}, cost=0).limits[0].burst == 2
    assert decide("browser", {"tenant": "beta"}, cost=0).limits[0].burst == 9
    assert f"override {bad.pk} ignored: Rate 1/8640000000000000s with burst 2 takes" in caplog.text
    # ... the list says so, with the same reason, and the in-force filter leaves it out ...
    page = html.unescape(admin_client.get(LIST).content.decode())
    assert page.count("not in force: ") == 1
    assert re.search(r"not in force: Rate 1/8640000000000000s with burst 2 takes \d+ years to refill", page)
    assert admin_client.get(LIST + "?active=yes").context["cl"].result_count == 1
    assert [o.pk for o in admin_client.get(LIST + "?active=broken").context["cl"].result_list] == [bad.pk]
    # ... and so does the dashboard, whose override count is of the overrides in force.
    response = admin_client.get(DASHBOARD)
    dashboard = html.unescape(response.content.decode())
    assert 'id="dashboard-not-in-force"' in dashboard and f"/limitoverride/{bad.pk}/change/" in dashboard
    assert re.search(r"browser\.tenant \[tenant=acme\]</a></td><td class=\"reason\">not in force: Rate "
                     r"1/8640000000000000s with burst 2 takes \d+ years to refill", dashboard)
    assert {r.limit: r.overrides for r in response.context["rows"] if r.policy == "browser"} == {"tenant": 1}


def test_a_match_written_without_validation_is_listed_not_in_force_never_a_crash(admin_client, fake_redis):
    LimitOverride.objects.create(policy="browser", limit="tenant", match=["acme"], burst=9)
    LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": {"id": 1}}, burst=9)
    for url in (LIST, DASHBOARD):
        page = html.unescape(admin_client.get(url).content.decode())
        assert "browser.tenant [['acme']]" in page and "not in force: The match must map descriptor names" in page
        assert "not in force: Descriptor values must be strings: tenant." in page


def test_an_override_of_a_limit_no_longer_configured_shows_not_in_force(admin_client, fake_redis, gcra_settings):
    LimitOverride.objects.create(policy="exports", limit="log", match={}, rate="3/h")
    gcra_settings(**{**GCRA, "POLICIES": {k: v for k, v in GCRA["POLICIES"].items() if k != "exports"}})
    page = html.unescape(admin_client.get(LIST).content.decode())
    assert "not in force: Policy 'exports' is not configured" in page
    assert "not in force: Policy 'exports' is not configured" in html.unescape(
        admin_client.get(DASHBOARD).content.decode())


@pytest.fixture
def counts(monkeypatch):
    """A tally of this test's own (no flusher thread), observing every decision."""
    mine = tally.Tally(autostart=False)
    monkeypatch.setattr("django_gcra.tally.tally", mine)
    index = observers.index(tally.on_decision)
    observers[index] = mine.observe
    yield mine
    observers[observers.index(mine.observe)] = tally.on_decision


@pytest.mark.redis
def test_the_dashboard_counts_the_allowed_decisions_of_each_limit(admin_client, real_redis, counts):
    outcomes = [decide("browser", {"tenant": "acme"}).allowed for _ in range(3)]
    outcomes += [decide("browser", {"tenant": "beta"}).allowed]
    assert outcomes == [True, True, False, True]
    assert counts.flush()
    page = admin_client.get(DASHBOARD).content.decode()
    row = re.search(r'<tr data-limit="browser\.tenant">.*?</tr>', page, re.S)
    assert row is not None
    cells = dict(re.findall(r'<td class="num (seen|allowed|denied)">(\d+)', row.group(0)))
    assert cells == {"seen": "4", "allowed": "3", "denied": "1"}
    assert '>Allowed</th>' in page


def test_the_database_check_warns_of_a_stored_override_that_cannot_run():
    from django.core import checks

    bad = LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": "acme"}, rate="1/d",
                                       burst=2**31 - 1)
    LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": "beta"}, burst=9)
    found = [m for m in checks.run_checks(databases=["default"], tags=["django_gcra"]) if m.id == "django_gcra.W030"]
    assert [m.msg for m in found] == [(
        f"LimitOverride {bad.pk} (browser.tenant [tenant=acme]) cannot run, so it is ignored: Rate 1/86400s with burst "
        "2147483647 takes 5883517 years to refill; the most is 143 (the settings refuse it too: E003). Use a shorter "
        "period or a smaller burst.")]


def test_gcra_status_lists_a_stored_override_that_cannot_run_as_not_in_force(fake_redis):
    import io

    from django.core.management import call_command

    LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": "acme"}, quota=5)
    LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": "beta"}, burst=9)
    out = io.StringIO()
    call_command("gcra_status", stdout=out)
    text = out.getvalue()
    assert ("browser.tenant [tenant=acme]: NOT IN FORCE: Limit tenant is a gcra limit, not a calendar quota: it has "
            "no quota. Change its rate or burst instead.") in text
    assert "browser.tenant [tenant=beta]: mode enforce, rate as configured, burst 9" in text
