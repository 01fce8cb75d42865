"""django_gcra.compat.django_ratelimit against a real redis-server: every key form, every
rate form, stacked decorators, block/request.limited, the RATELIMIT_* settings, failure."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache import InvalidCacheBackendError
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.test import RequestFactory
from django.utils.decorators import method_decorator
from django.views.generic import View

from django_gcra.compat.django_ratelimit import ALL, UNSAFE
from django_gcra.compat.django_ratelimit.buckets import policy_name
from django_gcra.compat.django_ratelimit.core import _split_rate, get_usage, is_ratelimited
from django_gcra.compat.django_ratelimit.decorators import ratelimit
from django_gcra.compat.django_ratelimit.exceptions import Ratelimited
from django_gcra.engine import retire
from django_gcra.policy import _NAME
from tests.support.servers import free_port, start_redis

pytestmark = pytest.mark.redis
rf = RequestFactory()
REDIS = "django_redis.cache.RedisCache"


@pytest.fixture(autouse=True)
def store(real_redis, gcra_settings, settings):
    gcra_settings(AUDIT={"ENABLED": False})
    return real_redis


class DotError(Exception):
    pass


def user(pk=None):
    return SimpleNamespace(pk=pk, is_authenticated=True) if pk is not None else AnonymousUser()


def req(method="get", path="/", data=None, ip="10.0.0.1", pk=None, **meta):
    request = getattr(rf, method)(path, data or {}, REMOTE_ADDR=ip, **meta)
    request.user = user(pk)
    return request


def limited_view(**kwargs):
    @ratelimit(block=False, **kwargs)
    def view(request):
        return request.limited

    return view


def key_by_path(group, request):
    return request.path


def rate_by_path(group, request):
    return None if request.path == "/free/" else "1/m"


# --- keys -----------------------------------------------------------------------------

KEY_CASES = [
    ("ip", dict(ip="10.0.0.1"), dict(ip="10.0.0.2")),
    ("user", dict(pk=1), dict(pk=2)),
    ("user_or_ip", dict(pk=7), dict(ip="10.0.0.9")),
    ("header:x-api-key", dict(HTTP_X_API_KEY="a"), dict(HTTP_X_API_KEY="b")),
    ("get:q", dict(data={"q": "a"}), dict(data={"q": "b"})),
    (lambda group, request: request.META["REMOTE_ADDR"][::-1], dict(ip="10.0.0.1"), dict(ip="10.0.0.2")),
    ("tests.test_compat_ratelimit.key_by_path", dict(path="/a/"), dict(path="/b/")),
]


@pytest.mark.parametrize(("key", "one", "other"), KEY_CASES, ids=[str(c[0])[:24] for c in KEY_CASES])
def test_every_key_form_counts_each_value_apart(key, one, other):
    view = limited_view(key=key, rate="2/m")
    assert [view(req(**one)) for _ in range(3)] == [False, False, True]
    assert [view(req(**other)) for _ in range(3)] == [False, False, True]


def test_post_key():
    view = limited_view(key="post:name", rate="1/m")
    assert [view(req("post", data={"name": "a"})) for _ in range(2)] == [False, True]
    assert view(req("post", data={"name": "b"})) is False


def test_user_or_ip_separates_a_user_from_its_address():
    view = limited_view(key="user_or_ip", rate="1/m")
    assert view(req(pk=3, ip="10.0.0.5")) is False
    assert view(req(ip="10.0.0.5")) is False  # anonymous from the same address: another bucket
    assert view(req(pk=3, ip="10.0.0.6")) is True


def test_the_decision_is_made_in_redis(store):
    view = limited_view(key="ip", rate="5/m", group="login")
    view(req(ip="192.0.2.1"))
    [key] = store.keys("rl:*")
    name = policy_name("login", 5, 60, "ip", "")
    assert key.decode() == f"rl:{{192.0.2.1}}:{name}:n:192.0.2.1"  # a one-limit policy shards on its key
    assert 11_000 < store.pttl(key) <= 12_001  # one unit of 5/m: 12 s until rested (+1 ms, rounded up)


def test_bad_keys_are_errors():
    for key in (None, "nonsense", "cookie:x"):
        with pytest.raises(ImproperlyConfigured):
            limited_view(key=key, rate="1/m")(req())
    with pytest.raises(ImproperlyConfigured, match="gave None"):
        limited_view(key=lambda g, r: None, rate="1/m")(req())


# --- rates ----------------------------------------------------------------------------

@pytest.mark.parametrize(("rate", "expected"), [
    ("5/m", (5, 60)), ("100/10s", (100, 10)), ("100/10", (100, 10)), ("1/3h", (1, 10800)),
    ("800/d", (800, 86400)), ("7/s", (7, 1)), ((3, 30), (3, 30)),
])
def test_rate_grammar(rate, expected):
    assert _split_rate(rate) == expected


def test_bad_rate_is_an_error():
    with pytest.raises(ImproperlyConfigured):
        limited_view(key="ip", rate="lots")(req())


@pytest.mark.parametrize("rate", ["2/m", (2, 60), lambda group, request: "2/m", lambda group, request: (2, 60),
                                  "tests.test_compat_ratelimit.two_a_minute"])
def test_every_rate_form(rate):
    view = limited_view(key="ip", rate=rate)
    assert [view(req()) for _ in range(3)] == [False, False, True]


def two_a_minute(group, request):
    return "2/m"


def test_callable_rate_receives_the_group_and_may_return_none():
    seen = []

    def rate(group, request):
        seen.append(group)
        return rate_by_path(group, request)

    view = limited_view(key="ip", rate=rate, group="g1")
    assert [view(req(path="/free/")) for _ in range(5)] == [False] * 5
    assert [view(req(path="/paid/")) for _ in range(2)] == [False, True]
    assert set(seen) == {"g1"}


def test_none_rate_never_limits_and_zero_rate_always_does(store):
    assert not any(limited_view(key="ip", rate=None)(req()) for _ in range(5))
    zero = limited_view(key="ip", rate="0/m")
    assert all(zero(req()) for _ in range(3))
    assert is_ratelimited(req(), group="z", key="ip", rate="0/m") is True
    assert store.keys("rl:*") == []  # nothing to ask the store for either


def test_smooth_refill_not_a_window():
    view = limited_view(key="ip", rate="4/4s")  # one unit a second, burst 4
    assert [view(req()) for _ in range(5)] == [False] * 4 + [True]
    usage = get_usage(req(), group="smooth", key="ip", rate="4/4s")  # another bucket: fresh
    assert usage["count"] == 0 and not usage["should_limit"]
    deadline = time.monotonic() + 3.0
    while view(req()) and time.monotonic() < deadline:  # one unit is back within a second
        time.sleep(0.05)
    assert time.monotonic() < deadline
    assert view(req()) is True  # only that one


# --- get_usage and is_ratelimited -------------------------------------------------------

def test_get_usage_counts():
    usage = lambda increment: get_usage(req(), group="u", key="ip", rate="2/m", increment=increment)  # noqa: E731
    assert usage(False) == {"count": 0, "limit": 2, "should_limit": False, "time_left": 0}
    first = usage(True)
    assert (first["count"], first["should_limit"]) == (1, False) and 29 <= first["time_left"] <= 30
    second = usage(True)
    assert (second["count"], second["should_limit"]) == (2, False) and 59 <= second["time_left"] <= 60
    denied = usage(True)
    # A denied request is not counted: its count is what it would have made (limit + 1).
    assert (denied["count"], denied["limit"], denied["should_limit"]) == (3, 2, True)
    peek = usage(False)  # still 2 in the bucket, and the next request would be limited
    assert (peek["count"], peek["should_limit"]) == (2, True)


def test_peek_spends_nothing():
    for _ in range(5):
        assert is_ratelimited(req(), group="p", key="ip", rate="1/m") is False
    assert is_ratelimited(req(), group="p", key="ip", rate="1/m", increment=True) is False
    assert is_ratelimited(req(), group="p", key="ip", rate="1/m") is True


def test_group_or_fn_is_required():
    with pytest.raises(ImproperlyConfigured):
        get_usage(req(), key="ip", rate="1/m")


def test_default_group_is_the_views_dotted_name(store):
    @ratelimit(key="ip", rate="1/m", block=False)
    def my_view(request):
        return request.limited

    my_view(req())
    group = "tests.test_compat_ratelimit.test_default_group_is_the_views_dotted_name.<locals>.my_view"
    name = policy_name(group, 1, 60, "ip", "")
    assert [k.decode().split(":")[2] for k in store.keys("rl:*")] == [name]
    assert is_ratelimited(req(), group=group, key="ip", rate="1/m") is True  # the same bucket by its group


def test_class_based_views_are_counted_per_class():
    def make():
        class V(View):
            @method_decorator(ratelimit(key="ip", rate="1/m", block=False))
            def get(self, request):
                return request.limited
        return V.as_view()

    first, second = make(), make()
    assert [first(req()), first(req())] == [False, True]
    assert second(req()) is True  # same module, class name and qualname: django-ratelimit's group


# --- decorators -----------------------------------------------------------------------

def test_stacked_decorators_each_keep_their_own_limit():
    @ratelimit(key="ip", rate="1/m", block=False)
    @ratelimit(key="ip", rate="3/m", block=False)
    def view(request):
        return request.limited

    @ratelimit(key="ip", rate="3/m", block=False)
    def other(request):
        return request.limited

    assert [view(req()) for _ in range(4)] == [False, True, True, True]
    # The inner 3/m limit counted all four (it is reached after the outer one limited).
    assert is_ratelimited(req(), fn=view.__wrapped__.__wrapped__, key="ip", rate="3/m") is True
    assert other(req()) is False  # another view: another group


def test_stacked_decorators_with_different_keys_do_not_share():
    @ratelimit(key="ip", rate="1/m", block=False)
    @ratelimit(key="user_or_ip", rate="1/m", block=False)
    def view(request):
        return request.limited

    assert view(req()) is False  # with one bucket both would have spent the same unit


def test_block_raises_ratelimited_a_permission_denied():
    @ratelimit(key="ip", rate="1/m")
    def view(request):
        return "ran"

    assert view(req()) == "ran"
    with pytest.raises(Ratelimited) as caught:
        view(req())
    assert isinstance(caught.value, PermissionDenied)


@pytest.mark.parametrize("cls", [DotError, "tests.test_compat_ratelimit.DotError"])
def test_exception_class_setting(settings, cls):
    settings.RATELIMIT_EXCEPTION_CLASS = cls

    @ratelimit(key="ip", rate="1/m")
    def view(request):
        return "ran"

    view(req())
    with pytest.raises(DotError):
        view(req())


def test_block_false_sets_request_limited_and_runs_the_view():
    calls = []

    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request):
        calls.append(request.limited)
        return "ran"

    assert [view(req()), view(req())] == ["ran", "ran"]
    assert calls == [False, True]


async def test_async_view():
    @ratelimit(key="ip", rate="1/m", block=False)
    async def view(request):
        return request.limited

    assert [await view(req()), await view(req())] == [False, True]


@pytest.mark.parametrize(("method", "hits"), [
    (ALL, {"get": True, "post": True, "head": True}),
    (UNSAFE, {"get": False, "head": False, "options": False, "post": True, "put": True, "patch": True,
              "delete": True}),
    ("POST", {"get": False, "post": True}),
    (["GET", "post"], {"get": True, "post": True, "put": False}),
])
def test_method_filtering(method, hits):
    for verb, counted in hits.items():
        view = limited_view(key="ip", rate="0/m", method=method, group=f"m-{verb}")
        assert view(req(verb)) is counted, verb


def test_methods_are_part_of_the_bucket_and_their_order_is_not():
    get_post = limited_view(key="ip", rate="1/m", method=["GET", "POST"], group="a")
    post_get = limited_view(key="ip", rate="1/m", method=["POST", "GET"], group="a")
    only_get = limited_view(key="ip", rate="1/m", method="GET", group="a")
    assert get_post(req()) is False
    assert post_get(req()) is True
    assert only_get(req()) is False


# --- settings -------------------------------------------------------------------------

def test_ratelimit_enable_false(settings, store):
    settings.RATELIMIT_ENABLE = False
    view = limited_view(key="ip", rate="0/m")
    assert not any(view(req()) for _ in range(3))
    assert get_usage(req(), group="x", key="ip", rate="1/m") is None


def test_use_cache_names_the_redis_that_decides(settings, redis_server, store):
    settings.CACHES = {**settings.CACHES, "limits": {"BACKEND": REDIS, "LOCATION": redis_server.url[:-1] + "1"}}
    settings.RATELIMIT_USE_CACHE = "limits"
    view = limited_view(key="ip", rate="1/m")
    assert [view(req()), view(req())] == [False, True]
    assert store.keys("rl:*") == []  # not db 0 (the default cache)
    other = redis_server.client(db=1)
    try:
        assert len(other.keys("rl:*")) == 1
    finally:
        other.flushdb()
        other.close()


def test_use_cache_errors(settings):
    settings.RATELIMIT_USE_CACHE = "missing"
    with pytest.raises(InvalidCacheBackendError):
        limited_view(key="ip", rate="1/m")(req())
    settings.CACHES = {**settings.CACHES, "loc": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.RATELIMIT_USE_CACHE = "loc"
    with pytest.raises(ImproperlyConfigured, match="django_redis"):
        limited_view(key="ip", rate="1/m")(req())


def test_dummy_cache_never_counts(settings):
    settings.CACHES = {**settings.CACHES, "dummy": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    settings.RATELIMIT_USE_CACHE = "dummy"
    view = limited_view(key="ip", rate="1/m")
    assert not any(view(req()) for _ in range(3))
    assert limited_view(key="ip", rate="0/m")(req()) is True


@pytest.mark.parametrize(("meta_key", "extra", "expected"), [
    ("HTTP_X_REAL_IP", {"HTTP_X_REAL_IP": "203.0.113.9"}, "203.0.113.9"),
    (lambda request: request.META["HTTP_X_CLIENT"], {"HTTP_X_CLIENT": "203.0.113.7"}, "203.0.113.7"),
])
def test_ip_meta_key(settings, store, meta_key, extra, expected):
    settings.RATELIMIT_IP_META_KEY = meta_key
    limited_view(key="ip", rate="1/m")(req(ip="10.0.0.1", **extra))
    [key] = store.keys("rl:*")
    assert key.decode().endswith(f":n:{expected}")


@pytest.mark.parametrize(("setting", "mask", "one", "same", "other"), [
    ("RATELIMIT_IPV4_MASK", 24, "10.1.1.1", "10.1.1.200", "10.1.2.1"),
    ("RATELIMIT_IPV6_MASK", 64, "2001:db8::1", "2001:db8::ffff", "2001:db8:0:1::1"),
    ("RATELIMIT_IPV6_MASK", 128, "2001:db8::1", "2001:db8::1", "2001:db8::2"),
])
def test_ip_masks(settings, setting, mask, one, same, other):
    setattr(settings, setting, mask)
    view = limited_view(key="ip", rate="1/m")
    assert [view(req(ip=one)), view(req(ip=same)), view(req(ip=other))] == [False, True, False]


# --- failure --------------------------------------------------------------------------

@pytest.fixture
def down(settings):
    """RATELIMIT_USE_CACHE on a redis-server that is then killed."""
    server = start_redis()
    settings.CACHES = {**settings.CACHES, "down": {"BACKEND": REDIS, "LOCATION": server.url}}
    settings.RATELIMIT_USE_CACHE = "down"
    assert limited_view(key="ip", rate="1/m", group="alive")(req()) is False  # it was answering
    server.kill()
    retire()
    yield
    server.stop()
    retire()


def test_fail_closed_by_default(down):
    view = limited_view(key="ip", rate="100/m")
    assert all(view(req()) for _ in range(3))
    assert get_usage(req(), group="c", key="ip", rate="100/m", increment=True) == {
        "count": 0, "limit": 0, "should_limit": True, "time_left": -1}
    # A peek spends nothing: it reads as an empty counter, as django-ratelimit's cache.get(key, 0).
    assert is_ratelimited(req(), group="c", key="ip", rate="100/m") is False


def test_fail_open(down, settings):
    settings.RATELIMIT_FAIL_OPEN = True
    view = limited_view(key="ip", rate="1/m")
    assert not any(view(req()) for _ in range(3))
    assert get_usage(req(), group="o", key="ip", rate="1/m", increment=True) is None


def test_dead_port_fails_closed(settings):
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    settings.CACHES = {**settings.CACHES, "nobody": {"BACKEND": REDIS, "LOCATION": nobody}}
    settings.RATELIMIT_USE_CACHE = "nobody"
    assert limited_view(key="ip", rate="100/m")(req()) is True


# --- names ----------------------------------------------------------------------------

def test_policy_names_are_valid_and_distinct():
    parts = [("g", 1, 60, "ip", ""), ("g", 1, 60, "ip", "POST"), ("g", 2, 60, "ip", ""), ("g", 1, 61, "ip", ""),
             ("g", 1, 60, "user", ""), ("h", 1, 60, "ip", ""), ("g\x1f1", 1, 60, "ip", ""),
             ("café:§ " * 40, 1, 60, "ip", ""), ("", 1, 60, "ip", "")]
    names = [policy_name(*p) for p in parts]
    assert all(_NAME.match(n) for n in names), names
    assert len(set(names)) == len(names)
    assert policy_name(*parts[0]) == names[0]  # stable


# --- middleware and checks ------------------------------------------------------------

def denied_view(request, exception):
    from django.http import HttpResponse

    return HttpResponse(f"slow down ({type(exception).__name__})", status=429)


def test_middleware_answers_with_ratelimit_view(settings):
    from django_gcra.compat.django_ratelimit.middleware import RatelimitMiddleware

    settings.RATELIMIT_VIEW = "tests.test_compat_ratelimit.denied_view"
    middleware = RatelimitMiddleware(lambda request: None)
    response = middleware.process_exception(req(), Ratelimited())
    assert (response.status_code, response.content) == (429, b"slow down (Ratelimited)")
    assert middleware.process_exception(req(), PermissionDenied()) is None


@pytest.mark.parametrize(("alias", "backend", "expected"), [
    ("default", REDIS, []),
    ("other", REDIS, ["django_gcra_ratelimit.E002"]),
    ("default", "django.core.cache.backends.locmem.LocMemCache", ["django_gcra_ratelimit.E003"]),
    ("default", "django.core.cache.backends.dummy.DummyCache", ["django_gcra_ratelimit.W001"]),
])
def test_cache_checks(settings, alias, backend, expected):
    from django_gcra.compat.django_ratelimit.checks import check_caches

    settings.CACHES = {"default": {"BACKEND": backend, "LOCATION": "redis://127.0.0.1:1/0"}}
    settings.RATELIMIT_USE_CACHE = alias
    assert [m.id for m in check_caches(None)] == expected


def test_policy_names_are_the_same_in_every_process():
    code = ("from django_gcra.compat.django_ratelimit.buckets import policy_name;"
            "print(policy_name('app.views.login', 5, 60, 'user_or_ip', 'POST'))")
    names = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                            env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
             for seed in ("1", "2")}
    assert names == {policy_name("app.views.login", 5, 60, "user_or_ip", "POST")}
