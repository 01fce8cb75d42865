"""The admin in a real headless browser: Debian's chromium driven by Playwright against
pytest-django's live server (which serves the admin's CSS), a real redis-server, the audit
flusher and the decision-count flusher threads, in a 1280 x 800 window.

Screenshots of the console are written to $DJANGO_GCRA_SCREENSHOTS (``docs/img`` refreshes
the docs' images), else to a temporary directory the run prints.

Missing chromium or Playwright is a failure, not a skip: run scripts/install-system-deps.sh
and pip install -r requirements-dev.txt.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from django_gcra.engine import retire
from django_gcra.models import AuditEvent, LimitOverride
from django_gcra.signals import observers
from tests.plane_urls import INLINE_POLICY

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "browser": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "6/m", "burst": 2}]},
        "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "1000/m", "burst": 200},
                           {"name": "user", "key": ["tenant", "user"], "rate": "60/m", "burst": 20}]},
    },
    "AUDIT": {"FLUSH_INTERVAL": 0.2},
}
VIEWPORT = {"width": 1280, "height": 800}

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.urls("tests.plane_urls"),
              pytest.mark.django_db(transaction=True)]


def sync_playwright():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: the browser tests need Debian's chromium "
                    "(run scripts/install-system-deps.sh, or apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the Python 'playwright' package is missing: pip install -r requirements-dev.txt "
                    "(do not run 'playwright install'; the tests use Debian's chromium)")
    return sync_playwright()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Where the screenshots go: $DJANGO_GCRA_SCREENSHOTS, else a temporary directory."""
    target = os.environ.get("DJANGO_GCRA_SCREENSHOTS")
    folder = Path(target) if target else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.fixture
def plane(real_redis, gcra_settings, settings, monkeypatch, django_user_model):
    """A superuser, the policies, an audit recorder and a decision tally whose threads flush every 0.2 s."""
    from django_gcra import audit, tally

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.TIME_ZONE = "UTC"  # what the screenshots in the docs show
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"uploads": "4/m"}}
    gcra_settings(**GCRA)
    audit.recorder.buffer.clear()
    AuditEvent.objects.all().delete()  # what other tests' flushes may have left outside their transactions
    recorder = audit.AuditRecorder()
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    counts = tally.Tally()
    monkeypatch.setattr("django_gcra.tally.tally", counts)
    index = observers.index(tally.on_decision)
    observers[index] = counts.observe  # the observer is the tally's bound method
    django_user_model.objects.create_superuser("root", "root@example.com", "s3cret-pw")
    # ORM work happens before Playwright starts: its sync API runs an event loop in this thread.
    LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": "trial"}, mode="shadow",
                                 reason="new limit, shadow first")
    yield recorder
    observers[observers.index(counts.observe)] = tally.on_decision
    recorder.stop()
    counts.stop()
    retire()


def get_json(page, url):
    response = page.goto(url)
    return response.status, json.loads(page.inner_text("body")) if response.status == 200 else None


def test_admin_override_changes_the_limited_endpoint_and_the_shadow_report_shows_would_denies(live_server, plane):
    base = live_server.url
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(15_000)

        # Before: burst 2, the third request is refused.
        assert [get_json(page, f"{base}/limited/?tenant=acme")[0] for _ in range(3)] == [200, 200, 429]
        assert json.loads(page.inner_text("body"))["error"] == "too_many_requests"

        # Log into the admin and add an override raising acme's burst.
        page.goto(f"{base}/admin/login/?next=/admin/")
        page.fill("#id_username", "root")
        page.fill("#id_password", "s3cret-pw")
        page.click("input[type=submit]")
        page.wait_for_url(f"{base}/admin/")
        page.goto(f"{base}/admin/django_gcra/limitoverride/add/")
        page.select_option("#id_policy", "browser")
        assert page.input_value("#id_limit") == "tenant"  # the policy's only limit, chosen for us
        page.fill("#id_match", "tenant=acme")
        page.fill("#id_burst", "50")
        page.select_option("#id_mode", "enforce")
        page.fill("#id_reason", "partner launch")
        page.click("input[name=_save]")
        page.wait_for_url(f"{base}/admin/django_gcra/limitoverride/")
        assert "was added successfully" in page.inner_text(".messagelist")

        # After: the endpoint runs on the new burst at once.
        status, body = get_json(page, f"{base}/limited/?tenant=acme")
        assert status == 200 and body["burst"] == 50

        # A limit in shadow for tenant "trial": never refused, would-denies audited.
        trial = [get_json(page, f"{base}/limited/?tenant=trial") for _ in range(5)]
        assert [status for status, _ in trial] == [200] * 5 and trial[-1][1]["shadow"] is True

        # The shadow report, reached from the audit trail, names tenant=trial and charts it.
        deadline = time.monotonic() + 15
        while True:
            page.goto(f"{base}/admin/django_gcra/auditevent/")
            if "tenant=trial" in page.inner_text("#result_list") if page.query_selector("#result_list") else False:
                break
            assert time.monotonic() < deadline, "the audit flusher never wrote the shadow would-denies"
            time.sleep(0.3)
        page.click("#shadow-report-link")
        page.wait_for_selector("#shadow-chart")
        page.select_option("#period", "1h")
        page.select_option("#policy", "browser")
        page.click("#shadow-report-form input[type=submit]")
        page.wait_for_url("**/shadow-report/?period=1h&policy=browser")
        row = page.inner_text("#shadow-keys tbody tr")
        assert "browser" in row and "tenant=trial" in row and "\t3\t" in row
        counts = [int(c) for c in page.eval_on_selector_all("#shadow-chart rect.bar", "rs => rs.map(r => r.dataset.count)")]
        assert len(counts) == 60 and sum(counts) == 3, page.inner_text("#shadow-keys")
        assert "3 would-denied requests" in page.inner_text("#shadow-total")
        browser.close()


def login(page, base):
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "s3cret-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def poll(page, url, ready, what, seconds=15):
    """Reload ``url`` until ``ready(page)``: the flusher threads write every 0.2 s."""
    deadline = time.monotonic() + seconds
    while True:
        page.goto(url)
        if ready(page):
            return
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def fits(page):
    """No horizontal scrolling at 1280 px: neither the page nor the admin's scrolling results box."""
    return page.evaluate("""() => document.documentElement.scrollWidth <= window.innerWidth
        && [...document.querySelectorAll('.results, #content-main')].every(e => e.scrollWidth <= e.clientWidth)""")


def widths(page):
    """Why a page does not fit: each box's scroll width / client width."""
    return page.evaluate("""() => [...document.querySelectorAll('.results, #content-main, #result_list th')]
        .map(e => e.className + ':' + e.scrollWidth + '/' + e.clientWidth).join(' ')""")


def test_the_console_at_1280px_form_dashboard_report_and_lists(live_server, plane, shots):
    base = live_server.url
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT, accept_downloads=True)
        page.set_default_timeout(15_000)
        # Traffic: acme 3 requests (the 3rd refused), trial 5 (shadow override: 3 would-denies).
        assert [get_json(page, f"{base}/limited/?tenant=acme")[0] for _ in range(3)] == [200, 200, 429]
        assert [get_json(page, f"{base}/limited/?tenant=trial")[0] for _ in range(5)] == [200] * 5
        # The inline limit (burst 2) used up but never denied: a key near its quota.
        assert [get_json(page, f"{base}/inline/")[1]["remaining"] for _ in range(2)] == [1, 0]
        login(page, base)

        # The override form: policy, then that policy's limits; the configured value and the effect beside them.
        page.goto(f"{base}/admin/django_gcra/limitoverride/add/")
        # Every limit of the plane: an inline @ratelimit limit and a DRF scope beside the settings policies.
        policies = page.eval_on_selector_all("#id_policy option", "os => os.map(o => [o.value, o.innerText])")
        assert [INLINE_POLICY, f"{INLINE_POLICY} (@ratelimit)"] in policies, policies
        assert ["drf.uploads", "drf.uploads (DRF scope)"] in policies, policies
        page.select_option("#id_policy", INLINE_POLICY)
        visible = page.eval_on_selector_all("#id_limit optgroup:not([hidden]) option", "os => os.map(o => o.value)")
        assert visible == ["view"]
        assert page.inner_text("#gcra-configured") == "rate 3/m, burst 2, mode enforce (key: ip)"
        page.select_option("#id_policy", "drf.uploads")
        assert page.inner_text("#gcra-configured") == "rate 4/m, burst 4, mode enforce (key: cache_key+rate)"
        page.fill("#id_burst", "8")
        assert page.inner_text("#gcra-effective") == "rate 4/m, burst 8, mode enforce"
        page.fill("#id_burst", "")
        page.select_option("#id_policy", "api")
        visible = page.eval_on_selector_all("#id_limit optgroup:not([hidden]) option", "os => os.map(o => o.value)")
        assert visible == ["tenant", "user"]
        page.select_option("#id_limit", "user")
        assert page.inner_text("#gcra-configured") == "rate 60/m, burst 20, mode enforce (key: tenant+user)"
        page.fill("#id_burst", "50")
        page.fill("#id_match", "tenant acme")
        assert page.inner_text("#gcra-effective") == "rate 60/m, burst 50, mode enforce"
        page.fill("#id_reason", "partner launch")
        page.click("input[name=_save]")
        errors = page.inner_text(".field-match .errorlist")
        assert "Line 1 ('tenant acme') has no '=': write name=value, e.g. tenant=acme." in errors
        page.fill("#id_match", "tenant=acme\nuser=7")
        page.fill("#id_rate", "120/m")
        assert page.inner_text("#gcra-effective") == "rate 120/m, burst 50, mode enforce"
        assert page.inner_text("#gcra-applies") == "requests with tenant=acme and user=7"
        page.screenshot(path=str(shots / "console-override-form.png"), full_page=True)
        page.click("input[name=_save]")
        page.wait_for_url(f"{base}/admin/django_gcra/limitoverride/")
        assert "rate 60/m → 120/m, burst 20 → 50" in page.inner_text("#result_list")
        page.screenshot(path=str(shots / "console-overrides.png"), full_page=True)
        assert fits(page), widths(page)

        # The dashboard: every process's counts per limit (the tally thread flushes every 0.2 s).
        def counted(p):
            row = p.query_selector('tr[data-limit="browser.tenant"]')
            return row is not None and row.query_selector("td.seen").inner_text() == "8"

        poll(page, f"{base}/admin/django_gcra/dashboard/", counted, "the tally never reached the dashboard")
        row = page.query_selector('tr[data-limit="browser.tenant"]')
        assert row.query_selector("td.denied").inner_text().startswith("1 (12.5")
        assert row.query_selector("td.shadow").inner_text().startswith("3 (37.5")
        assert page.eval_on_selector_all("#dashboard-chart rect[data-series=denied]",
                                         "rs => rs.reduce((n, r) => n + +r.dataset.count, 0)") == 1
        assert page.query_selector('tr[data-limit="api.user"] td.num a').inner_text() == "1"  # the override
        left = page.eval_on_selector_all("#dashboard-top td.quota", "ts => ts.map(t => t.innerText)")
        assert left and all(" of 2" in text for text in left), left  # browser.tenant's burst, peeked
        near = page.eval_on_selector_all("#dashboard-near tbody tr", "rs => rs.map(r => r.innerText)")
        assert any(INLINE_POLICY in text and "ip=127.0.0.1" in text and "100 %" in text for text in near), near
        page.wait_for_function("() => document.fonts.ready")
        page.screenshot(path=str(shots / "console-dashboard.png"), full_page=True)
        assert fits(page), widths(page)

        # The shadow report: the key's share of its traffic, its paths, the limit in force, the actions.
        poll(page, f"{base}/admin/django_gcra/auditevent/shadow-report/?period=1h",
             lambda p: "tenant=trial" in p.inner_text("#shadow-keys"), "the shadow report never listed trial")
        cells = page.eval_on_selector_all("#shadow-keys tbody tr:first-child td",
                                          "ts => ts.map(t => t.innerText.replace('\u2009', ' '))")
        assert cells[:5] == ["browser.tenant", "tenant=trial", "3", "3", "100.0 %"], cells
        assert cells[5].startswith("override #") and cells[6] == "/limited/"
        page.screenshot(path=str(shots / "console-shadow-report.png"), full_page=True)
        assert fits(page)
        with page.expect_download() as download:
            page.click("#shadow-csv")
        lines = Path(download.value.path()).read_text().splitlines()
        assert lines[0].startswith("policy,limit,key,would_denied,traffic,share_percent")
        assert lines[1].startswith("browser,tenant,tenant=trial,3,3,100.0,8,")
        page.click("#shadow-keys a.create-override")
        page.wait_for_url("**/limitoverride/add/**")
        assert page.input_value("#id_match") == "tenant=trial" and page.input_value("#id_limit") == "tenant"
        assert page.inner_text("#gcra-configured").startswith("rate 6/m, burst 2")

        # The audit trail: short outcome labels, times to the second with the zone, one line per row.
        page.goto(f"{base}/admin/django_gcra/auditevent/")
        outcomes = page.eval_on_selector_all("#result_list td.field-outcome_label", "ts => ts.map(t => t.innerText)")
        assert sorted(set(outcomes)) == ["denied", "shadow"]
        first = page.inner_text("#result_list tbody tr:first-child th.field-first_seen")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]{3,5}", first), first  # seconds and zone
        page.screenshot(path=str(shots / "console-audit-list.png"), full_page=True)
        assert fits(page), widths(page)
        # Nothing wraps: every cell's text is one line (one client rect per text range).
        lines = page.eval_on_selector_all("#result_list tbody td, #result_list tbody th", """cells => cells.map(c => {
            const range = document.createRange(); range.selectNodeContents(c);
            const tops = [...range.getClientRects()].map(r => r.top);
            return Math.max(...tops) - Math.min(...tops) < 8 ? 1 : 2; })""")
        assert max(lines) == 1, lines
        assert fits(page)
        browser.close()
