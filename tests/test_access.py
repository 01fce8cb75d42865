"""Exemptions and deny lists (EXEMPT, DENY, a policy's exempt/deny, AccessRule) against a
real redis-server: no store call for an exempt or denied request, 403 at every surface,
the audit and the console's counts."""

from __future__ import annotations

import asyncio
import datetime
import json
import queue
import subprocess
import sys
import threading
import time

import pytest
from django.test import AsyncClient, Client

from django_gcra import adecide, decide
from django_gcra.decision import outcome_of
from tests.support.surfaces_helpers import configure
from tests.test_overrides import BROWSER_GCRA, ROOT, run

pytestmark = [pytest.mark.urls("tests.surfaces_urls"), pytest.mark.redis]

ROUTES = [{"path": r"^/api/", "policy": "login"}]
QUOTA_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit",
                 "Retry-After")


def store_commands(client) -> dict[str, int]:
    """Every command the redis-server has run, by name (INFO itself left out)."""
    stats = client.info("commandstats")
    return {name: row["calls"] for name, row in stats.items() if name != "cmdstat_info"}


@pytest.fixture
def rules(real_redis, gcra_settings, settings):
    """Surfaces policies plus rules: ``rules(EXEMPT=[...], DENY=[...])``. The override
    refresh is slowed down, so its version-stamp read (once per OVERRIDE_REFRESH, whatever
    the traffic) cannot land among the commands a test counts."""
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django_gcra.middleware.RateLimitMiddleware"]
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "5/m", "user": "5/m", "uploads": "5/m"}}

    def apply(**extra):
        configure(gcra_settings, ROUTES=ROUTES, OVERRIDE_REFRESH=3600, OVERRIDE_TTL=3600, **extra)
        from django_gcra.engine import current

        Client().get("/plain/")  # imports the URLconf: its inline policies reload the rows once, now
        decide("login", {"ip": "192.0.2.200"})  # loads the script and the rows: then nothing is left to load
        assert current().overrides.join(5)  # (the rows load in the background)

    return apply


# --- decide() -----------------------------------------------------------------------------

def test_a_flood_from_a_denied_network_costs_the_store_nothing(rules, real_redis):
    rules(DENY=[{"ip": ["203.0.113.0/24", "2001:db8:bad::/48"]}])
    client = Client()
    before = store_commands(real_redis)
    decisions = [decide("login", {"ip": f"203.0.113.{i % 256}"}) for i in range(9_000)]
    decisions += [asyncio.run(adecide("login", {"ip": f"2001:db8:bad:{i:x}::/64"})) for i in range(500)]
    responses = [client.get("/api/ping/", REMOTE_ADDR=f"203.0.113.{i % 256}") for i in range(500)]
    assert store_commands(real_redis) == before  # not one command for 10,000 decisions
    assert all(d.blocked and not d.allowed and outcome_of(d) == "blocked" for d in decisions)
    assert {r.status_code for r in responses} == {403}
    assert decide("login", {"ip": "192.0.2.7"}).allowed  # another network is limited as before
    assert store_commands(real_redis) != before


def test_exempt_makes_no_store_call_and_sends_no_quota_header(rules, real_redis):
    rules(EXEMPT=[{"ip": ["10.0.0.0/8"]}])
    before = store_commands(real_redis)
    decision = decide("login", {"ip": "10.9.8.7"})
    assert decision.allowed and decision.exempt and not decision.blocked and decision.limits == ()
    assert decision.headers() == {}
    responses = [Client().get("/api/ping/", REMOTE_ADDR="10.1.2.3") for _ in range(10)]  # burst is 2
    assert [r.status_code for r in responses] == [200] * 10
    assert not any(name in r for r in responses for name in QUOTA_HEADERS)
    assert store_commands(real_redis) == before
    limited = Client().get("/api/ping/", REMOTE_ADDR="192.0.2.9")
    assert limited.status_code == 200 and "X-RateLimit-Limit" in limited


def test_deny_is_checked_before_exempt(rules):
    rules(EXEMPT=[{"ip": ["10.0.0.0/8"]}], DENY=[{"ip": ["10.6.6.6"]}])
    assert decide("login", {"ip": "10.6.6.6"}).blocked
    assert decide("login", {"ip": "10.6.6.7"}).exempt


def test_ipv6_and_ipv4_mapped_addresses_match_cidr_rules(rules):
    rules(DENY=[{"ip": ["10.0.0.0/8", "2001:db8::/32", "::ffff:192.168.0.0/112", "2001:db8:1:2::5"]}])
    for value in ("10.1.2.3", "::ffff:10.1.2.3", "2001:db8:ffff::1", "2001:db8:1:2::/64", "192.168.4.4",
                  "2001:db8:1:2::5"):
        assert decide("login", {"ip": value}).blocked, value
    for value in ("11.0.0.1", "::ffff:11.0.0.1", "2001:db9::1", "2001:db9::/64", "unknown", "not an address"):
        assert not decide("login", {"ip": value}).blocked, value


def test_an_ipv6_group_matches_only_a_network_that_holds_all_of_it(rules):
    """decide() receives the ip descriptor's /64 group from the surfaces: a /64 (or wider) rule
    holds every address of it; a narrower rule (one address) does not, so it matches only the
    client's own address, which the surfaces check."""
    rules(EXEMPT=[{"ip": ["2001:db8:0:1::/64", "2001:db8:0:2::7/128"]}])
    assert decide("login", {"ip": "2001:db8:0:1::/64"}).exempt
    assert not decide("login", {"ip": "2001:db8:0:2::/64"}).exempt  # the /128 rule does not exempt its group
    assert decide("login", {"ip": "2001:db8:0:2::7"}).exempt  # the address itself
    own = Client().get("/api/ping/", REMOTE_ADDR="2001:db8:0:2::7")
    other = Client().get("/api/ping/", REMOTE_ADDR="2001:db8:0:2::8")  # same /64 group, not exempt
    assert "X-RateLimit-Limit" not in own and "X-RateLimit-Limit" in other


def test_descriptor_rules_and_per_policy_rules_add_to_the_global_ones(rules):
    rules(EXEMPT=[{"tenant": ["internal"]}], DENY=[{"tenant": ["leaked"]}],
          POLICIES={"api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "5/m", "burst": 1}],
                            "exempt": [{"user": ["1", 2]}], "deny": [{"tenant": ["acme"]}]},
                    "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 2}]}})
    assert decide("api", {"tenant": "internal", "user": None}).exempt  # global
    assert decide("api", {"tenant": "leaked", "user": None}).blocked
    assert decide("api", {"tenant": "acme", "user": None}).blocked  # the policy's own
    assert decide("api", {"tenant": "t", "user": "1"}).exempt
    assert decide("api", {"tenant": "t", "user": 2}).exempt
    assert decide("login", {"ip": "192.0.2.1", "tenant": "acme"}).allowed  # api's rules only on api
    assert decide("login", {"ip": "192.0.2.1", "tenant": "leaked"}).blocked  # global rules everywhere
    assert not decide("login", {"ip": "192.0.2.1"}).blocked  # no tenant passed: nothing to match


def test_a_call_in_error_raises_whether_or_not_a_rule_matches(rules):
    rules(DENY=[{"ip": ["203.0.113.0/24"]}])
    with pytest.raises(ValueError, match="cost"):
        decide("login", {"ip": "203.0.113.1"}, cost=-1)
    with pytest.raises(KeyError, match="needs descriptor 'ip'"):
        decide("login", {"tenant": "x"})
    with pytest.raises(KeyError, match="unknown rate-limit policy"):
        decide("nope", {"ip": "203.0.113.1"})
    with pytest.raises(TypeError, match="descriptor 'ip'"):
        decide("login", {"ip": 1.5})


# --- the surfaces -------------------------------------------------------------------------

def assert_forbidden(response):
    assert response.status_code == 403
    assert response.json() == {"error": "forbidden", "message": "Access to this resource is denied."}
    assert not any(name in response for name in QUOTA_HEADERS)


@pytest.mark.parametrize("url", ["/api/ping/", "/api/aping/", "/inline/", "/ainline/", "/report/",
                                 "/drf/anon/", "/drf/policy/"])
def test_denied_requests_get_403_at_every_surface(rules, url):
    rules(DENY=[{"ip": ["203.0.113.0/24"]}])
    for _ in range(3):
        assert_forbidden(Client().get(url, REMOTE_ADDR="203.0.113.50", HTTP_X_TENANT="acme"))
    assert Client().get(url, REMOTE_ADDR="192.0.2.3", HTTP_X_TENANT="acme").status_code == 200


async def test_denied_requests_get_403_through_the_async_client(rules):
    await asyncio.to_thread(rules, DENY=[{"ip": ["127.0.0.0/8"]}])  # the AsyncClient's address
    for url in ("/api/aping/", "/ainline/", "/areport/"):
        assert_forbidden(await AsyncClient().get(url))


def test_problem_json_when_asked_for(rules):
    rules(DENY=[{"ip": ["203.0.113.0/24"]}])
    response = Client().get("/inline/", REMOTE_ADDR="203.0.113.50", HTTP_ACCEPT="application/problem+json")
    assert response.status_code == 403 and response["Content-Type"] == "application/problem+json"
    assert response.json()["status"] == 403 and "Retry-After" not in response


def test_callable_rules_apply_at_the_surfaces(rules):
    rules(EXEMPT=["tests.support.access_rules.is_probe"], DENY=["tests.support.access_rules.is_banned"])
    probes = [Client().get("/inline/", REMOTE_ADDR="192.0.2.4", HTTP_X_PROBE="yes") for _ in range(5)]
    assert [r.status_code for r in probes] == [200] * 5 and "X-RateLimit-Limit" not in probes[0]
    assert_forbidden(Client().get("/inline/", REMOTE_ADDR="192.0.2.4", HTTP_X_BANNED="yes"))  # an async rule
    assert_forbidden(Client().get("/drf/anon/", REMOTE_ADDR="192.0.2.4", HTTP_X_BANNED="yes", HTTP_X_PROBE="yes"))
    assert not decide("login", {"ip": "192.0.2.4"}).exempt  # no request: callables do not apply


async def test_callable_rules_apply_at_async_surfaces(rules):
    await asyncio.to_thread(rules, EXEMPT=["tests.support.access_rules.is_probe"],
                            DENY=["tests.support.access_rules.is_banned"])
    assert_forbidden(await AsyncClient().get("/ainline/", headers={"X-Banned": "yes"}))
    probe = await AsyncClient().get("/api/aping/", headers={"X-Probe": "yes"})
    assert probe.status_code == 200 and "X-RateLimit-Limit" not in probe


async def test_async_surfaces_read_a_rule_s_descriptor_from_the_request(rules):
    await asyncio.to_thread(rules, DENY=[{"tenant": ["leaked"]}])
    assert_forbidden(await AsyncClient().get("/ainline/", headers={"X-Tenant": "leaked"}))
    assert (await AsyncClient().get("/ainline/", headers={"X-Tenant": "fine"})).status_code == 200


def test_without_rules_decide_never_looks_for_them(rules, monkeypatch):
    rules()

    def looked(*args, **kwargs):
        raise AssertionError("decide() looked for rules while none is configured")

    monkeypatch.setattr("django_gcra.engine.check", looked)
    monkeypatch.setattr("django_gcra.engine.acheck", looked)
    assert decide("login", {"ip": "192.0.2.10"}).allowed
    assert asyncio.run(adecide("login", {"ip": "192.0.2.10"})).allowed
    assert Client().get("/api/ping/", REMOTE_ADDR="192.0.2.11").status_code == 200


def test_a_global_rule_on_a_descriptor_the_policy_does_not_use_is_read_from_the_request(rules):
    rules(DENY=[{"tenant": ["leaked"]}], EXEMPT=[{"ip": ["10.0.0.0/8"]}])
    assert_forbidden(Client().get("/inline/", REMOTE_ADDR="192.0.2.5", HTTP_X_TENANT="leaked"))  # keyed by ip
    assert Client().get("/inline/", REMOTE_ADDR="192.0.2.5", HTTP_X_TENANT="ok").status_code == 200
    exempt = Client().get("/api/ping/", REMOTE_ADDR="::ffff:10.1.2.3")  # IPv4-mapped, at the surface
    assert exempt.status_code == 200 and "X-RateLimit-Limit" not in exempt


def test_drf_exempt_and_forbidden(rules):
    rules(EXEMPT=[{"ip": ["10.0.0.0/8"]}], DENY=[{"ip": ["203.0.113.0/24"]}])
    responses = [Client().get("/drf/anon/", REMOTE_ADDR="10.0.0.1") for _ in range(8)]  # 5/m otherwise
    assert [r.status_code for r in responses] == [200] * 8 and "X-RateLimit-Limit" not in responses[0]
    assert_forbidden(Client().get("/drf/both/", REMOTE_ADDR="203.0.113.9", HTTP_X_TENANT="acme"))


# --- audit and counts ---------------------------------------------------------------------

def test_blocked_decisions_are_audited_coalesced_and_counted(rules, monkeypatch):
    from django_gcra import audit, tally
    from django_gcra.signals import observers

    rules(DENY=[{"ip": ["203.0.113.0/24"]}], EXEMPT=[{"tenant": ["internal"]}])
    recorder, counts = audit.AuditRecorder(autostart=False), tally.Tally(autostart=False)
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    observers[observers.index(tally.on_decision)] = counts.observe  # (the tally's bound method)
    try:
        for _ in range(1000):
            decide("login", {"ip": "203.0.113.1"})
        for _ in range(3):
            decide("login", {"ip": "192.0.2.1", "tenant": "internal"})
    finally:
        observers[observers.index(counts.observe)] = tally.on_decision
    assert len(recorder.buffer) == 1  # 1,000 refusals of one caller: one entry, as for denials
    [(bucket, entry)] = recorder.buffer.items()
    assert bucket == ("login", "", "ip=203.0.113.1", "blocked") and entry.count == 1000
    totals = counts.decision_totals()
    assert totals == {("login", "", "blocked"): 1000, ("login", "", "exempt"): 3}  # never counted as allowed


@pytest.mark.django_db
def test_blocked_rows_reach_the_audit_table(rules):
    from django_gcra.audit import recorder
    from django_gcra.models import AuditEvent

    rules(DENY=[{"ip": ["203.0.113.0/24"]}])
    with recorder.lock:
        recorder.buffer.clear()
    for _ in range(50):
        Client().get("/api/ping/", REMOTE_ADDR="203.0.113.77")
    assert recorder.flush() == 1
    row = AuditEvent.objects.get()
    assert (row.outcome, row.policy, row.count, row.key, row.path) == ("blocked", "login", 50, "ip=203.0.113.77",
                                                                      "/api/ping/")


@pytest.mark.skipif(not __import__("django_gcra.metrics", fromlist=["AVAILABLE"]).AVAILABLE,
                    reason="prometheus_client is not installed")
def test_exempt_is_counted_in_the_metrics_as_exempt(rules):
    import prometheus_client

    from django_gcra.metrics import export

    rules(EXEMPT=[{"ip": ["10.0.0.0/8"]}])

    def value(outcome):
        export()
        return prometheus_client.REGISTRY.get_sample_value(
            "django_gcra_decisions_total", {"policy": "login", "limit": "", "outcome": outcome}) or 0

    exempt, allowed = value("exempt"), value("allowed")
    for _ in range(7):
        decide("login", {"ip": "10.2.3.4"})
    assert value("exempt") == exempt + 7
    assert value("allowed") == allowed


# --- AccessRule rows: loaded with the overrides, applied without a query ------------------

@pytest.fixture
def save_rule(django_capture_on_commit_callbacks):
    from django_gcra.engine import current
    from django_gcra.models import AccessRule

    def create(**fields):
        current().overrides.join(5)
        with django_capture_on_commit_callbacks(execute=True):
            return AccessRule.objects.create(**fields)

    return create


@pytest.mark.django_db(transaction=True)
def test_access_rules_apply_without_a_query(rules, save_rule, django_assert_num_queries):
    rules()
    save_rule(kind="deny", descriptor="ip", value="198.51.100.0/24", reason="abuse")
    save_rule(kind="exempt", policy="login", descriptor="ip", value="2001:db8::/32")
    save_rule(kind="exempt", policy="other", descriptor="ip", value="192.0.2.0/24")
    save_rule(kind="deny", descriptor="ip", value="192.0.2.66", enabled=False)
    with django_assert_num_queries(0):
        assert decide("login", {"ip": "198.51.100.3"}).blocked
        assert decide("login", {"ip": "2001:db8:5::/64"}).exempt
        assert decide("login", {"ip": "192.0.2.66"}).allowed  # a rule of another policy; a disabled one
        assert not decide("login", {"ip": "192.0.2.66"}).exempt
        assert_forbidden(Client().get("/api/ping/", REMOTE_ADDR="198.51.100.200"))


@pytest.mark.django_db(transaction=True)
def test_an_expired_rule_stops_applying_without_a_save(rules, save_rule):
    from django.utils import timezone

    rules()
    soon = timezone.now() + datetime.timedelta(seconds=1.5)
    save_rule(kind="deny", descriptor="ip", value="198.51.100.7", expires_at=soon)
    assert decide("login", {"ip": "198.51.100.7"}).blocked
    deadline = time.monotonic() + 10
    while decide("login", {"ip": "198.51.100.7"}).blocked and time.monotonic() < deadline:
        time.sleep(0.05)
    assert timezone.now() >= soon
    assert not decide("login", {"ip": "198.51.100.7"}).blocked


class Watcher:
    """A second process (tests/support/plane_procs.py) printing the outcome of tenant acme's
    decisions whenever it changes."""

    def __init__(self, config: dict, seconds: float = 30.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.plane_procs", json.dumps(config),
                                      "watch-access", str(seconds)], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def wait_for(self, outcome: str, timeout: float = 15.0) -> float:
        """The Unix time at which the watcher first saw ``outcome``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                parts = self.lines.get(timeout=0.1).split()
            except queue.Empty:
                continue
            if parts[:2] == ["outcome", outcome]:
                return float(parts[2])
        self.proc.kill()
        raise AssertionError(f"the second process never saw {outcome}: {self.proc.stderr.read()[-3000:]}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.mark.slow
def test_an_access_rule_saved_in_one_process_is_in_force_in_another_within_about_a_second(tmp_path, redis_server):
    from tests.support.databases import scratch_database

    redis_server.client().flushall()
    with scratch_database(tmp_path) as db:  # SQLite, or PostgreSQL with DATABASE_URL
        config = {"db": db, "redis": redis_server.url, "gcra": BROWSER_GCRA}
        run(config, "migrate")
        watcher = Watcher(config)
        try:
            watcher.wait_for("allowed")
            committed = run(config, "rule-save", json.dumps({"kind": "deny", "descriptor": "tenant", "value": "acme"}))
            assert watcher.wait_for("blocked") - committed < 2.0
            committed = run(config, "rule-save", json.dumps({"kind": "exempt", "policy": "browser",
                                                             "descriptor": "tenant", "value": "acme"}))
            assert watcher.wait_for("exempt") - committed < 2.0
            done = subprocess.run([sys.executable, "-m", "tests.support.plane_procs", json.dumps(config), "rule-save",
                                   json.dumps({"kind": "deny", "descriptor": "tenant", "value": "acme",
                                               "expires_in": 3.0})], cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr[-3000:]
            expires = float(done.stdout.split("expires ")[1].split()[0])
            committed = float(done.stdout.split("committed ")[1].split()[0])
            assert watcher.wait_for("blocked") - committed < 2.0
            lifted = watcher.wait_for("allowed")  # expired: no save needed
            assert expires <= lifted < expires + 0.5
        finally:
            watcher.stop()
