"""The admin in a real headless browser: Debian's chromium driven by Playwright against
pytest-django's live server, a real redis-server, and the audit flusher thread.

Missing chromium or Playwright is a failure, not a skip: run scripts/install-system-deps.sh
and pip install -r requirements-dev.txt.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from django_gcra.models import AuditEvent, LimitOverride
from django_gcra.overrides import cache

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {"browser": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "6/m", "burst": 2}]}},
    "AUDIT": {"FLUSH_INTERVAL": 0.2},
}

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


@pytest.fixture
def plane(real_redis, gcra_settings, settings, monkeypatch, django_user_model):
    """A superuser, the policy, and an audit recorder whose thread flushes every 0.2 s."""
    from django_gcra import audit

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    gcra_settings(**GCRA)
    audit.recorder.buffer.clear()
    AuditEvent.objects.all().delete()  # what other tests' flushes may have left outside their transactions
    recorder = audit.AuditRecorder()
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    django_user_model.objects.create_superuser("root", "root@example.com", "s3cret-pw")
    # ORM work happens before Playwright starts: its sync API runs an event loop in this thread.
    LimitOverride.objects.create(policy="browser", limit="tenant", match={"tenant": "trial"}, mode="shadow",
                                 reason="new limit, shadow first")
    yield recorder
    recorder.stop()
    cache.reset()


def get_json(page, url):
    response = page.goto(url)
    return response.status, json.loads(page.inner_text("body")) if response.status == 200 else None


def test_admin_override_changes_the_limited_endpoint_and_the_shadow_report_shows_would_denies(live_server, plane):
    base = live_server.url
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page()
        page.route("**/static/**", lambda route: route.abort())  # the test settings do not serve the admin's CSS
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
        page.fill("#id_limit", "tenant")
        page.fill("#id_match", '{"tenant": "acme"}')
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
