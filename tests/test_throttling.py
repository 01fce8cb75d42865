"""The DRF throttle classes through the test Client against a real redis-server."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.test import APIRequestFactory

from django_gcra.throttling import GCRAAnonRateThrottle, GCRAScopedRateThrottle
from tests import surfaces_urls
from tests.support.surfaces_helpers import configure, sf_list

pytestmark = [pytest.mark.urls("tests.surfaces_urls"), pytest.mark.redis]

RATES = {"anon": "2/m", "user": "3/m", "uploads": "2/5m"}


@pytest.fixture(autouse=True)
def drf(real_redis, gcra_settings, settings):
    configure(gcra_settings)
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": RATES}
    return real_redis


def assert_drf_denied(response, limit, t):
    """Denied with every header; ``t`` is the full interval (slow requests may have used a second of it)."""
    assert response.status_code == 429
    assert int(response["Retry-After"]) in (t - 1, t)
    t = int(response["Retry-After"])
    assert response["X-RateLimit-Remaining"] == "0"
    [(name, params)] = sf_list(response, "RateLimit")
    assert (name, params["r"], params["t"]) == (limit, 0, t)
    assert "throttled" in response.json()["detail"]


def test_anon_throttle_honours_default_throttle_rates():
    client = Client()
    first = client.get("/drf/anon/")
    assert first.status_code == 200 and first["X-RateLimit-Remaining"] == "1"
    assert dict(sf_list(first, "RateLimit-Policy")) == {"anon": {"q": 2, "w": 60}}
    assert client.get("/drf/anon/").status_code == 200
    assert_drf_denied(client.get("/drf/anon/"), "anon", 30)


@pytest.mark.django_db
def test_anon_throttle_skips_authenticated_users():
    client = Client()
    client.force_login(User.objects.create_user("ann"))
    responses = [client.get("/drf/anon/") for _ in range(4)]
    assert [r.status_code for r in responses] == [200] * 4
    assert "X-RateLimit-Limit" not in responses[0]


@pytest.mark.django_db
def test_user_throttle_keys_users_by_pk_and_anonymous_by_ip():
    ann, bob = Client(), Client()
    ann.force_login(User.objects.create_user("ann"))
    bob.force_login(User.objects.create_user("bob"))
    assert sf_list(ann.get("/drf/user/"), "RateLimit")[0][0] == "user"
    assert [ann.get("/drf/user/").status_code for _ in range(3)] == [200, 200, 429]
    assert bob.get("/drf/user/").status_code == 200
    anonymous = Client()
    assert sf_list(anonymous.get("/drf/user/"), "RateLimit")[0][0] == "user"  # DRF: one bucket per cache key
    assert [anonymous.get("/drf/user/").status_code for _ in range(3)] == [200, 200, 429]


def test_rates_are_read_live(settings):
    client = Client()
    assert [client.get("/drf/anon/").status_code for _ in range(3)] == [200, 200, 429]
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {**RATES, "anon": "1/m"}}
    other = Client(REMOTE_ADDR="10.0.0.9")
    assert [other.get("/drf/anon/").status_code for _ in range(2)] == [200, 429]


def test_scoped_throttle_accepts_periods_drf_refuses():
    from rest_framework.throttling import ScopedRateThrottle

    with pytest.raises(KeyError):
        ScopedRateThrottle().parse_rate("2/5m")  # DRF's own reads only the first letter of the period
    client = Client()
    assert [client.get("/drf/scoped/").status_code for _ in range(2)] == [200, 200]
    assert_drf_denied(client.get("/drf/scoped/"), "uploads", 150)  # 2 per 5 min: one per 150 s


def test_scoped_throttle_ignores_views_without_scope():
    client = Client()
    assert [client.get("/drf/unscoped/").status_code for _ in range(5)] == [200] * 5


def test_missing_scope_rate_is_a_clear_error(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {}}
    request = APIRequestFactory().get("/")
    with pytest.raises(ImproperlyConfigured, match="anon"):
        GCRAAnonRateThrottle().allow_request(request, None)


def test_wait_is_exact():
    factory = APIRequestFactory()
    throttle = GCRAScopedRateThrottle()
    view = surfaces_urls.ScopedView()
    for _ in range(2):
        assert throttle.allow_request(view.initialize_request(factory.get("/")), view)
    assert not throttle.allow_request(view.initialize_request(factory.get("/")), view)
    wait = throttle.wait()
    assert wait == throttle.decision.retry_after
    assert 140 < wait <= 150 and wait != int(wait)


def test_policy_throttle_uses_ratelimit_policy():
    client = Client(HTTP_X_TENANT="acme")
    first = client.get("/drf/policy/")
    assert first.status_code == 200
    assert dict(sf_list(first, "RateLimit-Policy")) == {"tenant": {"q": 3, "w": 2}, "ip": {"q": 2, "w": 12}}
    assert client.get("/drf/policy/").status_code == 200
    assert_drf_denied(client.get("/drf/policy/"), "ip", 6)
    assert Client(HTTP_X_TENANT="other").get("/drf/policy/").status_code == 200


def test_policy_throttle_cost_above_burst():
    response = Client(HTTP_X_TENANT="acme").get("/drf/costly/")
    assert response.status_code == 429
    assert "Retry-After" not in response
    assert "never be admitted" in response.json()["detail"]


def test_policy_throttle_shadow_mode_never_denies(monkeypatch):
    monkeypatch.setattr(surfaces_urls.PolicyView, "ratelimit_policy", "shadowed")
    client = Client()
    assert [client.get("/drf/policy/").status_code for _ in range(3)] == [200] * 3


def test_closed_policy_with_redis_down_is_503(monkeypatch, settings):
    from tests.support.servers import free_port

    monkeypatch.setattr(surfaces_urls.PolicyView, "ratelimit_policy", "down")
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    response = Client().get("/drf/policy/")
    assert response.status_code == 503 and response["Retry-After"] == "1"


def test_the_most_restrictive_throttle_sets_the_headers():
    client = Client(HTTP_X_TENANT="acme")
    first = client.get("/drf/both/")
    assert [name for name, _ in sf_list(first, "RateLimit")] in (["ip"], ["anon"])
    client.get("/drf/both/")
    denied = client.get("/drf/both/")
    assert denied.status_code == 429 and denied["X-RateLimit-Remaining"] == "0"


def test_waiting_exactly_retry_after_is_admitted(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {**RATES, "anon": "1/s"}}
    client = Client()
    assert client.get("/drf/anon/").status_code == 200
    denied = client.get("/drf/anon/")
    assert denied.status_code == 429
    time.sleep(int(denied["Retry-After"]))
    assert client.get("/drf/anon/").status_code == 200


def test_nothing_else_imports_rest_framework():
    """Only throttling.py imports DRF at import time; drf_checks.py inside its function.
    (Read as text: at column 0 an import runs at import time, indented it runs when called.)"""
    import pathlib
    import re

    package = pathlib.Path(__file__).resolve().parent.parent / "django_gcra"
    pattern = re.compile(r"^(\s*)(?:from|import)\s+rest_framework\b", re.M)
    importers, lazy = set(), set()
    for module in package.rglob("*.py"):
        for match in pattern.finditer(module.read_text()):
            (lazy if match.group(1) else importers).add(module.name)
    assert importers == {"throttling.py"}
    assert lazy == {"drf_checks.py"}
