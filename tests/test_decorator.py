"""@ratelimit through the test Client and AsyncClient against a real redis-server."""

from __future__ import annotations

import time

import django
import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient, Client

from django_gcra.decorators import ratelimit, view_policy_name
from tests.support.surfaces_helpers import assert_quota_headers, configure

pytestmark = [pytest.mark.urls("tests.surfaces_urls"), pytest.mark.redis]


@pytest.fixture(autouse=True)
def policies(real_redis, gcra_settings):
    configure(gcra_settings)
    return real_redis


def test_sync_view_allows_burst_then_429_with_every_header():
    client = Client()
    first = client.get("/inline/")
    assert first.status_code == 200
    assert_quota_headers(first, limit="view", burst=2, remaining=1)
    assert_quota_headers(client.get("/inline/"), limit="view", burst=2, remaining=0)
    denied = client.get("/inline/")
    params = assert_quota_headers(denied, limit="view", burst=2, remaining=0, denied=True)
    assert params["t"] in (11, 12)  # 5/m: one unit every 12 s, less the time the requests took


async def test_async_view_uses_the_async_path(monkeypatch):
    from django_gcra.backends.redis import RedisBackend

    def no_sync(*args):
        raise AssertionError("an async view must not take the sync (thread) path")

    monkeypatch.setattr(RedisBackend, "evaluate", no_sync)
    client = AsyncClient()
    assert (await client.get("/ainline/")).status_code == 200
    assert (await client.get("/ainline/")).status_code == 200
    denied = await client.get("/ainline/")
    assert_quota_headers(denied, limit="view", burst=2, remaining=0, denied=True)


def test_views_have_separate_counters():
    client = Client()
    for _ in range(2):
        client.get("/inline/")
    assert client.get("/inline/").status_code == 429
    assert client.get("/report/").status_code == 200  # same inline limit, other view


def test_inline_policy_is_named_after_the_view(real_redis):
    Client().get("/inline/")
    [key] = real_redis.keys("rl:*")
    assert key.decode() == "rl:{127.0.0.1}:view.tests.surfaces_urls.inline_sync.5-per-60s-b2:view:127.0.0.1"


def test_long_names_stay_valid():
    def view():
        pass

    view.__qualname__ = "x" * 200
    name = view_policy_name(view)
    assert len(name) == 64 and name.startswith("view.")


def test_named_policy_and_methods():
    client = Client()
    for _ in range(5):
        assert client.get("/login/").status_code == 200  # GET is not limited
    assert client.post("/login/").status_code == 200
    assert client.post("/login/").status_code == 200
    assert client.post("/login/").status_code == 429


def test_block_false_sets_request_ratelimit_and_runs_the_view():
    client = Client()
    bodies = [client.get("/report/") for _ in range(3)]
    assert [r.status_code for r in bodies] == [200, 200, 200]
    assert [r.json()["allowed"] for r in bodies] == [True, True, False]
    assert bodies[2].json()["retry_after"] > 0
    assert "Retry-After" not in bodies[2]  # the view answered normally: no wait is asked
    assert bodies[2]["X-RateLimit-Remaining"] == "0"


async def test_block_false_async():
    client = AsyncClient()
    results = [(await client.get("/areport/")).json()["allowed"] for _ in range(3)]
    assert results == [True, True, False]


def test_cost_callable():
    client = Client()
    assert client.get("/costly/?cost=7").status_code == 200
    response = client.get("/costly/?cost=4")
    assert response.status_code == 429
    assert client.get("/costly/?cost=3").status_code == 200


def test_cost_above_burst_is_never_admitted():
    response = Client().get("/costly/?cost=11")
    assert response.status_code == 429
    assert "Retry-After" not in response
    assert "never be admitted" in response.json()["message"]
    assert response.json()["retry_after_seconds"] is None


def test_class_based_views_via_method_decorator_have_their_own_counters(real_redis):
    client = Client()
    assert client.get("/cbv/").status_code == 200
    assert client.get("/cbv/").status_code == 429
    assert client.get("/cbv2/").status_code == 200  # also decorated on View.dispatch: another counter
    policies = sorted(k.decode().split(":")[2] for k in real_redis.keys("rl:*"))
    assert policies == ["view.tests.surfaces_urls.OtherSyncCBV.dispatch.5-per-60s-b1",
                        "view.tests.surfaces_urls.SyncCBV.dispatch.5-per-60s-b1"]


@pytest.mark.skipif(django.VERSION < (5, 1), reason="method_decorator keeps async methods async from Django 5.1")
async def test_async_class_based_view():
    client = AsyncClient()
    assert (await client.get("/acbv/")).status_code == 200
    assert (await client.get("/acbv/")).status_code == 429


@pytest.mark.django_db(transaction=True)
async def test_async_view_keyed_by_user():
    from asgiref.sync import sync_to_async

    user = await sync_to_async(User.objects.create_user)("async-ann", password="pw")
    client = AsyncClient()
    await sync_to_async(client.force_login)(user)  # aforce_login() is Django 5.0+
    assert (await client.get("/per-user/")).status_code == 200
    denied = await client.get("/per-user/")
    assert denied.status_code == 429
    assert (await AsyncClient().get("/per-user/")).status_code == 200  # anonymous: the limit is skipped


def test_shadow_mode_never_denies():
    client = Client()
    assert [client.get("/shadowed/").status_code for _ in range(3)] == [200, 200, 200]


def test_waiting_exactly_retry_after_is_admitted():
    client = Client()
    assert client.get("/tight/").status_code == 200
    denied = client.get("/tight/")
    assert denied.status_code == 429
    time.sleep(int(denied["Retry-After"]))
    assert client.get("/tight/").status_code == 200


def test_methods_may_be_one_string():
    from django.http import HttpResponse
    from django.test import RequestFactory

    view = ratelimit(key="ip", rate="5/m", methods="post", name="one-string")(lambda request: HttpResponse())
    post, get = RequestFactory().post("/"), RequestFactory().get("/")
    view(post)
    view(get)
    assert post.ratelimit.limit == "view"
    assert get.ratelimit.allowed and get.ratelimit.limit == "" and get.ratelimit.cost == 0  # not limited


def test_inline_sliding_log():
    from django.http import HttpResponse
    from django.test import RequestFactory

    def view(request):
        return HttpResponse()

    limited = ratelimit(key="ip", rate="2/h", algorithm="sliding_log", block=False)(view)
    requests = [RequestFactory().get("/", REMOTE_ADDR="10.9.9.9") for _ in range(3)]
    for request in requests:
        limited(request)
    last = requests[2].ratelimit
    assert not last.allowed and 3590 < last.retry_after <= 3600 and last.limits[0].algorithm == "sliding_log"
    assert view_policy_name(view, "2-per-3600s-sliding_log") == last.policy
    # A GCRA decorator of the same rate on the same view keeps its own counter.
    again = RequestFactory().get("/", REMOTE_ADDR="10.9.9.9")
    ratelimit(key="ip", rate="2/h", block=False)(view)(again)
    assert again.ratelimit.allowed and again.ratelimit.remaining == 1 and again.ratelimit.policy != last.policy


@pytest.mark.parametrize("kwargs, match", [
    ({"key": "ip", "rate": "5/fortnight"}, "invalid rate"),
    ({"key": "nope", "rate": "5/m"}, "unknown descriptor"),
    ({"key": "ip", "rate": "5/m", "burst": 0}, "burst"),
    ({"key": "ip", "rate": "5/m", "cost": -1}, "cost"),
    ({"policy": "login", "rate": "5/m"}, "either"),
    ({"policy": "login", "key": "user"}, "inline"),
    ({"policy": "login", "algorithm": "sliding_log"}, "inline"),
    ({"key": "ip", "rate": "5/m", "algorithm": "sliding_log", "burst": 5}, "no burst"),
    ({"key": "ip", "rate": "5/m", "algorithm": "leaky"}, "algorithm"),
    ({}, "either"),
])
def test_bad_arguments_fail_at_decoration_time(kwargs, match):
    with pytest.raises(ImproperlyConfigured, match=match):
        ratelimit(**kwargs)
