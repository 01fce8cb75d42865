"""Shared by the surface tests: policies and header assertions (parsed with http-sf)."""

from __future__ import annotations

import time

import http_sf

POLICIES = {
    "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 2}], "on_failure": "closed"},
    "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "100/m", "burst": 3},
                       {"name": "ip", "key": ["tenant", "ip"], "rate": "10/m", "burst": 2}]},
    "peruser": {"limits": [{"name": "user", "key": ["user"], "rate": "5/m", "burst": 1}]},
    "shadowed": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 1}], "mode": "shadow"},
    "down": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 1}], "on_failure": "closed"},
    "routed": {"limits": [{"name": "route", "key": ["route", "method"], "rate": "5/m", "burst": 1}]},
}
DESCRIPTORS = {"tenant": "tests.support.descriptors.tenant_of", "tier": "tests.support.descriptors.tier_of"}


def configure(gcra_settings, **extra):
    return gcra_settings(**{"POLICIES": POLICIES, "DESCRIPTORS": DESCRIPTORS, **extra})


def sf_list(response, name):
    return http_sf.parse(response[name].encode(), tltype="list")


def assert_quota_headers(response, *, limit, burst, remaining, denied=False):
    """Every quota header is present, consistent, and the structured fields parse."""
    assert response["X-RateLimit-Limit"] == str(burst)
    assert response["X-RateLimit-Remaining"] == str(remaining)
    reset = int(response["X-RateLimit-Reset"]) - time.time()
    policies = dict(sf_list(response, "RateLimit-Policy"))
    assert policies[limit]["q"] == burst and policies[limit]["w"] >= 1
    [(name, params)] = sf_list(response, "RateLimit")
    assert name == limit and params["r"] == remaining
    assert params["t"] >= 0 and -2 <= reset - params["t"] <= 2
    if denied:
        assert response.status_code == 429
        assert int(response["Retry-After"]) == params["t"] >= 1
        body = response.json()
        assert body["error"] == "too_many_requests" and body["retry_after_seconds"] == int(response["Retry-After"])
    else:
        assert "Retry-After" not in response
    return params
