"""Metered costs on the surfaces (real redis-server): ``@ratelimit(settle=, count_when=)``
on sync and async views, a streamed body settled after its last chunk, ``ROUTES``
entries' ``settle`` / ``count_when``, DRF's ``PolicyThrottle`` reading the view's
``ratelimit_count_when`` / ``ratelimit_settle``, and a settle that fails never failing
the response (logged and counted)."""

from __future__ import annotations

import json
import logging

import pytest
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.test import AsyncClient, Client
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from django_gcra import decide
from django_gcra.decorators import ratelimit
from django_gcra.engine import current, retire
from django_gcra.throttling import PolicyThrottle

pytestmark = pytest.mark.redis

LOGIN = {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/h", "burst": 5}]}
TOKENS = {"limits": [{"name": "tpm", "key": ["ip"], "rate": "100/h", "burst": 100}]}


def failed(request, response) -> bool:
    return response.status_code == 401


def used_tokens(request, response) -> int:
    return json.loads(response.content)["usage"]["total_tokens"]


@ratelimit(policy="login", count_when=failed)
def login(request):
    ok = request.POST.get("password") == "right"
    return HttpResponse("welcome" if ok else "no", status=200 if ok else 401)


@ratelimit(policy="login", count_when=failed)
async def alogin(request):
    ok = request.POST.get("password") == "right"
    return HttpResponse("welcome" if ok else "no", status=200 if ok else 401)


@ratelimit(policy="tokens", cost=lambda request: int(request.GET.get("max_tokens", "50")), settle=used_tokens)
def complete(request):
    return JsonResponse({"usage": {"total_tokens": int(request.GET.get("used", "0"))}})


def stream_settle(request, response) -> int:
    return request.streamed_tokens


@ratelimit(policy="tokens", cost=50, settle=stream_settle)
def stream(request):
    request.streamed_tokens = 0

    def chunks():
        for _ in range(4):
            request.streamed_tokens += 5
            yield b"data: token\n\n"

    return StreamingHttpResponse(chunks(), content_type="text/event-stream")


def broken_settle(request, response) -> int:
    raise KeyError("usage")


@ratelimit(policy="tokens", cost=10, settle=broken_settle)
def broken(request):
    return HttpResponse("fine")


def routed(request):
    return JsonResponse({"usage": {"total_tokens": int(request.GET.get("used", "0"))}})


class DrfLogin(APIView):
    throttle_classes = [PolicyThrottle]
    ratelimit_policy = "login"
    authentication_classes: list = []
    permission_classes: list = []

    @staticmethod
    def ratelimit_count_when(request, response) -> bool:
        return response.status_code == 401

    def post(self, request):
        ok = request.data.get("password") == "right"
        return Response({"ok": ok}, status=200 if ok else 401)


class DrfComplete(APIView):
    throttle_classes = [PolicyThrottle]
    ratelimit_policy = "tokens"
    ratelimit_cost = 50
    authentication_classes: list = []
    permission_classes: list = []

    def ratelimit_settle(self, request, response) -> int:
        return int(response.data["usage"]["total_tokens"])

    def get(self, request):
        return Response({"usage": {"total_tokens": int(request.query_params.get("used", "0"))}})


class DrfPlainFunction(DrfLogin):
    ratelimit_count_when = failed  # a module function of (request, response), set on the class


urlpatterns = [
    path("login/", login), path("alogin/", alogin), path("complete/", complete), path("stream/", stream),
    path("broken/", broken), path("api/routed/", routed), path("drf/login/", DrfLogin.as_view()),
    path("drf/complete/", DrfComplete.as_view()), path("drf/plain/", DrfPlainFunction.as_view()),
]


@pytest.fixture(autouse=True)
def configured(real_redis, gcra_settings, settings):
    settings.ROOT_URLCONF = __name__
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django_gcra.middleware.RateLimitMiddleware"]
    gcra_settings(POLICIES={"login": LOGIN, "tokens": TOKENS, "routed": TOKENS},
                  ROUTES=[{"path": r"^/api/routed/", "policy": "routed", "settle": f"{__name__}.used_tokens"}])
    retire()  # a fresh engine: fresh settle counters
    yield real_redis
    retire()


def remaining(policy: str) -> int:
    return decide(policy, {"ip": "127.0.0.1"}, cost=0).remaining


def test_a_login_view_counts_only_failed_attempts():
    client = Client()
    for _ in range(20):  # successes are reserved, then refunded: they never count
        assert client.post("/login/", {"password": "right"}).status_code == 200
    assert remaining("login") == 5
    statuses = [client.post("/login/", {"password": "wrong"}).status_code for _ in range(6)]
    assert statuses == [401] * 5 + [429]
    assert client.post("/login/", {"password": "right"}).status_code == 429  # the limit holds for everyone


def test_an_async_login_view_counts_only_failed_attempts():
    import asyncio

    async def run():
        client = AsyncClient()
        oks = [(await client.post("/alogin/", {"password": "right"})).status_code for _ in range(8)]
        fails = [(await client.post("/alogin/", {"password": "wrong"})).status_code for _ in range(6)]
        return oks, fails

    oks, fails = asyncio.run(run())
    assert oks == [200] * 8 and fails == [401] * 5 + [429]


def test_settle_charges_the_usage_of_the_response():
    client = Client()
    response = client.get("/complete/", {"max_tokens": 60, "used": 12})
    assert response.status_code == 200
    assert response["X-RateLimit-Remaining"] == "40"  # the estimate, as decided
    assert remaining("tokens") == 88  # settled: 12 used
    client.get("/complete/", {"max_tokens": 10, "used": 30})  # 20 more than estimated: owed
    assert remaining("tokens") == 58
    assert current().settler.stats.snapshot()[("tokens", "applied")] == 2


def test_a_streamed_body_settles_after_its_last_chunk():
    response = Client().get("/stream/")
    assert remaining("tokens") == 50  # the estimate, while the body streams
    chunks = iter(response.streaming_content)
    next(chunks), next(chunks), next(chunks), next(chunks)
    assert remaining("tokens") == 50  # every chunk sent, the response not closed yet
    assert list(chunks) == []  # the end of the body: the test client closes the response
    assert remaining("tokens") == 80  # 20 streamed tokens charged


def test_a_settle_that_fails_never_fails_the_response(caplog):
    with caplog.at_level(logging.WARNING, logger="django_gcra"):
        response = Client().get("/broken/")
    assert response.status_code == 200 and response.content == b"fine"
    assert current().settler.stats.snapshot()[("tokens", "failed")] == 1
    assert any("could not settle" in r.getMessage() and "KeyError" in r.getMessage() for r in caplog.records)
    assert remaining("tokens") == 90  # the estimate stands
    prometheus_client = pytest.importorskip("prometheus_client")
    assert prometheus_client.REGISTRY.get_sample_value(
        "django_gcra_settles_total", {"policy": "tokens", "outcome": "failed"}) == 1


def test_a_route_settles_with_a_dotted_path():
    assert Client().get("/api/routed/", {"used": 7}).status_code == 200
    assert decide("routed", {"ip": "127.0.0.1"}, cost=0).remaining == 93


def test_drf_policy_throttle_counts_only_failed_attempts():
    client = Client()
    for _ in range(10):
        assert client.post("/drf/login/", {"password": "right"}).status_code == 200
    statuses = [client.post("/drf/login/", {"password": "wrong"}).status_code for _ in range(6)]
    assert statuses == [401] * 5 + [429]


def test_drf_policy_throttle_takes_a_plain_function_set_on_the_class():
    client = Client()
    assert [client.post("/drf/plain/", {"password": "right"}).status_code for _ in range(8)] == [200] * 8
    assert [client.post("/drf/plain/", {"password": "no"}).status_code for _ in range(6)] == [401] * 5 + [429]


def test_drf_policy_throttle_settles_with_the_view_method():
    assert Client().get("/drf/complete/", {"used": 5}).status_code == 200
    assert remaining("tokens") == 95
