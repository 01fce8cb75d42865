"""The operator's console: decision counts per limit (tally), the dashboard, the shadow
report's denominators and CSV export, and lists laid out for 1280 px."""

from __future__ import annotations

import csv
import datetime
import io

import pytest
from django.http import HttpResponse
from django.utils import timezone

from django_gcra import audit, decide, tally
from django_gcra.backends.key_lease import counted
from django_gcra.decision import Decision, LimitState
from django_gcra.decorators import ratelimit
from django_gcra.engine import retire
from django_gcra.models import AuditEvent, LimitOverride
from django_gcra.rates import parse_rate
from django_gcra.signals import observers

GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "browser": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "6/m", "burst": 2}]},
        "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "100/m", "burst": 10},
                           {"name": "user", "key": ["tenant", "user"], "rate": "60/m", "burst": 2, "mode": "shadow"}]},
    },
    "AUDIT": {"FLUSH_INTERVAL": 60},
}
pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.plane_urls")]


@pytest.fixture(autouse=True)
def console(gcra_settings, fake_redis, settings, monkeypatch):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    gcra_settings(**GCRA)
    AuditEvent.objects.all().delete()
    counts = tally.Tally(autostart=False)
    monkeypatch.setattr("django_gcra.tally.tally", counts)
    index = observers.index(tally.on_decision)
    observers[index] = counts.observe  # the observer is the tally's bound method
    recorder = audit.AuditRecorder(autostart=False)
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    yield counts, recorder
    observers[observers.index(counts.observe)] = tally.on_decision
    retire()


def traffic():
    """api: tenant acme 5 requests (user 7: shadow would-deny from the 3rd), tenant beta 1; browser: acme 3 (1 denied)."""
    for _ in range(5):
        decide("api", {"tenant": "acme", "user": "7"})
    decide("api", {"tenant": "beta", "user": "8"})
    return [decide("browser", {"tenant": "acme"}).allowed for _ in range(3)]


def test_the_tally_counts_per_limit_and_only_lists_keys_that_were_denied(console, fake_redis):
    counts, _ = console
    assert traffic() == [True, True, False]
    assert counts.flush()
    _, series = tally.read(timezone.now().timestamp() - 60, timezone.now().timestamp())
    total = {field: sum(values) for field, values in series.items()}
    assert total[("api", "tenant", "seen")] == 6 and total[("api", "user", "seen")] == 6
    assert total[("api", "user", "shadow_denied")] == 3
    assert total[("browser", "tenant", "seen")] == 3 and total[("browser", "tenant", "denied")] == 1
    # Keys: only those with a would-deny or denial, from that decision on.
    keys = tally.read_keys(timezone.now().timestamp() - 60, timezone.now().timestamp())
    assert keys == {("api", "user", "tenant=acme,user=7"): 3, ("browser", "tenant", "tenant=acme"): 1}
    # Bounded: every Redis field is a policy, a limit and an outcome (or a listed key).
    fields = {f for name in fake_redis.keys("rl:{tally}:m:*") for f in fake_redis.hkeys(name)}
    assert len(fields) == len(series) and all(f.count(b"\x1f") == 2 for f in fields)


def test_a_one_limit_admission_is_counted_as_the_general_path_counts_it(console):
    """``count`` takes a shortcut for the common decision (one limit, admitted, no key
    listed); it must count exactly what the general path (``_count``) counts."""
    counts, _ = console
    rate = parse_rate("6/m")
    decisions = [
        Decision(allowed=True, retry_after=0.0, remaining=remaining, limit="tenant", policy="browser",
                 limits=(LimitState("tenant", rate, 10, remaining, 0.0),), descriptors={"tenant": "acme"})
        for remaining in (9, 5, 2, 0)  # the last two near their quota (20 % of the burst or less)
    ] + [decide("browser", {"tenant": "beta"}) for _ in range(2)]
    counts.pending.clear()
    general = tally.Tally(autostart=False)
    for decision in decisions:
        counts.count(decision)
        general._count(decision)
    assert counts.pending == general.pending and counts.pending[("browser", "tenant", "allowed")] == 6
    assert counts.pending_near == general.pending_near and counts.pending_near
    assert not counts.pending_keys and not general.pending_keys


def test_admissions_counted_without_a_lock_are_never_lost_to_concurrent_flushes(console):
    """Plain admissions are counted with an atomic ``next`` and folded in when read or
    flushed: 8 threads counting while the main thread flushes lose and double none."""
    import threading

    counts, _ = console
    decision = decide("browser", {"tenant": "many"})
    counts.flush()
    before = dict(counts.totals)
    start = threading.Barrier(9)

    def admit() -> None:
        start.wait()
        for _ in range(5000):
            counts.count(decision)

    threads = [threading.Thread(target=admit) for _ in range(8)]
    for thread in threads:
        thread.start()
    start.wait()
    flushes = 0
    while any(thread.is_alive() for thread in threads) and flushes < 10_000:
        assert counts.flush()
        flushes += 1
    for thread in threads:
        thread.join(30)
    assert counts.flush() and flushes > 1
    for outcome in ("seen", "allowed"):
        field = ("browser", "tenant", outcome)
        assert counts.totals[field] - before.get(field, 0) == 40_000


def test_a_failed_flush_keeps_the_counts(console, monkeypatch):
    counts, _ = console
    decide("browser", {"tenant": "acme"})

    def broken():
        raise ConnectionError("store down")

    monkeypatch.setattr("django_gcra.tally.cache_connection", broken)
    assert counts.flush() is False
    assert counts.pending[("browser", "tenant", "seen")] == 1 and not counts.totals.get(("browser", "tenant", "seen"))
    monkeypatch.undo()
    assert counts.flush() and counts.totals[("browser", "tenant", "seen")] == 1


def test_the_listed_keys_are_bounded(console, monkeypatch):
    counts, _ = console
    monkeypatch.setattr("django_gcra.tally.MAX_LISTED", 2)
    for tenant in "abcd":
        for _ in range(3):
            decide("browser", {"tenant": tenant})
    assert counts.listed_count == 2 and counts.listed[("browser", "tenant")] == {"tenant=a", "tenant=b"}


def test_a_listed_key_keeps_other_policies_on_the_plain_admission_count(console, monkeypatch):
    counts, _ = console
    assert [decide("browser", {"tenant": "acme"}).allowed for _ in range(3)][-1] is False  # denied: listed
    assert counts.listed_policies == {"browser"}
    seen = counts.pending.get(("api", "tenant", "seen"), 0)
    keyed: list[str] = []
    monkeypatch.setattr(counts, "_keyed", lambda decision: keyed.append(decision.policy) or [])
    decide("api", {"tenant": "zeta", "user": None})  # another policy, one limit, admitted
    assert keyed == [] and counted(counts._admitted[("api", "tenant")].counter) == 1  # the plain count, no lookup
    decide("browser", {"tenant": "other"})
    assert keyed == ["browser"]  # the listed policy's decisions are still looked up
    assert counts.pending[("api", "tenant", "seen")] == seen + 1


def test_the_dashboard_shows_counts_per_limit_and_charts_them(admin_client, console):
    counts, recorder = console
    traffic()
    counts.flush()
    recorder.flush()
    LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": "acme"}, burst=9)
    page = admin_client.get("/admin/django_gcra/dashboard/")
    assert page.status_code == 200 and not page.context["error"]
    rows = {f"{r.policy}.{r.limit}": r for r in page.context["rows"]}
    assert rows["api.user"].counts["seen"] == 6 and rows["api.user"].counts["shadow_denied"] == 3
    assert rows["api.user"].mode == "shadow" and rows["api.user"].shadow_share == 50.0
    assert rows["browser.tenant"].counts["denied"] == 1 and rows["browser.tenant"].overrides == 1
    assert (rows["browser.tenant"].rate, rows["browser.tenant"].burst) == ("6/m", "2")
    assert page.context["totals"]["denied"] == 1 and page.context["totals"]["shadow_denied"] == 3
    html = page.content.decode()
    assert html.count('data-series="denied" data-count="1"') == 1 and 'id="dashboard-chart"' in html
    assert [(t["key"], t["total"]) for t in page.context["top"]][:1] == [("tenant=acme,user=7", 3)]
    # What the listed keys have left now: peeked, so the page itself consumes and counts nothing.
    quota = {(t["policy"], t["key"]): t["quota"] for t in page.context["top"]}
    assert quota[("browser", "tenant=acme")].startswith("0 of 2, full in ")
    seen = counts.pending.get(("browser", "tenant", "seen"), 0)
    assert admin_client.get("/admin/django_gcra/dashboard/").status_code == 200
    assert counts.pending.get(("browser", "tenant", "seen"), 0) == seen
    assert len(admin_client.get("/admin/django_gcra/dashboard/?period=24h").context["bars"]) >= 1
    # The dashboard is listed under Rate limiting in the admin index.
    assert b'href="/admin/django_gcra/dashboard/"' in admin_client.get("/admin/").content


def test_the_dashboard_says_when_the_store_does_not_answer(admin_client, console, monkeypatch):
    def broken():
        raise ConnectionError("store down")

    monkeypatch.setattr("django_gcra.tally.cache_connection", broken)
    page = admin_client.get("/admin/django_gcra/dashboard/")
    assert page.status_code == 200 and "store down" in page.context["error"]
    assert b'id="dashboard-error"' in page.content and b'id="dashboard-limits"' in page.content


def test_the_dashboard_needs_the_admin(client):
    assert client.get("/admin/django_gcra/dashboard/").status_code == 302


def test_the_shadow_report_has_denominators_links_and_csv(admin_client, console):
    counts, recorder = console
    traffic()
    counts.flush()
    recorder.flush()
    page = admin_client.get("/admin/django_gcra/auditevent/shadow-report/?period=1h")
    [row] = page.context["keys"]
    assert (row["key"], row["total"], row["traffic"], row["share"]) == ("tenant=acme,user=7", 3, 3, 100.0)
    assert row["limit_traffic"] == 6 and row["in_force"] == "60/m, burst 2, shadow"
    assert row["paths"] == []  # decide() without a request
    assert "outcome=shadow_denied" in row["audit_url"] and "q=tenant%3Dacme%2Cuser%3D7" in row["audit_url"]
    assert "match=tenant%3Dacme%0Auser%3D7" in row["override_url"] and "limit=user" in row["override_url"]
    # The link opens the add form filled in.
    form = admin_client.get(row["override_url"]).content.decode()
    assert "tenant=acme\nuser=7</textarea>" in form
    # An override for the key is what the report then says is in force.
    LimitOverride.objects.create(policy="api", limit="user", match={"tenant": "acme"}, burst=50, mode="enforce")
    [row] = admin_client.get("/admin/django_gcra/auditevent/shadow-report/?period=1h").context["keys"]
    assert row["in_force"].endswith("rate 60/m, burst 50, enforce")
    response = admin_client.get("/admin/django_gcra/auditevent/shadow-report/?period=1h&format=csv")
    assert response["Content-Type"].startswith("text/csv")
    [header, line] = list(csv.reader(io.StringIO(response.content.decode())))
    assert header[:7] == ["policy", "limit", "key", "would_denied", "traffic", "share_percent", "limit_traffic"]
    assert line[:7] == ["api", "user", "tenant=acme,user=7", "3", "3", "100.0", "6"]


def test_a_listed_key_counts_every_later_decision_as_its_traffic(console):
    """Listed once (a would-deny), a key's later decisions are its traffic: its share falls as it behaves."""
    counts, _ = console
    rate = parse_rate("60/m")

    def decision(tenant, shadow):
        state = LimitState("user", rate, 2, 0 if shadow else 1, 1.0, "shadow")
        return Decision(True, 0.0, 1, "user", "api", shadow=shadow, would_retry_after=1.0 if shadow else 0.0,
                        limits=(state,), descriptors={"tenant": tenant, "user": "7"})

    counts.count(decision("acme", False))  # not listed yet: no key counted
    counts.count(decision("acme", True))   # listed from here on
    for _ in range(3):
        counts.count(decision("acme", False))
    counts.count(decision("zeta", False))  # never listed
    assert counts.pending_keys == {("api", "user", "tenant=acme,user=7"): 4}
    assert counts.pending[("api", "user", "seen")] == 6 and counts.pending[("api", "user", "shadow_denied")] == 1


def test_the_audit_list_is_short_to_the_second_with_the_time_zone(admin_client, settings):
    settings.TIME_ZONE = "Europe/Paris"
    at = datetime.datetime(2026, 12, 1, 10, 0, 5, tzinfo=datetime.timezone.utc)
    AuditEvent.objects.create(time=at, last_time=at, policy="api", limit="user", outcome="shadow_denied",
                              key="tenant=acme", count=3, cost=3, retry_after=1.234567, method="GET", path="/api/x")
    AuditEvent.objects.create(time=at, last_time=at, policy="api", limit="user", outcome="denied",
                              key="tenant=acme", retry_after=None)
    html = admin_client.get("/admin/django_gcra/auditevent/").content.decode()
    assert "2026-12-01 11:00:05 CET" in html
    assert ">shadow</span>" in html and ">denied</span>" in html and "shadow: would have been denied" in html
    assert "1.3 s" in html and "1.234567" not in html and "∞" in html
    assert "<td class=\"field-requests\">3</td>" in html  # cost 3 for 3 requests: one number
    assert "api.user" in html and "GET /api/x" in html
    assert "django_gcra/console.css" in html


@ratelimit(key="ip", rate="5/m", burst=2, name="inline-demo")
def inline_view(request):
    return HttpResponse("ok")


def test_the_dashboard_lists_limits_decided_outside_the_settings(admin_client, console, rf):
    """Inline @ratelimit limits (and DRF throttles, policies built in code) appear once they decide."""
    counts, _ = console
    for _ in range(3):
        inline_view(rf.get("/inline/", REMOTE_ADDR="203.0.113.5"))
    counts.flush()
    rows = {f"{r.policy}.{r.limit}": r for r in admin_client.get("/admin/django_gcra/dashboard/").context["rows"]}
    row = rows["inline-demo.view"]
    assert (row.source, row.rate, row.burst, row.counts["seen"], row.counts["denied"]) == ("inline", "5/m", "2", 3, 1)
    assert rows["browser.tenant"].source == "settings"


def test_keys_near_their_quota_are_sampled_from_allowed_decisions_and_bounded(console, fake_redis, monkeypatch):
    counts, _ = console
    for _ in range(7):  # api.tenant: burst 10, 7 used: 30 % left, not near
        decide("api", {"tenant": "far", "user": None})
    for _ in range(9):  # 9 of 10 used: near (90 %) and never denied
        decide("api", {"tenant": "close", "user": None})
    assert set(counts.pending_near) == {("api", "tenant", "tenant=close")}
    assert counts.pending_near[("api", "tenant", "tenant=close")] == (0.9, {"tenant": "close"})
    monkeypatch.setattr("django_gcra.tally.MAX_NEAR", 2)
    for tenant in "abc":  # browser.tenant: burst 2, so the 2nd decision leaves 0
        decide("browser", {"tenant": tenant})
        decide("browser", {"tenant": tenant})
    assert len(counts.pending_near) == 2  # bounded per process and flush interval
    assert counts.flush() and not counts.pending_near
    now = timezone.now().timestamp()
    near = tally.read_near(now - 60, now)
    assert [(r["policy"], r["key"], r["share"]) for r in near] == [("browser", "tenant=a", 1.0),
                                                                      ("api", "tenant=close", 0.9)]
    assert near[0]["descriptors"] == {"tenant": "a"}


def test_redis_keeps_the_highest_shares_of_near_keys(console, fake_redis, monkeypatch):
    counts, _ = console
    monkeypatch.setattr("django_gcra.tally.NEAR_KEPT", 3)
    for share, tenant in ((0.8, "a"), (0.9, "b"), (1.0, "c"), (0.85, "d")):
        counts.pending_near[("api", "tenant", f"tenant={tenant}")] = (share, {"tenant": tenant})
    counts.flush()
    counts.pending_near[("api", "tenant", "tenant=b")] = (0.8, {"tenant": "b"})  # lower: b keeps 0.9
    counts.flush()
    now = timezone.now().timestamp()
    assert [(r["key"], r["share"]) for r in tally.read_near(now - 60, now)] == [
        ("tenant=c", 1.0), ("tenant=b", 0.9), ("tenant=d", 0.85)]


def test_the_dashboard_lists_keys_near_their_quota_that_were_not_denied(admin_client, console):
    counts, recorder = console
    for _ in range(9):
        decide("api", {"tenant": "close", "user": None})
    traffic()  # browser: acme is denied (so listed as most limited, not as near)
    counts.flush()
    recorder.flush()
    page = admin_client.get("/admin/django_gcra/dashboard/")
    near = [(r["policy"], r["limit"], r["key"], r["used"]) for r in page.context["near"]]
    assert ("api", "tenant", "tenant=close", "90 %") in near
    assert all(key != "tenant=acme" or policy != "browser" for policy, _, key, _ in near)
    row = next(r for r in page.context["near"] if r["key"] == "tenant=close")
    assert row["quota"].startswith("1 of 10, full in ")  # peeked now: 9 used of 10
    html = page.content.decode()
    assert 'id="dashboard-near"' in html and "tenant=close" in html.split('id="dashboard-near"')[1]


def test_the_dashboard_lists_concurrency_limits_with_what_they_bound(admin_client, console, gcra_settings):
    """A policy's concurrency limit is a row of its own (not a limit "in code"), counted
    like a rate limit: the decisions that asked for a slot, the ones refused."""
    counts, _ = console
    gcra_settings(**{**GCRA, "POLICIES": {**GCRA["POLICIES"], "jobs": {
        "limits": [{"name": "tenant", "key": ["tenant"], "rate": "100/m", "burst": 10}],
        "concurrency": [{"name": "running", "key": ["tenant"], "max": 1, "ttl": 30}]}}})
    held = decide("jobs", {"tenant": "acme"})
    refused = decide("jobs", {"tenant": "acme"})
    assert held.allowed and not refused.allowed and refused.limit == "running"
    held.release()
    counts.flush()
    rows = {f"{r.policy}.{r.limit}": r for r in admin_client.get("/admin/django_gcra/dashboard/").context["rows"]}
    row = rows["jobs.running"]
    assert (row.source, row.mode, row.rate, row.burst) == ("settings", "enforce", "1 in flight (ttl 30 s)", "")
    assert (row.counts["seen"], row.counts["denied"]) == (2, 1)
    assert rows["jobs.tenant"].counts["seen"] == 2


def test_the_tally_observer_never_raises_it_logs(console, caplog):
    counts, _ = console
    with caplog.at_level("ERROR", logger="django_gcra"):
        counts.observe("api", object(), None)  # not a Decision: counting it fails
    assert "could not count a decision" in caplog.text
