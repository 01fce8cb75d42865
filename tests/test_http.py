"""Quota headers and denied responses: styles, problem+json, DENIED_VIEW, 503, rounding."""

from __future__ import annotations

import json

import http_sf
import pytest
from django.http import HttpResponse
from django.test import AsyncClient, Client, RequestFactory

from django_gcra import decide
from django_gcra.headers import _sf_string
from django_gcra.http import apply_quota_headers, quota_headers, retry_after_header, too_many_requests
from tests.support.surfaces_helpers import configure, sf_list

factory = RequestFactory()


@pytest.fixture(autouse=True)
def policies(fake_redis, gcra_settings):
    configure(gcra_settings)


def denied_login():
    for _ in range(2):
        assert decide("login", {"ip": "1.2.3.4"}).allowed
    decision = decide("login", {"ip": "1.2.3.4"})
    assert not decision.allowed
    return decision


@pytest.mark.parametrize("retry, header", [(0.000001, "1"), (0.5, "1"), (1.0, "1"), (1.000001, "2"), (11.2, "12")])
def test_retry_after_is_whole_seconds_rounded_up(retry, header):
    assert retry_after_header(retry) == header


@pytest.mark.parametrize("style, present, absent", [
    ("draft-11", {"X-RateLimit-Limit", "RateLimit-Policy", "RateLimit", "Retry-After"}, {"RateLimit-Limit"}),
    ("draft-03", {"X-RateLimit-Limit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"},
     {"RateLimit-Policy", "RateLimit"}),
    ("x-ratelimit", {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"},
     {"RateLimit-Policy", "RateLimit-Limit"}),
    ("none", {"Retry-After"}, {"X-RateLimit-Limit", "RateLimit-Policy", "RateLimit-Limit"}),
])
def test_header_styles(gcra_settings, style, present, absent):
    configure(gcra_settings, HEADERS=style)
    headers = quota_headers(denied_login())
    assert present <= set(headers) and not absent & set(headers)
    if style == "draft-03":
        assert (headers["RateLimit-Limit"], headers["RateLimit-Remaining"], headers["RateLimit-Reset"]) == (
            "2", "0", headers["Retry-After"])


def test_composite_policy_fields_parse_as_structured_lists():
    decision = decide("api", {"tenant": "acme", "ip": "1.2.3.4"})
    headers = quota_headers(decision)
    policies = http_sf.parse(headers["RateLimit-Policy"].encode(), tltype="list")
    assert policies == [("tenant", {"q": 3, "w": 2}), ("ip", {"q": 2, "w": 12})]
    [(name, params)] = http_sf.parse(headers["RateLimit"].encode(), tltype="list")
    assert name == "ip" and params["r"] == 1 and 0 < params["t"] <= 6  # one unit used of a 6 s interval


def test_names_are_serialised_as_sf_strings():
    assert http_sf.parse(_sf_string('a "quoted" \\ name').encode(), tltype="item")[0] == 'a "quoted" \\ name'


def test_problem_json_when_the_client_asks_for_it():
    decision = denied_login()
    problem = too_many_requests(decision, factory.get("/", HTTP_ACCEPT="application/problem+json, */*;q=0.1"))
    assert problem["Content-Type"] == "application/problem+json" and problem["Vary"] == "Accept"
    body = json.loads(problem.content)
    assert body["type"] == "https://iana.org/assignments/http-problem-types#quota-exceeded"
    assert body["violated-policies"] == ["ip"] and body["status"] == 429
    assert body["retry_after_seconds"] == int(problem["Retry-After"])
    for accept in ("*/*", "application/json", "application/problem+json;q=0"):
        plain = too_many_requests(decision, factory.get("/", HTTP_ACCEPT=accept))
        assert plain["Content-Type"] == "application/json"
        assert set(json.loads(plain.content)) == {"error", "message", "retry_after_seconds"}


def test_impossible_cost_has_no_retry_after():
    decision = decide("login", {"ip": "9.9.9.9"}, cost=3)
    assert decision.impossible
    response = too_many_requests(decision)
    assert response.status_code == 429 and "Retry-After" not in response
    assert "never be admitted" in json.loads(response.content)["message"]


def test_apply_quota_headers_keeps_existing_and_skips_retry_after_on_success():
    decision = denied_login()
    ok = apply_quota_headers(HttpResponse(headers={"X-RateLimit-Limit": "mine"}), decision)
    assert ok["X-RateLimit-Limit"] == "mine" and "Retry-After" not in ok and "RateLimit" in ok
    denied = apply_quota_headers(HttpResponse(status=429), decision)
    assert denied["Retry-After"] == quota_headers(decision)["Retry-After"]


def test_no_limit_applied_means_no_quota_headers():
    decision = decide("api", {"tenant": None, "ip": None})
    assert decision.allowed and quota_headers(decision) == {}


@pytest.mark.redis
@pytest.mark.urls("tests.surfaces_urls")
class TestDeniedView:
    @pytest.fixture(autouse=True)
    def redis(self, real_redis):
        pass

    def test_sync_denied_view_gets_the_quota_headers(self, gcra_settings):
        configure(gcra_settings, DENIED_VIEW="tests.surfaces_urls.custom_denied")
        client = Client()
        client.get("/inline/")
        client.get("/inline/")
        response = client.get("/inline/")
        assert response.content == b"slow down (view)"
        assert response["Retry-After"] in ("11", "12") and sf_list(response, "RateLimit")[0][0] == "view"

    async def test_async_denied_view_is_awaited(self, gcra_settings):
        configure(gcra_settings, DENIED_VIEW="tests.surfaces_urls.acustom_denied")
        client = AsyncClient()
        for _ in range(2):
            await client.get("/ainline/")
        response = await client.get("/ainline/")
        assert response.status_code == 429 and response.content == b"async slow down (view)"
        assert response["X-RateLimit-Remaining"] == "0"

    def test_problem_json_through_the_decorator(self):
        client = Client()
        client.get("/inline/")
        client.get("/inline/")
        response = client.get("/inline/", HTTP_ACCEPT="application/problem+json")
        assert response.status_code == 429 and response.json()["violated-policies"] == ["view"]

    def test_async_denied_view_behind_a_sync_surface(self, gcra_settings):
        configure(gcra_settings, DENIED_VIEW="tests.surfaces_urls.acustom_denied")
        client = Client()
        for _ in range(2):
            client.get("/inline/")
        response = client.get("/inline/")
        assert response.status_code == 429 and response.content == b"async slow down (view)"
        assert response["Retry-After"] in ("11", "12")
