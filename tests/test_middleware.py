"""RateLimitMiddleware through the test Client and AsyncClient against a real redis-server."""

from __future__ import annotations

import time

import pytest
from django.test import AsyncClient, Client

from tests.support.surfaces_helpers import assert_quota_headers, configure

pytestmark = [pytest.mark.urls("tests.surfaces_urls"), pytest.mark.redis]

ROUTES = [
    {"path": r"^/api/", "policy": "login", "methods": ["GET"], "names": ["api-ping", "api-aping"]},
    {"path": r"^/plain/$", "policy": "routed"},
    {"path": r"^/aplain/$", "policy": "shadowed"},
]


@pytest.fixture(autouse=True)
def middleware(real_redis, gcra_settings, settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django_gcra.middleware.RateLimitMiddleware"]
    configure(gcra_settings, ROUTES=ROUTES)
    return real_redis


def evalsha_calls(redis_client) -> int:
    return redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


@pytest.mark.parametrize("url", ["/api/ping/", "/api/aping/"])
def test_sync_client_limits_a_route(url):
    client = Client()
    assert_quota_headers(client.get(url), limit="ip", burst=2, remaining=1)
    assert_quota_headers(client.get(url), limit="ip", burst=2, remaining=0)
    assert_quota_headers(client.get(url), limit="ip", burst=2, remaining=0, denied=True)


@pytest.mark.parametrize("url", ["/api/ping/", "/api/aping/"])
async def test_async_client_limits_a_route(url, monkeypatch):
    def no_sync(*args, **kwargs):
        raise AssertionError("the middleware must take its async branch under ASGI")

    monkeypatch.setattr("django_gcra.surface.decide", no_sync)
    client = AsyncClient()
    assert (await client.get(url)).status_code == 200
    assert (await client.get(url)).status_code == 200
    assert_quota_headers(await client.get(url), limit="ip", burst=2, remaining=0, denied=True)


def test_unmatched_requests_never_touch_redis(middleware):
    client = Client()
    client.get("/api/ping/")  # loads the script, so each later decision is exactly one EVALSHA
    before = evalsha_calls(middleware)
    responses = [client.get("/api/other/"), client.post("/api/ping/"), client.get("/unnamed/"),
                 client.get("/nowhere/")]
    assert [r.status_code for r in responses] == [200, 200, 200, 404]
    assert all("X-RateLimit-Limit" not in r for r in responses)
    assert evalsha_calls(middleware) == before
    client.get("/api/ping/")
    assert evalsha_calls(middleware) == before + 1


def test_route_and_method_descriptors():
    client = Client()
    assert client.get("/plain/").status_code == 200
    assert client.get("/plain/").status_code == 429
    assert client.head("/plain/").status_code == 200  # another method: another key


async def test_shadow_route_never_denies_async():
    client = AsyncClient()
    statuses = [(await client.get("/aplain/")).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]


def test_waiting_exactly_retry_after_is_admitted(gcra_settings):
    configure(gcra_settings, POLICIES={"tight": {"limits": [{"name": "ip", "key": ["ip"], "rate": "1/s",
                                                              "burst": 1}]}},
              ROUTES=[{"path": "^/plain/", "policy": "tight"}])
    client = Client()
    assert client.get("/plain/").status_code == 200
    denied = client.get("/plain/")
    assert denied.status_code == 429
    time.sleep(int(denied["Retry-After"]))
    assert client.get("/plain/").status_code == 200


def test_closed_policy_with_redis_down_answers_503(gcra_settings, settings, redis_server):
    from tests.support.servers import free_port

    configure(gcra_settings, ROUTES=[{"path": "^/plain/", "policy": "down"}])
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    for accept, kind in [("application/json", "application/json"),
                         ("application/problem+json", "application/problem+json")]:
        response = Client().get("/plain/", HTTP_ACCEPT=accept)
        assert response.status_code == 503 and response["Content-Type"] == kind
        assert response["Retry-After"] == "1"
    body = response.json()
    assert body["type"].endswith("#temporary-reduced-capacity") and body["violated-policies"] == ["down"]


async def test_closed_policy_with_redis_down_answers_503_async(gcra_settings, settings):
    from tests.support.servers import free_port

    configure(gcra_settings, ROUTES=[{"path": "^/aplain/", "policy": "down"}])
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    response = await AsyncClient().get("/aplain/")
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response.json()["error"] == "service_unavailable"


def test_local_fallback_denials_are_429(gcra_settings, settings):
    from tests.support.servers import free_port

    local = {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 1}], "on_failure": "local"}
    configure(gcra_settings, POLICIES={"local": local}, ROUTES=[{"path": "^/plain/", "policy": "local"}])
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    client = Client(REMOTE_ADDR="192.0.2.77")
    assert client.get("/plain/").status_code == 200
    denied = client.get("/plain/")
    assert denied.status_code == 429 and int(denied["Retry-After"]) >= 1
