"""``"HEADERS": "github"`` and lists of styles: GitHub's X-RateLimit-* fields, validation (E020)."""

from __future__ import annotations

import time

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from django_gcra import decide
from django_gcra.conf import get_settings
from django_gcra.http import quota_headers
from tests.support.surfaces_helpers import configure, sf_list

GITHUB = {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Used",
          "X-RateLimit-Resource"}


@pytest.fixture(autouse=True)
def policies(real_redis, gcra_settings):
    configure(gcra_settings, HEADERS="github")


def test_github_style_sends_the_five_fields_as_githubs_api_does():
    headers = quota_headers(decide("login", {"ip": "1.2.3.4"}))  # login: 5/m, burst 2
    assert set(headers) == GITHUB
    assert (headers["X-RateLimit-Limit"], headers["X-RateLimit-Remaining"], headers["X-RateLimit-Used"],
            headers["X-RateLimit-Resource"]) == ("2", "1", "1", "login")
    assert 0 <= int(headers["X-RateLimit-Reset"]) - time.time() <= 13  # fully rested 12 s after one unit
    second = quota_headers(decide("login", {"ip": "1.2.3.4"}))
    assert (second["X-RateLimit-Remaining"], second["X-RateLimit-Used"]) == ("0", "2")
    denied = decide("login", {"ip": "1.2.3.4"})
    headers = quota_headers(denied)
    assert set(headers) == GITHUB | {"Retry-After"}
    assert (headers["X-RateLimit-Remaining"], headers["X-RateLimit-Used"]) == ("0", "2")
    assert int(headers["X-RateLimit-Reset"]) - int(headers["Retry-After"]) - time.time() == pytest.approx(0, abs=2)


def test_composite_policy_names_the_binding_limit_and_the_policy_as_resource():
    headers = quota_headers(decide("api", {"tenant": "acme", "ip": "1.2.3.4"}))  # tenant burst 3, ip burst 2
    assert (headers["X-RateLimit-Limit"], headers["X-RateLimit-Used"], headers["X-RateLimit-Resource"]) == (
        "2", "1", "api")


@pytest.mark.urls("tests.surfaces_urls")
def test_github_and_draft_11_together_through_a_surface(gcra_settings):
    configure(gcra_settings, HEADERS=["draft-11", "github"])
    assert get_settings().headers == ("draft-11", "github")
    response = Client().post("/login/")
    assert response.status_code == 200
    assert GITHUB <= set(response.headers) and {"RateLimit-Policy", "RateLimit"} <= set(response.headers)
    [(name, params)] = sf_list(response, "RateLimit")
    assert params["r"] == int(response["X-RateLimit-Remaining"])
    assert response["X-RateLimit-Used"] == str(int(response["X-RateLimit-Limit"]) - params["r"])


def test_shadow_limits_are_not_advertised_in_the_github_style():
    assert quota_headers(decide("shadowed", {"ip": "9.9.9.9"})) == {}


def ids(gcra_settings, headers):
    configure(gcra_settings, HEADERS=headers)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"]) if m.id.startswith("django_gcra.E")})


@pytest.mark.parametrize("headers", ["github", ["github"], ["draft-11", "github"], ("draft-03", "github"),
                                     ["x-ratelimit", "draft-11"], "none"])
def test_styles_and_lists_of_styles_are_accepted(gcra_settings, headers):
    assert ids(gcra_settings, headers) == []


@pytest.mark.parametrize("headers", ["GitHub", [], ["draft-11", "gh"], ["github", "github"], ["none", "github"],
                                     [["github"]], {"github": True}, None, 1])
def test_bad_styles_are_e020(gcra_settings, headers):
    assert ids(gcra_settings, headers) == ["django_gcra.E020"]
    with pytest.raises(ImproperlyConfigured, match="E020"):
        get_settings()
