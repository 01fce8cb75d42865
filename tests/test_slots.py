"""Concurrency limits on a real redis-server, in one process: slots taken in the rates'
script call (all-or-nothing both ways), released (idempotent, at once: free for the very next
decision), extended while held, freed by ttl, on every surface (exceptions, streamed bodies,
async disconnects), failure policies, shadow mode, overrides and headers."""

from __future__ import annotations

import asyncio
import gc
import time

import django
import pytest
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpResponse, StreamingHttpResponse
from django.test import RequestFactory, override_settings
from django.urls import path

from django_gcra import adecide, decide
from django_gcra.decorators import ratelimit
from django_gcra.engine import current
from django_gcra.fallback import status

pytestmark = pytest.mark.django_db  # the overrides are read, and closing a response closes old connections

TENANT = {"tenant": "tests.support.descriptors.tenant_of"}


def policies(**extra):
    return {
        "run": {"concurrency": [{"name": "running", "key": ["tenant"], "max": 2, "ttl": 5}]},
        "cap": {"concurrency": [{"name": "capacity", "key": [], "max": 1, "ttl": 5}]},
        "both": {"limits": [{"name": "rate", "key": ["tenant"], "rate": "3/m", "burst": 3}],
                 "concurrency": [{"name": "running", "key": ["tenant"], "max": 2, "ttl": 5}]},
        **extra,
    }


@pytest.fixture
def conc(real_redis, gcra_settings):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES=policies(), AUDIT={"ENABLED": False})
    return real_redis


def slot_key(policy="run", limit="running", tenant="t"):
    return f"rl:{{{tenant}}}:{policy}:{limit}~conc:{tenant}"


def evalsha_calls(client):
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def test_at_most_max_slots_then_429_and_release_frees_one(conc):
    a, b = decide("run", {"tenant": "t"}), decide("run", {"tenant": "t"})
    c = decide("run", {"tenant": "t"})
    assert a.allowed and b.allowed and not c.allowed
    assert not c.capacity and c.limit == "running" and c.retry_after == 1.0 and c.slots is None
    assert conc.zcard(slot_key()) == 2
    assert decide("run", {"tenant": "other"}).allowed  # another key has its own slots
    a.release()
    a.release()  # idempotent
    c.release()  # harmless on a denied decision
    assert conc.zcard(slot_key()) == 1
    d = decide("run", {"tenant": "t"})
    assert d.allowed
    b.release()
    d.release()
    assert conc.zcard(slot_key()) == 0
    snap = status()["slots"]
    assert snap["refused"] == 1 and snap["released"] >= 3


def test_key_empty_is_capacity_503(conc):
    from django_gcra.http import denial_status, too_many_requests

    held = decide("cap", {})
    full = decide("cap", {})
    assert held.allowed and not full.allowed and full.capacity
    assert denial_status(full) == 503
    response = too_many_requests(full)
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response["RateLimit-Policy"] == '"capacity";q=1;qu="concurrent-requests"'
    assert response["RateLimit"] == '"capacity";r=0;t=1'
    held.release()


def test_quota_headers_of_an_allowed_decision(conc):
    d = decide("both", {"tenant": "h"})
    headers = d.headers()
    assert headers["RateLimit-Policy"] == '"rate";q=3;w=60, "running";q=2;qu="concurrent-requests"'
    assert headers["RateLimit"] == '"running";r=1;t=0'  # the least remaining: one slot of two
    d.release()


def test_rate_and_concurrency_in_one_script_call_all_or_nothing(conc):
    rate_key = "rl:{t}:both:rate:t"
    decide("both", {"tenant": "warm"}).release()  # the script is loaded (a NOSCRIPT reply counts as a call)
    before = evalsha_calls(conc)
    first, second = decide("both", {"tenant": "t"}), decide("both", {"tenant": "t"})
    assert first.allowed and second.allowed
    assert evalsha_calls(conc) - before == 2  # one script call per decision, rates and slots together
    # A full concurrency limit consumes no rate.
    tat = conc.get(rate_key)
    full = decide("both", {"tenant": "t"})
    assert not full.allowed and full.limit == "running"
    assert conc.get(rate_key) == tat
    assert evalsha_calls(conc) - before == 3
    # A rate denial takes no slot: free the slots, spend the last unit of rate, then be denied by rate.
    first.release()
    second.release()
    third = decide("both", {"tenant": "t"})
    assert third.allowed
    third.release()
    denied = decide("both", {"tenant": "t"})
    assert not denied.allowed and denied.limit == "rate"
    assert conc.zcard(slot_key("both")) == 0


def test_cost_zero_peeks_without_a_slot(conc):
    d = decide("run", {"tenant": "p"}, cost=0)
    assert d.allowed and d.slots is None and conc.zcard(slot_key(tenant="p")) == 0


def test_async_decide_and_arelease_through_the_asyncio_client(conc):
    async def run():
        a = await adecide("run", {"tenant": "a"})
        b = await adecide("run", {"tenant": "a"})
        c = await adecide("run", {"tenant": "a"})
        assert a.allowed and b.allowed and not c.allowed
        await a.arelease()
        await b.arelease()
        await c.arelease()

    asyncio.run(run())
    assert conc.zcard(slot_key(tenant="a")) == 0


def test_held_slots_are_extended_and_a_dead_holder_frees_after_ttl(conc, gcra_settings):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES=policies(short={
        "concurrency": [{"name": "running", "key": ["tenant"], "max": 1, "ttl": 1}]}), AUDIT={"ENABLED": False})
    key = "rl:{x}:short:running~conc:x"
    held = decide("short", {"tenant": "x"})
    assert held.allowed
    time.sleep(2.5)  # 2.5 ttls: the keeper extended it (every ttl / 3) all along
    assert conc.zcard(key) == 1 and not decide("short", {"tenant": "x"}).allowed
    assert status()["slots"]["extended"] >= 2
    # A holder that stops extending (as a dead process does) is free again after the ttl.
    current().stores.backend().keeper.held.discard(held.slots)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (d := decide("short", {"tenant": "x"})).allowed:
        time.sleep(0.1)
    assert d.allowed and status()["slots"]["expired"] >= 1
    d.release()
    held.slots.released = True  # already expired; nothing to send


def test_a_forgotten_decision_is_released_when_collected(conc):
    decide("run", {"tenant": "g"})  # dropped without release()
    gc.collect()
    deadline = time.monotonic() + 5  # a finalizer's release is sent by the keeper's thread
    while conc.zcard(slot_key(tenant="g")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert conc.zcard(slot_key(tenant="g")) == 0
    assert status()["slots"]["abandoned"] == 1


def test_release_failures_are_counted_and_logged(conc, caplog):
    d = decide("run", {"tenant": "f"})
    keeper = current().stores.backend().keeper

    class Broken:
        def pipeline(self, transaction=False):
            raise ConnectionError("store down")

    get_client, keeper.get_client = keeper.get_client, lambda: Broken()
    try:
        with caplog.at_level("WARNING", logger="django_gcra"):
            d.release()
    finally:
        keeper.get_client = get_client
    assert status()["slots"]["release_failures"] >= 1
    assert "could not release" in caplog.text or status()["slots"]["release_failures"] >= 1


def test_shadow_concurrency_never_denies(conc, gcra_settings):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES=policies(sh={
        "mode": "shadow", "concurrency": [{"name": "running", "key": ["tenant"], "max": 1, "ttl": 5}]}),
        AUDIT={"ENABLED": False})
    a, b = decide("sh", {"tenant": "s"}), decide("sh", {"tenant": "s"})
    assert a.allowed and b.allowed and b.shadow and not a.shadow
    assert conc.zcard("rl:{s}:sh:running~conc:s") == 1  # the would-deny took nothing
    a.release()
    b.release()


@pytest.mark.django_db(transaction=True)
def test_an_override_changes_max(conc):
    from django_gcra.models import LimitOverride

    LimitOverride.objects.create(policy="run", limit="running", match={"tenant": "big"}, burst=3)
    current().overrides.reload_now()
    try:
        held = [decide("run", {"tenant": "big"}) for _ in range(4)]
        assert [d.allowed for d in held] == [True, True, True, False]
        assert current().plan("run", {"tenant": "big"}).slots[0].max == 3
        for d in held:
            d.release()
    finally:
        LimitOverride.objects.all().delete()
        current().overrides.reload_now()


def test_failure_policies(gcra_settings, settings):
    from tests.support.servers import free_port

    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    conc_ = [{"name": "running", "key": ["tenant"], "max": 2, "ttl": 5}]
    gcra_settings(DESCRIPTORS=TENANT, AUDIT={"ENABLED": False}, BREAKER={"failures": 1000}, POLICIES={
        "open": {"concurrency": conc_, "on_failure": "open"},
        "closed": {"concurrency": conc_, "on_failure": "closed"},
        "local": {"concurrency": conc_, "limits": [{"name": "r", "key": ["tenant"], "rate": "100/s"}],
                  "on_failure": "local"}})
    assert all(decide("open", {"tenant": "o"}).allowed for _ in range(5))
    closed = decide("closed", {"tenant": "c"})
    assert not closed.allowed and closed.unavailable
    # local: a per-process semaphore of max, released like a Redis slot.
    a, b, c = (decide("local", {"tenant": "l"}) for _ in range(3))
    assert a.allowed and b.allowed and not c.allowed and c.fallback and c.limit == "running"
    assert current().slots.local.held_total() >= 2
    a.release()
    d = decide("local", {"tenant": "l"})
    assert d.allowed
    for x in (b, d):
        x.release()
    assert current().slots.local.counts(["rl:{l}:local:running~conc:l"]) == [0]


# -- the surfaces ------------------------------------------------------------------------

events: list[str] = []


@ratelimit(policy="run")
def boom(request):
    raise RuntimeError("the view failed")


@ratelimit(policy="run")
def stream(request):
    def body():
        for i in range(3):
            events.append(f"chunk{i}")
            yield b"x"

    return StreamingHttpResponse(body())


@ratelimit(policy="run")
async def slow_async(request):
    events.append("started")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        events.append("cancelled")
        raise
    return HttpResponse("late")


@ratelimit(policy="one")
def boom_one(request):
    raise RuntimeError("the view failed")


@ratelimit(policy="one")
def stream_one(request):
    return StreamingHttpResponse(iter([b"a", b"b"]))


@ratelimit(policy="one")
def fine_one(request):
    return HttpResponse("ok")


urlpatterns = [path("slow-async/", slow_async), path("boom-one/", boom_one), path("stream-one/", stream_one),
               path("fine-one/", fine_one)]


def test_an_exception_releases(conc):
    request = RequestFactory().get("/", HTTP_X_TENANT="e")
    for _ in range(3):  # more than max: each failure gave its slot back
        with pytest.raises(RuntimeError):
            boom(request)
    assert conc.zcard(slot_key(tenant="e")) == 0


def test_a_streamed_body_releases_after_its_last_chunk(conc):
    events.clear()
    response = stream(RequestFactory().get("/", HTTP_X_TENANT="s"))
    assert response.status_code == 200 and response["RateLimit"] == '"running";r=1;t=0'
    iterator = iter(response)
    next(iterator)
    assert conc.zcard(slot_key(tenant="s")) == 1  # still streaming: still held
    assert b"".join(iterator) == b"xx"
    assert conc.zcard(slot_key(tenant="s")) == 1  # the server closes the response after the last chunk
    response.close()
    assert conc.zcard(slot_key(tenant="s")) == 0


def test_the_test_client_and_the_middleware_release(conc, gcra_settings, client):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES=policies(), AUDIT={"ENABLED": False},
                  ROUTES=[{"path": r"^/", "policy": "run"}])
    with override_settings(MIDDLEWARE=["django_gcra.middleware.RateLimitMiddleware"], ROOT_URLCONF=__name__):
        for _ in range(4):
            response = client.get("/missing/", HTTP_X_TENANT="m")
            assert response.status_code == 404
    assert conc.zcard(slot_key(tenant="m")) == 0


@pytest.mark.skipif(django.VERSION < (5, 0), reason="Django 4.2's ASGI handler does not cancel a view on "
                    "disconnect: the slot is held until the view returns (docs/howto/concurrency.md)")
@override_settings(ROOT_URLCONF=__name__)
def test_an_async_disconnect_cancels_the_view_and_releases(conc):
    """Django 5's ASGI handler cancels the view when the client disconnects."""
    events.clear()

    async def run():
        handler = ASGIHandler()
        started = asyncio.Event()
        sent: list[dict] = []
        stage = 0

        async def receive():
            nonlocal stage
            stage += 1
            if stage == 1:
                return {"type": "http.request", "body": b"", "more_body": False}
            while "started" not in events:
                await asyncio.sleep(0.01)
            started.set()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": "/slow-async/", "raw_path": b"/slow-async/", "query_string": b"",
                 "headers": [(b"x-tenant", b"d"), (b"host", b"testserver")], "client": ("127.0.0.1", 5000),
                 "server": ("testserver", 80)}
        await asyncio.wait_for(handler(scope, receive, send), timeout=20)
        return sent

    sent = asyncio.run(run())
    assert "cancelled" in events and not any(m.get("type") == "http.response.start" for m in sent)
    assert conc.zcard(slot_key(tenant="d")) == 0


# -- DRF ---------------------------------------------------------------------------------

def drf_view(policy, body):
    from rest_framework.views import APIView

    from django_gcra.throttling import PolicyThrottle

    class View(APIView):
        throttle_classes = [PolicyThrottle]
        authentication_classes: list = []
        permission_classes: list = []
        ratelimit_policy = policy

        def get(self, request):
            return body(request)

    View.ratelimit_policy = policy
    return View.as_view()


def test_drf_policy_throttle_holds_and_releases(conc):
    from rest_framework.response import Response

    inside = []

    def body(request):
        inside.append(conc.zcard(slot_key(tenant="r")))
        return Response({"ok": True})

    view = drf_view("run", body)
    for _ in range(4):  # more than max, one at a time: each response gave its slot back
        response = view(RequestFactory().get("/", HTTP_X_TENANT="r"))
        response.render()
        assert response.status_code == 200 and response["RateLimit"] == '"running";r=1;t=0'
        response.close()
    assert inside == [1, 1, 1, 1] and conc.zcard(slot_key(tenant="r")) == 0


def test_drf_full_limits_429_and_503_and_an_unhandled_exception_releases(conc):
    held = [decide("run", {"tenant": "q"}), decide("run", {"tenant": "q"})]
    response = drf_view("run", lambda request: None)(RequestFactory().get("/", HTTP_X_TENANT="q"))
    assert response.status_code == 429 and response["Retry-After"] == "1"
    cap = decide("cap", {})
    response = drf_view("cap", lambda request: None)(RequestFactory().get("/"))
    assert response.status_code == 503 and response["Retry-After"] == "1"
    for d in (*held, cap):
        d.release()

    def fails(request):
        raise RuntimeError("not an APIException")

    for _ in range(3):
        with pytest.raises(RuntimeError):
            drf_view("run", fails)(RequestFactory().get("/", HTTP_X_TENANT="q"))
    assert conc.zcard(slot_key(tenant="q")) == 0


def test_metrics_export_the_slots(conc):
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.REGISTRY
    refused = registry.get_sample_value("django_gcra_concurrency_slots_refused_total")
    held = [decide("run", {"tenant": "x"}), decide("run", {"tenant": "x"})]
    assert not decide("run", {"tenant": "x"}).allowed
    assert registry.get_sample_value("django_gcra_concurrency_slots_held") >= 2
    assert registry.get_sample_value("django_gcra_concurrency_slots_refused_total") == refused + 1
    for d in held:
        d.release()
    assert registry.get_sample_value("django_gcra_concurrency_slots_released_total") >= 2


@ratelimit(policy="run")
async def quick_async(request):
    return HttpResponse("ok")


def test_an_async_view_releases_when_its_response_closes(conc):
    async def run():
        for _ in range(3):  # more than max, one after another
            response = await quick_async(RequestFactory().get("/", HTTP_X_TENANT="q2"))
            assert response.status_code == 200
            response.close()

    asyncio.run(run())
    assert conc.zcard(slot_key(tenant="q2")) == 0


# -- a released slot is free for the very next decision (issue 38) ------------------------


def test_release_then_decide_again_in_one_thread_always_gets_the_slot(conc, gcra_settings):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES=policies(one={
        "concurrency": [{"name": "running", "key": ["tenant"], "max": 1, "ttl": 5}]}), AUDIT={"ENABLED": False})
    refused = 0
    for _ in range(100):
        d = decide("one", {"tenant": "seq"})
        refused += not d.allowed
        d.release()
    assert refused == 0


def test_arelease_then_adecide_again_always_gets_the_slot(conc, gcra_settings):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES=policies(one={
        "concurrency": [{"name": "running", "key": ["tenant"], "max": 1, "ttl": 5}]}), AUDIT={"ENABLED": False})

    async def run():
        refused = 0
        for _ in range(100):
            d = await adecide("one", {"tenant": "aseq"})
            refused += not d.allowed
            await d.arelease()
        return refused

    assert asyncio.run(run()) == 0


def test_after_every_holder_released_two_callers_get_slots(conc):
    held = [decide("run", {"tenant": "h2"}) for _ in range(2)]
    assert all(d.allowed for d in held)
    for d in held:
        d.release()
    again = [decide("run", {"tenant": "h2"}) for _ in range(2)]
    assert [d.allowed for d in again] == [True, True]
    for d in again:
        d.release()


@override_settings(ROOT_URLCONF=__name__)
def test_sequential_requests_of_one_client_never_meet_their_own_released_slot(conc, gcra_settings, client):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES=policies(one={
        "concurrency": [{"name": "running", "key": ["tenant"], "max": 1, "ttl": 5}]}), AUDIT={"ENABLED": False})
    client.raise_request_exception = False
    statuses = []
    for url in ["/boom-one/", "/boom-one/", "/fine-one/", "/stream-one/", "/fine-one/", "/stream-one/"]:
        response = client.get(url, HTTP_X_TENANT="seq")
        if response.streaming:
            b"".join(response.streaming_content)
            response.close()
        statuses.append(response.status_code)
    assert statuses == [500, 500, 200, 200, 200, 200]
