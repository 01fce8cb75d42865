"""django_gcra.ninja: ninja's throttles on GCRA, through Django's test client against a
NinjaAPI mounted in tests/ninja_urls.py, on a real redis-server."""

from __future__ import annotations

import math

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from ninja import NinjaAPI
from ninja.testing import TestClient

from django_gcra.audit import AuditRecorder
from django_gcra.decision import Decision
from django_gcra.models import AuditEvent
from django_gcra.ninja import AnonRateThrottle, AuthRateThrottle, PolicyThrottle, SimpleRateThrottle, install
from tests.support.servers import free_port
from tests.support.surfaces_helpers import assert_quota_headers

pytestmark = [pytest.mark.urls("tests.ninja_urls"), pytest.mark.redis]

POLICIES = {
    "ninja_api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 4}]},
    "ninja_trial": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/h", "burst": 1}], "mode": "shadow"},
    "ninja_fragile": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/h", "burst": 1}], "on_failure": "open"},
    "ninja_strict": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/h", "burst": 1}], "on_failure": "closed"},
    "ninja_slots": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/h"}],
                    "concurrency": [{"name": "busy", "key": ["ip"], "max": 1}]},
}

GCRA = {"POLICIES": POLICIES, "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"}}


@pytest.fixture(autouse=True)
def limits(real_redis, gcra_settings):
    gcra_settings(**GCRA)
    return real_redis


@pytest.fixture
def rec(monkeypatch, db):
    """A recorder without its thread: the test decides when to flush."""
    from django_gcra import audit

    audit.recorder.buffer.clear()
    AuditEvent.objects.all().delete()
    recorder = AuditRecorder(autostart=False)
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    return recorder


def assert_exact_denial(response, limit, burst):
    """The project's 429: every quota header, the JSON body, and Retry-After the decision's
    exact retry-after rounded up."""
    decision = response.wsgi_request.ratelimit
    assert isinstance(decision, Decision) and not decision.allowed
    assert response["Retry-After"] == str(math.ceil(decision.retry_after))
    assert response.json() == {"error": "too_many_requests", "message": response.json()["message"],
                               "retry_after_seconds": int(response["Retry-After"])}
    assert_quota_headers(response, limit=limit, burst=burst, remaining=0, denied=True)
    return decision


def test_anon_throttle_answers_the_projects_429_with_exact_retry_after():
    client = Client()
    first = client.get("/api/anon")
    assert first.status_code == 200 and first.json() == {"ok": True}
    assert_quota_headers(first, limit="anon", burst=2, remaining=1)
    assert client.get("/api/anon").status_code == 200
    denied = client.get("/api/anon")
    decision = assert_exact_denial(denied, "anon", 2)
    assert decision.policy == "ninja.anon" and 29 < decision.retry_after <= 30  # 2/m: one unit every 30 s
    assert Client(REMOTE_ADDR="10.0.0.7").get("/api/anon").status_code == 200  # another client, its own bucket


async def test_async_operation_is_throttled_the_same_way(async_client):
    responses = [await async_client.get("/api/anon-async") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert_quota_headers(responses[0], limit="anon", burst=2, remaining=1)
    denied = responses[2]
    assert denied.json()["error"] == "too_many_requests"
    assert denied["Retry-After"] == str(denied.json()["retry_after_seconds"]) and int(denied["Retry-After"]) >= 29


@pytest.mark.django_db
def test_anon_throttle_skips_authenticated_requests_and_user_throttle_keys_by_pk():
    ann = Client()
    ann.force_login(User.objects.create_user("ann"))
    # /both: AnonRateThrottle("5/m") (ninja's anon: requests without request.auth, so every one here)
    # and UserRateThrottle("1/m") by pk: the user limit binds at the second request.
    assert ann.get("/api/both").status_code == 200
    denied = ann.get("/api/both")
    assert_exact_denial(denied, "user", 1)
    bob = Client()
    bob.force_login(User.objects.create_user("bob"))
    assert bob.get("/api/both").status_code == 200  # his own pk, his own bucket


def test_without_install_a_denial_is_the_projects_429_too():
    """A NinjaAPI nobody called install() on: its first denial by a throttle here gives it
    the project's handler, so the 429 has the JSON body and the quota headers (its allowed
    responses carry none: ninja builds its views' decorators up front)."""
    client = Client()
    assert [client.get("/plain/plain").status_code for _ in range(2)] == [200, 200]
    denied = client.get("/plain/plain")
    assert denied["Retry-After"] == str(math.ceil(denied.wsgi_request.ratelimit.retry_after))
    assert_exact_denial(denied, "anon", 2)
    assert "X-RateLimit-Limit" not in Client(REMOTE_ADDR="10.9.9.9").get("/plain/plain")


def test_policy_throttle_decides_the_configured_policy_with_its_cost():
    client = Client(HTTP_X_TENANT="acme")
    first = client.get("/api/tenants/search")
    assert first.status_code == 200
    assert_quota_headers(first, limit="tenant", burst=4, remaining=2)  # cost 2 of a burst of 4
    assert client.get("/api/tenants/search").status_code == 200
    denied = client.get("/api/tenants/search")
    decision = assert_exact_denial(denied, "tenant", 4)
    assert decision.policy == "ninja_api" and decision.cost == 2
    assert Client(HTTP_X_TENANT="other").get("/api/tenants/search").status_code == 200


@pytest.mark.django_db
def test_shadow_policy_never_denies_and_audits_the_would_deny(rec):
    client = Client()
    responses = [client.get("/api/tenants/trial", HTTP_X_TENANT="t") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert all(r.wsgi_request.ratelimit.shadow for r in responses[1:])
    assert "X-RateLimit-Limit" not in responses[1]  # a shadow limit is never advertised
    rec.flush()
    rows = list(AuditEvent.objects.filter(policy="ninja_trial"))
    assert [row.outcome for row in rows] == ["shadow_denied"] and rows[0].limit == "ip"


def test_unreachable_store_fails_open_or_closed_as_the_policy_says(settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    client = Client(HTTP_X_TENANT="t")
    opened = [client.get("/api/tenants/fragile") for _ in range(3)]
    assert [r.status_code for r in opened] == [200, 200, 200]
    assert all(r.wsgi_request.ratelimit.fallback for r in opened)
    closed = client.get("/api/tenants/strict")
    assert closed.status_code == 503 and closed.json()["error"] == "service_unavailable"
    assert closed["Retry-After"] == str(closed.json()["retry_after_seconds"])


def test_denied_view_setting_answers_ninja_denials_too(gcra_settings):
    gcra_settings(**GCRA, DENIED_VIEW="tests.ninja_urls.teapot")
    client = Client()
    [client.get("/api/anon") for _ in range(2)]
    denied = client.get("/api/anon")
    assert denied.status_code == 418 and denied["Retry-After"] == str(math.ceil(denied.wsgi_request.ratelimit.retry_after))
    assert denied["X-RateLimit-Remaining"] == "0"


def test_ninja_rate_strings_and_constructor_are_kept():
    assert AnonRateThrottle("10_000/7d").parse_rate("10_000/7d") == (10000, 7 * 86400)
    throttle = AnonRateThrottle("100/10s")
    assert (throttle.num_requests, throttle.duration) == (100, 10)
    assert AuthRateThrottle().rate == "10000/day"  # ninja's default rates by scope
    assert AnonRateThrottle("1/s").get_cache_key(TestClient(NinjaAPI())._build_request(
        "GET", "/", {}, {"META": {"REMOTE_ADDR": "8.8.8.8"}})) == "throttle_anon_8.8.8.8"


def test_zero_rate_refuses_everything_with_no_wait():
    api = install(NinjaAPI(urls_namespace="zero"))

    @api.get("/z", throttle=AnonRateThrottle("0/m"))
    def z(request):
        return "ok"

    response = TestClient(api).get("/z")
    assert response.status_code == 429 and "Retry-After" not in response.headers


def test_a_subclass_keys_by_its_own_cache_key():
    class PerPath(SimpleRateThrottle):
        scope = "per_path"

        def get_cache_key(self, request):
            return f"path:{request.path}"

    api = install(NinjaAPI(urls_namespace="per_path", throttle=PerPath("1/h")))

    @api.get("/a")
    def a(request):
        return "a"

    @api.get("/b")
    def b(request):
        return "b"

    client = TestClient(api)
    assert [client.get("/a").status_code, client.get("/a").status_code, client.get("/b").status_code] == [200, 429, 200]


def test_policy_throttle_refuses_bad_arguments_and_concurrency_policies():
    with pytest.raises(ImproperlyConfigured):
        PolicyThrottle("")
    with pytest.raises(ImproperlyConfigured):
        PolicyThrottle("ninja_api", cost=-1)
    api = NinjaAPI(urls_namespace="slots")

    @api.get("/s", throttle=PolicyThrottle("ninja_slots"))
    def s(request):
        return "s"

    with pytest.raises(ImproperlyConfigured, match="concurrency"):
        TestClient(api).get("/s")


def test_github_headers_on_ninja_responses(gcra_settings):
    gcra_settings(**GCRA, HEADERS="github")
    client = Client()
    first = client.get("/api/anon")
    assert (first["X-RateLimit-Limit"], first["X-RateLimit-Remaining"], first["X-RateLimit-Used"],
            first["X-RateLimit-Resource"]) == ("2", "1", "1", "ninja.anon")
    assert "RateLimit-Policy" not in first
    client.get("/api/anon")
    denied = client.get("/api/anon")
    assert (denied.status_code, denied["X-RateLimit-Remaining"], denied["X-RateLimit-Used"]) == (429, "0", "2")


def test_install_keeps_ninjas_response_for_a_denial_by_another_throttle():
    from ninja.throttling import AnonRateThrottle as NinjasOwn

    api = install(NinjaAPI(urls_namespace="mixed", throttle=NinjasOwn("1/m")))

    @api.get("/m")
    def m(request):
        return "m"

    client = TestClient(api)
    assert client.get("/m").status_code == 200
    denied = client.get("/m")
    assert denied.status_code == 429 and denied.json() == {"detail": "Too many requests."}


def test_ninja_decisions_are_counted_and_audited_like_any_other(rec):
    from prometheus_client import REGISTRY

    def denied_count():
        return REGISTRY.get_sample_value("django_gcra_decisions_total",
                                         {"policy": "ninja.anon", "limit": "anon", "outcome": "denied"}) or 0.0

    before = denied_count()
    client = Client(REMOTE_ADDR="10.9.9.9")
    assert [client.get("/api/anon").status_code for _ in range(3)] == [200, 200, 429]
    assert denied_count() == before + 1
    rec.flush()
    [row] = AuditEvent.objects.filter(policy="ninja.anon")
    assert (row.outcome, row.limit, row.path, row.method) == ("denied", "anon", "/api/anon", "GET")


def test_wait_is_this_threads_own_under_concurrent_requests():
    """ninja shares one throttle instance between threads: another thread's admission between
    this thread's denial and its wait() does not change the wait."""
    import threading

    from django.test import RequestFactory

    throttle = AnonRateThrottle("1/h")
    first, second = RequestFactory().get("/", REMOTE_ADDR="192.0.2.1"), RequestFactory().get("/", REMOTE_ADDR="192.0.2.2")
    for request in (first, second):
        request.auth = None
    assert throttle.allow_request(first)
    denied_done, admitted_done, waits = threading.Barrier(2), threading.Barrier(2), []

    def denied():
        assert not throttle.allow_request(first)
        denied_done.wait()
        admitted_done.wait()
        waits.append(throttle.wait())

    def admitted():
        denied_done.wait()
        assert throttle.allow_request(second)
        admitted_done.wait()

    threads = [threading.Thread(target=denied), threading.Thread(target=admitted)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert len(waits) == 1 and 3500 < waits[0] <= 3600
