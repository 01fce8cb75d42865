"""The day-one toolkit (issue 40): ``ENABLED``, ``django_gcra.testing`` (the clock, the reset,
``assert_rate_limited``) and unblocking a caller (``reset()``, ``gcra_reset``, the admin's
Reset), each against a real redis-server."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from django_gcra import adecide, areset, decide, reset
from django_gcra.checks import check_settings
from django_gcra.leases import lease_stats
from django_gcra.models import AuditEvent
from django_gcra.testing import assert_rate_limited, limiter_clock, reset_limits
from tests.support.surfaces_helpers import configure

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.redis

RATE = {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/s", "burst": 3}]}
LEASED = {"limits": [{"name": "ip", "key": ["ip"], "rate": "10/m", "burst": 10}], "lease": {"size": 5, "ttl": 60}}
SLOTS = {"limits": [{"name": "ip", "key": ["ip"], "rate": "10/m", "burst": 10}],
         "concurrency": [{"name": "flight", "key": ["ip"], "max": 1, "ttl": 60}]}


def commands(client) -> int:
    """Every command the server has run (INFO itself left out)."""
    return sum(v["calls"] for k, v in client.info("commandstats").items() if k != "cmdstat_info")


def limiter_keys(client) -> list[bytes]:
    return sorted(client.scan_iter(match="rl:*"))


# -- ENABLED ---------------------------------------------------------------------------


@pytest.mark.urls("tests.surfaces_urls")
def test_disabled_makes_no_store_call_and_no_surface_answers_429(real_redis, gcra_settings, settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django_gcra.middleware.RateLimitMiddleware"]
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "1/m"}}
    configure(gcra_settings, ENABLED=False, ROUTES=[{"path": "^/plain/", "policy": "login"}])
    client = Client()
    before = commands(real_redis)
    # tight/: @ratelimit 1/s burst 1; drf/anon/: DRF's anon 1/m; plain/: the middleware, 2 per 5/m.
    for path in ("/tight/", "/drf/anon/", "/plain/", "/ainline/", "/drf/policy/"):
        for _ in range(5):
            response = client.get(path)
            assert response.status_code == 200, path
            assert "X-RateLimit-Remaining" not in response
    decision = decide("login", {"ip": "1.2.3.4"}, cost=50)
    assert decision.allowed and decision.disabled and decision.policy == "login" and decision.cost == 50
    assert commands(real_redis) == before
    assert limiter_keys(real_redis) == []
    with pytest.raises(KeyError, match="nope"):
        decide("nope", {})
    with pytest.raises(ValueError):
        decide("login", {"ip": "x"}, cost=-1)


async def test_disabled_adecide_makes_no_store_call(real_redis, gcra_settings):
    gcra_settings(ENABLED=False, POLICIES={"p": RATE, "slots": SLOTS})
    before = commands(real_redis)
    decisions = [await adecide("p", {"ip": "a"}) for _ in range(10)]
    held = [await adecide("slots", {"ip": "a"}) for _ in range(3)]  # max 1 in flight: never full
    assert all(d.allowed and d.disabled and d.slots is None for d in decisions + held)
    assert commands(real_redis) == before


def test_disabled_decisions_are_not_audited(real_redis, gcra_settings):
    from django_gcra import audit

    gcra_settings(ENABLED=False, POLICIES={"p": RATE})
    with audit.recorder.lock:
        audit.recorder.buffer.clear()
    for _ in range(10):
        decide("p", {"ip": "a"})
    assert audit.recorder.buffer == {}


def test_the_enabled_checks(real_redis, gcra_settings, settings):
    gcra_settings(ENABLED="no", POLICIES={"p": RATE})
    assert [m.id for m in check_settings()] == ["django_gcra.E110"]
    gcra_settings(ENABLED=False, POLICIES={"p": RATE})
    settings.DEBUG = False
    assert [m.id for m in check_settings()] == ["django_gcra.W110"]
    settings.DEBUG = True
    assert check_settings() == []
    gcra_settings(POLICIES={"p": RATE})
    settings.DEBUG = False
    assert check_settings() == []


# -- limiter_clock ---------------------------------------------------------------------


def test_the_clock_allows_a_denied_key_after_exactly_its_retry_after(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": RATE})
    with limiter_clock(start=1_700_000_000) as clock:
        decisions = [decide("p", {"ip": "a"}) for _ in range(4)]
        assert [d.allowed for d in decisions] == [True, True, True, False]
        assert decisions[-1].retry_after == 0.2  # 5/s: one unit every 200 ms, exactly
        assert clock.advance(0.199999) == 1_700_000_000.199999
        assert not decide("p", {"ip": "a"}).allowed
        clock.advance(0.000001)
        allowed = decide("p", {"ip": "a"})
        assert allowed.allowed and allowed.remaining == 0
        # The stored TAT is the clock's: start + 4 units of 200 ms (the burst's tolerance ahead).
        [key] = limiter_keys(real_redis)
        assert int(real_redis.get(key)) == 1_700_000_000_000_000 + 4 * 200_000
        clock.advance(3600)
        assert decide("p", {"ip": "a"}).remaining == 2  # an hour later: rested
    # Outside it, time comes from the server again (real time, now: the key is long rested).
    assert decide("p", {"ip": "a"}).remaining == 2


def test_a_settle_under_the_clock_reads_the_clock(real_redis, gcra_settings):
    """A refund is computed at the clock's time, as its decision was: the key's TAT moves
    back by exactly the units refunded (at real time, years after the clock's start, the
    refund could not be computed from the decision's TAT)."""
    gcra_settings(POLICIES={"p": RATE})
    with limiter_clock(start=1_700_000_000):
        decision = decide("p", {"ip": "s"}, cost=3)
        assert decision.allowed and decision.remaining == 0
        assert decision.settle(1)  # two units of 200 ms back
        [key] = limiter_keys(real_redis)
        assert int(real_redis.get(key)) == 1_700_000_000_000_000 + 1 * 200_000
        assert decide("p", {"ip": "s"}, cost=0).remaining == 2


def test_the_clock_stands_still_until_advanced(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": {"limits": [{"name": "ip", "key": ["ip"], "rate": "100/s", "burst": 1}]}})
    with limiter_clock() as clock:
        assert decide("p", {"ip": "a"}).allowed
        import time

        time.sleep(0.05)  # five intervals of real time: the clock did not move, nor did the key expire
        denied = decide("p", {"ip": "a"})
        assert not denied.allowed and denied.retry_after == 0.01
        clock.advance(0.01)
        assert decide("p", {"ip": "a"}).allowed


async def test_the_clock_drives_async_decisions(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": RATE})
    with limiter_clock(start=1_800_000_000) as clock:
        decisions = [await adecide("p", {"ip": "b"}) for _ in range(4)]
        assert [d.allowed for d in decisions] == [True, True, True, False]
        assert decisions[-1].retry_after == 0.2
        clock.advance(decisions[-1].retry_after)
        assert (await adecide("p", {"ip": "b"})).allowed
        assert not (await adecide("p", {"ip": "b"})).allowed


def test_the_clock_bypasses_leases_and_drives_concurrency_slots(real_redis, gcra_settings):
    gcra_settings(POLICIES={"leased": LEASED, "slots": SLOTS})
    with limiter_clock() as clock:
        decisions = [decide("leased", {"ip": "a"}) for _ in range(11)]
        assert [d.allowed for d in decisions] == [True] * 10 + [False]
        assert decisions[-1].retry_after == 6.0
        assert lease_stats().get("leased") is None  # every decision went to the store
        held = decide("slots", {"ip": "a"})
        assert held.allowed and not decide("slots", {"ip": "a"}).allowed  # max 1 in flight
        clock.advance(60.001)  # the holder stopped extending 60 s ago (by the clock): its slot expired
        again = decide("slots", {"ip": "a"})
        assert again.allowed
        again.release()
        held.release()


def test_the_clock_as_a_decorator(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": RATE})
    clock = limiter_clock(start=1_700_000_000)

    @clock
    def scenario():
        assert [decide("p", {"ip": "c"}).allowed for _ in range(4)] == [True, True, True, False]
        clock.advance(0.2)
        return decide("p", {"ip": "c"}).allowed

    assert scenario() is True
    with pytest.raises(RuntimeError, match="not active"):
        clock.advance(1)


def test_the_clock_refuses_bad_values_and_nesting(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": RATE})
    with pytest.raises(ValueError):
        limiter_clock(start=float("nan"))
    with limiter_clock() as clock:
        with pytest.raises(ValueError):
            clock.advance(-1)
        with pytest.raises(RuntimeError, match="already active"):
            with limiter_clock():
                pass


def test_the_clock_refuses_to_start_outside_a_test_environment():
    """A process that did not set up Django's test environment (production) cannot start
    it; nor does the package import ``django_gcra.testing`` itself."""
    code = textwrap.dedent("""
        import sys
        import django
        django.setup()
        import django_gcra, django_gcra.admin, django_gcra.checks, django_gcra.middleware, django_gcra.throttling
        assert "django_gcra.testing" not in sys.modules
        from django_gcra.testing import limiter_clock
        try:
            limiter_clock().__enter__()
        except RuntimeError as exc:
            print("refused:", exc)
        else:
            print("started")
    """)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: limiter_clock() runs only in a test environment"), result.stdout


# -- reset_limits, assert_rate_limited ---------------------------------------------------


def test_reset_limits_clears_the_prefix_and_this_process_state(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": RATE, "leased": LEASED})
    for _ in range(4):
        decide("p", {"ip": "a"})
    for _ in range(6):
        decide("leased", {"ip": "a"})
    real_redis.set("other:key", "1")
    assert lease_stats()["leased"].held_units > 0
    assert reset_limits() == 2
    assert limiter_keys(real_redis) == [] and real_redis.get("other:key") == b"1"
    assert lease_stats() == {}
    assert decide("p", {"ip": "a"}).remaining == 2
    assert decide("leased", {"ip": "a"}).remaining == 9


@pytest.mark.urls("tests.surfaces_urls")
def test_assert_rate_limited(real_redis, gcra_settings):
    configure(gcra_settings)
    client = Client()
    response = assert_rate_limited(lambda: client.get("/inline/"), after=2)  # 5/m burst 2
    assert response.status_code == 429
    reset_limits()
    with pytest.raises(AssertionError, match="call 2 answered 200; expected 429 after 1 call"):
        assert_rate_limited(lambda: client.get("/inline/"), after=1)
    reset_limits()
    with pytest.raises(AssertionError, match="call 3 of 4 was rate limited"):
        assert_rate_limited(lambda: client.get("/inline/"), after=3)


# -- reset() -------------------------------------------------------------------------------


def test_reset_clears_rate_and_concurrency_state(real_redis, gcra_settings):
    gcra_settings(POLICIES={"slots": SLOTS, "p": RATE})
    held = decide("slots", {"ip": "a"})
    assert not decide("slots", {"ip": "a"}).allowed
    for _ in range(4):
        decide("p", {"ip": "z"})
    assert reset("slots", {"ip": "a"}) == 2  # the rate key and the slots' key
    fresh = decide("slots", {"ip": "a"})
    assert fresh.allowed and fresh.limits[0].remaining == 9
    fresh.release()
    held.release()
    assert not decide("p", {"ip": "z"}).allowed  # another policy's key is untouched
    assert reset("p", {"ip": "z"}, limit="ip") == 1
    assert reset("p", {"ip": "z"}) == 0  # nothing left to clear
    assert decide("p", {"ip": "z"}).allowed


def test_reset_drops_this_process_lease(real_redis, gcra_settings):
    gcra_settings(POLICIES={"leased": LEASED})
    for _ in range(8):
        assert decide("leased", {"ip": "a"}).allowed
    assert lease_stats()["leased"].held_units > 0
    assert reset("leased", {"ip": "a"}) == 1
    assert lease_stats()["leased"].held_units == 0
    assert decide("leased", {"ip": "a"}).remaining == 9  # the full burst, less this request


async def test_areset(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": RATE})
    for _ in range(4):
        await adecide("p", {"ip": "a"})
    assert await areset("p", {"ip": "a"}) == 1
    assert (await adecide("p", {"ip": "a"})).remaining == 2


def test_reset_refuses_what_it_cannot_clear(real_redis, gcra_settings):
    gcra_settings(POLICIES={"slots": SLOTS})
    with pytest.raises(KeyError, match="unknown rate-limit policy 'nope'"):
        reset("nope", {"ip": "a"})
    with pytest.raises(ValueError, match="no limit 'nope'"):
        reset("slots", {"ip": "a"}, limit="nope")
    with pytest.raises(ValueError, match="uses no descriptor 'tenant'"):
        reset("slots", {"tenant": "a"})
    with pytest.raises(ValueError, match="give ip"):
        reset("slots", {})
    with pytest.raises(TypeError):
        reset("slots", {"ip": 1.5})


def test_gcra_reset_command(real_redis, gcra_settings):
    gcra_settings(POLICIES={"slots": SLOTS})
    held = decide("slots", {"ip": "a"})
    out = io.StringIO()
    call_command("gcra_reset", "slots", "ip=a", "--limit", "flight", stdout=out)
    assert out.getvalue().strip() == "cleared 1 key(s) of limit 'flight' of policy 'slots' for ip=a"
    again = decide("slots", {"ip": "a"})  # the slot is free again (held is still held), the rate limit was kept
    assert again.allowed and again.limits[0].remaining == 8
    out = io.StringIO()
    call_command("gcra_reset", "slots", "ip=a", stdout=out)
    assert "cleared 2 key(s) of policy 'slots'" in out.getvalue()
    again.release()
    held.release()
    for args, error in [(("nope", "ip=a"), "unknown rate-limit policy"), (("slots", "ip"), "not name=value"),
                        (("slots", "ip=a", "--limit", "x"), "no limit 'x'")]:
        with pytest.raises(CommandError, match=error):
            call_command("gcra_reset", *args)


# -- the admin's Reset -------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.urls("tests.plane_urls")
def test_admin_reset_needs_the_permission_and_is_audited(real_redis, gcra_settings, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    gcra_settings(POLICIES={"p": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 3}]}})
    for _ in range(4):
        decide("p", {"ip": "1.2.3.4"})
    now = timezone.now()
    AuditEvent.objects.create(time=now, last_time=now, policy="p", limit="ip", outcome="denied", key="ip=1.2.3.4",
                              descriptors={"ip": "1.2.3.4"})
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_auditevent"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer)
    page = client.get("/admin/django_gcra/dashboard/")
    assert page.status_code == 200 and b"gcra-reset" not in page.content
    form = {"policy": "p", "limit": "ip", "key": "ip=1.2.3.4", "csrfmiddlewaretoken": page.cookies["csrftoken"].value}
    assert client.post("/admin/django_gcra/dashboard/reset/", form).status_code == 403
    assert not decide("p", {"ip": "1.2.3.4"}).allowed  # nothing was reset

    operator = User.objects.create_user("operator", password="pw", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_auditevent"),
                                  Permission.objects.get(codename="reset_limit"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    page = client.get("/admin/django_gcra/dashboard/")
    assert b'class="gcra-reset"' in page.content and b'value="ip=1.2.3.4"' in page.content
    assert client.post("/admin/django_gcra/dashboard/reset/", {"policy": "p", "limit": "ip", "key": "ip=1.2.3.4"}
                       ).status_code == 403  # no CSRF token
    form["csrfmiddlewaretoken"] = page.cookies["csrftoken"].value
    response = client.post("/admin/django_gcra/dashboard/reset/", form, follow=True)
    assert response.status_code == 200
    assert "Reset p.ip for ip=1.2.3.4 (1 key(s) cleared)." in [str(m) for m in response.context["messages"]]
    event = AuditEvent.objects.get(outcome=AuditEvent.Outcome.RESET)
    assert (event.policy, event.limit, event.key, event.actor, event.descriptors) == (
        "p", "ip", "ip=1.2.3.4", "operator", {"ip": "1.2.3.4"})
    assert decide("p", {"ip": "1.2.3.4"}).remaining == 2
    assert [row["outcome"] for row in response.context["top"]] == ["denied"]  # the reset row is no limited key
    assert client.get("/admin/django_gcra/dashboard/reset/").status_code == 405


# -- the pytest plugin -------------------------------------------------------------------

PROJECT_SETTINGS = """
SECRET_KEY = "not secret"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_gcra"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": %r}}
DJANGO_GCRA = {"TIMEOUT": 1000, "AUDIT": {"ENABLED": False},
               "POLICIES": {"login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 2}]}}}
"""

PROJECT_TESTS = '''
from django_gcra import decide
from django_gcra.backends import clock


def test_a_fills_the_limit():
    assert [decide("login", {"ip": "1"}).allowed for _ in range(3)] == [True, True, False]


def test_b_asks_for_no_fixture_and_finds_the_state_as_left():
    assert clock.active is None
    assert not decide("login", {"ip": "1"}).allowed


def test_c_gcra_reset_starts_clean(gcra_reset):
    assert decide("login", {"ip": "1"}).remaining == 1


def test_d_gcra_clock(gcra_reset, gcra_clock):
    assert clock.active is not None
    assert [decide("login", {"ip": "1"}).allowed for _ in range(2)] == [True, True]
    denied = decide("login", {"ip": "1"})
    assert not denied.allowed and denied.retry_after == 12.0
    gcra_clock.advance(12)
    assert decide("login", {"ip": "1"}).allowed
'''


def run_project(tmp_path, redis_url, *options):
    (tmp_path / "project_settings.py").write_text(PROJECT_SETTINGS % redis_url)
    (tmp_path / "test_project.py").write_text(PROJECT_TESTS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "DJANGO_SETTINGS_MODULE": "project_settings"}
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, "test_project.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_the_pytest_plugin_in_a_project_that_uses_pytest_django(tmp_path, redis_server, real_redis):
    result = run_project(tmp_path, redis_server.url, "-p", "pytest_django")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout


def test_the_pytest_plugin_offers_nothing_without_pytest_django(tmp_path, redis_server, real_redis):
    result = run_project(tmp_path, redis_server.url, "-p", "no:django", "-k", "gcra_clock")
    assert result.returncode == 1
    assert "fixture 'gcra_reset' not found" in result.stdout


def test_the_testing_page_pytest_example_runs_as_written(tmp_path, redis_server, real_redis):
    """docs/howto/testing.md's pytest file (and the URLconf it tests), in a project of its own."""
    from tests.support.snippets import python_blocks

    blocks = {b.path: b.code for b in python_blocks((ROOT / "docs/howto/testing.md").read_text()) if b.kind == "file"}
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp/__init__.py").write_text("")
    for name in ("myapp/urls.py", "myapp/test_limits_pytest.py"):
        (tmp_path / name).write_text(blocks[name])
    (tmp_path / "project_settings.py").write_text(
        PROJECT_SETTINGS % redis_server.url
        + 'INSTALLED_APPS += ["rest_framework"]\nROOT_URLCONF = "myapp.urls"\nALLOWED_HOSTS = ["testserver"]\n'
        + 'MIDDLEWARE = []\nREST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "3/m"}}\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "DJANGO_SETTINGS_MODULE": "project_settings"}
    env.pop("PYTEST_ADDOPTS", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_django",
                             "myapp/test_limits_pytest.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def test_a_leased_policy_across_a_clock(real_redis, gcra_settings):
    """A leased key's memoized plan decided before, under and after a clock."""
    gcra_settings(POLICIES={"leased": LEASED})
    assert decide("leased", {"ip": "h"}).remaining == 9
    with limiter_clock() as clock:
        assert decide("leased", {"ip": "h"}).remaining == 8
        clock.advance(6)
        assert decide("leased", {"ip": "h"}).remaining == 8
    assert [decide("leased", {"ip": "h"}).allowed for _ in range(6)] == [True] * 6
