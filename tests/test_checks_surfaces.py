"""System checks of the surfaces: E020-E026 and W020-W021 each fire, and only when due."""

from __future__ import annotations

import pytest
from django.core import checks

POLICIES = {"login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m"}]}}
OURS = "django_gcra.middleware.RateLimitMiddleware"
AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"


def ids(gcra_settings, **values):
    gcra_settings(**{"POLICIES": POLICIES, **values})
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def test_good_surface_settings_are_clean(gcra_settings, settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, OURS]
    assert ids(gcra_settings, HEADERS="draft-03", DENIED_VIEW="tests.surfaces_urls.custom_denied",
               IPV6_PREFIX=56, TRUSTED_PROXIES=2,
               ROUTES=[{"path": "^/api/", "policy": "login", "methods": ["post"], "names": ["x"]}]) == []


@pytest.mark.parametrize("values, expected", [
    ({"HEADERS": "draft-12"}, "django_gcra.E020"),
    ({"DENIED_VIEW": "tests.nowhere.view"}, "django_gcra.E021"),
    ({"DENIED_VIEW": "tests.surfaces_helpers.POLICIES"}, "django_gcra.E021"),
    ({"IPV6_PREFIX": 129}, "django_gcra.E022"),
    ({"IPV6_PREFIX": "64"}, "django_gcra.E022"),
    ({"TRUSTED_PROXIES": -1}, "django_gcra.E023"),
    ({"TRUSTED_PROXIES": True}, "django_gcra.E023"),
    ({"ROUTES": {"path": "^/"}}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/("}]}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/(", "policy": "login"}]}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/", "policy": "login", "methods": "GET"}]}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/", "policy": "login", "method": ["GET"]}]}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/", "policy": "nope"}]}, "django_gcra.E025"),
])
def test_surface_problems(gcra_settings, settings, values, expected):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, OURS]
    assert ids(gcra_settings, **values) == [expected]


@pytest.mark.urls("tests.surfaces_urls")
def test_routed_views_naming_unknown_policies(gcra_settings, settings):
    # surfaces_urls has @ratelimit(policy="login") and DRF views with ratelimit_policy = "api"
    # ... and DRF throttles whose scopes need rates (else django_gcra.E063)
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "2/m", "user": "3/m", "uploads": "2/5m"}}
    assert ids(gcra_settings) == ["django_gcra.E026"]
    assert ids(gcra_settings, POLICIES={**POLICIES, "api": POLICIES["login"], "shadowed": POLICIES["login"]}) == []


def test_middleware_warnings(gcra_settings, settings):
    routes = [{"path": "^/", "policy": "login"}]
    assert ids(gcra_settings, ROUTES=routes) == ["django_gcra.W020"]
    settings.MIDDLEWARE = [OURS, *settings.MIDDLEWARE]
    assert AUTH in settings.MIDDLEWARE
    assert ids(gcra_settings, ROUTES=routes) == ["django_gcra.W021"]
