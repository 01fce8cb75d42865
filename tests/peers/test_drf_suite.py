"""DRF's own throttling tests, run against django_gcra (see tests/peers/drf_suite.py).

Every DRF test passes unchanged except those that freeze or move DRF's mocked ``timer``
to assert the rolling window's arithmetic: django_gcra's time is Redis's, and its rates
refill smoothly (a ``3/min`` throttle admits the 4th request after 20 s, not 60 s). For
each of those, a test below checks the same promise to a client in real time.

Needs ``pip download`` to reach PyPI (or ``DJANGO_GCRA_DRF_SDIST`` naming a local sdist).
Without either the test fails; ``DJANGO_GCRA_SKIP_PEER_SUITES=1`` skips it instead.
"""

from __future__ import annotations

import os
import time

import pytest
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_gcra.throttling import GCRAScopedRateThrottle, GCRAUserRateThrottle
from tests.peers import drf_suite
from tests.support.servers import start_redis
from tests.support.surfaces_helpers import sf_list

pytestmark = [pytest.mark.redis]

TOTAL = 29
# DRF's tests that freeze or move its mocked timer to check the rolling window (test -> the real-time test below)
EXPECTED_FAILURES = {
    "ThrottlingTests::test_request_throttling_expires": "test_request_throttling_expires_in_real_time",
    "ThrottlingTests::test_request_throttling_multiple_throttles": "test_every_throttle_sees_every_request",
    "ThrottlingTests::test_throttle_rate_change_negative": "test_rate_change_keeps_a_positive_retry_after",
    "ThrottlingTests::test_minutes_fields": "test_minutes_retry_after_is_the_refill_interval",
    "ThrottlingTests::test_next_rate_remains_constant_if_followed": "test_following_the_refill_rate_is_never_throttled",
    "ScopedRateThrottleTests::test_scoped_rate_throttle": "test_scopes_have_their_own_buckets_and_refill",
}


@pytest.fixture(scope="module")
def drf_result(tmp_path_factory):
    try:
        sdist = drf_suite.fetch_sdist(tmp_path_factory.mktemp("sdist"))
    except drf_suite.SuiteUnavailable as exc:
        if os.environ.get("DJANGO_GCRA_SKIP_PEER_SUITES") == "1":
            pytest.skip(f"DJANGO_GCRA_SKIP_PEER_SUITES=1: {exc}")
        pytest.fail(f"{exc}\nSet DJANGO_GCRA_DRF_SDIST to a local sdist, or DJANGO_GCRA_SKIP_PEER_SUITES=1 to skip.")
    workdir = tmp_path_factory.mktemp("drf")
    drf_suite.prepare(sdist, workdir)
    server = start_redis()
    try:
        default = drf_suite.run(workdir, server.url)
        server.client().flushall()
        return default, drf_suite.run(workdir, server.url, algorithm="sliding_log")
    finally:
        server.stop()


def test_drf_suite_passes_but_for_the_mocked_timer(drf_result):
    import rest_framework

    drf_result = drf_result[0]  # the default algorithm, GCRA

    assert rest_framework.VERSION in drf_suite.VERIFIED_VERSIONS, (
        f"DRF {rest_framework.VERSION} is installed but the suite's expected failures were checked for "
        f"{', '.join(drf_suite.VERIFIED_VERSIONS)}: run it, check EXPECTED_FAILURES, and add the version to "
        "VERIFIED_VERSIONS in tests/peers/drf_suite.py")
    assert drf_result.total == TOTAL, drf_result.output
    assert drf_result.failed.keys() == EXPECTED_FAILURES.keys(), drf_result.output
    assert len(drf_result.passed) == TOTAL - len(EXPECTED_FAILURES) >= 23
    assert not drf_result.skipped


def test_substitution_changes_only_the_throttle_names():
    source = ("from rest_framework.throttling import (\n    AnonRateThrottle, BaseThrottle, ScopedRateThrottle, "
              "SimpleRateThrottle,\n    UserRateThrottle\n)\n\nclass A(UserRateThrottle):\n    rate = '3/sec'\n"
              "SimpleRateThrottle.scope = 'anon'  # AnonRateThrottleTests\n")
    out = drf_suite.substitute(source)
    assert out.splitlines()[:2] == [
        "from rest_framework.throttling import BaseThrottle",
        ("from django_gcra.throttling import GCRAAnonRateThrottle, GCRARateThrottle, GCRAScopedRateThrottle, "
         "GCRAUserRateThrottle")]
    assert out.splitlines()[3:] == ["class A(GCRAUserRateThrottle):", "    rate = '3/sec'",
                                    "GCRARateThrottle.scope = 'anon'  # AnonRateThrottleTests"]


def test_every_expected_failure_has_a_real_time_test():
    assert all(name in globals() for name in EXPECTED_FAILURES.values())


# The real-time twins of DRF's timer tests: the same classes and views, Redis's clock.

class User3SecRateThrottle(GCRAUserRateThrottle):
    rate = "3/sec"
    scope = "seconds"


class User3MinRateThrottle(GCRAUserRateThrottle):
    rate = "3/min"
    scope = "minutes"


class User6MinRateThrottle(GCRAUserRateThrottle):
    rate = "6/min"
    scope = "minutes"


class SecondsView(APIView):
    throttle_classes = (User3SecRateThrottle,)

    def get(self, request):
        return Response("foo")


class DoubleView(APIView):
    throttle_classes = (User3SecRateThrottle, User6MinRateThrottle)

    def get(self, request):
        return Response("foo")


class MinutesView(APIView):
    throttle_classes = (User3MinRateThrottle,)

    def get(self, request):
        return Response("foo")


class XYThrottle(GCRAScopedRateThrottle):
    THROTTLE_RATES = {"x": "3/sec", "y": "1/sec"}


class XView(APIView):
    throttle_classes = (XYThrottle,)
    throttle_scope = "x"

    def get(self, request):
        return Response("x")


class YView(XView):
    throttle_scope = "y"


@pytest.fixture
def get(real_redis, gcra_settings):
    gcra_settings()
    request = APIRequestFactory().get("/")
    return lambda view: view.as_view()(request)


def test_request_throttling_expires_in_real_time(get):
    assert [get(SecondsView).status_code for _ in range(4)] == [200, 200, 200, 429]
    denied = get(SecondsView)
    time.sleep(int(denied["Retry-After"]))
    assert get(SecondsView).status_code == 200


def test_every_throttle_sees_every_request(get):
    responses = [get(DoubleView) for _ in range(4)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[-1]["Retry-After"] == "1"
    time.sleep(1)
    # The 6/min throttle counted the denied 4th request too: 2 more, then it binds.
    assert [get(DoubleView).status_code for _ in range(2)] == [200, 200]
    denied = get(DoubleView)
    assert denied.status_code == 429
    assert 9 <= int(denied["Retry-After"]) <= 10  # one unit of 6/min refills every 10 s
    [(name, params)] = sf_list(denied, "RateLimit")
    assert (name, params["t"]) == ("minutes", int(denied["Retry-After"]))


def test_rate_change_keeps_a_positive_retry_after(get, monkeypatch):
    responses = [get(DoubleView) for _ in range(24)]
    assert responses[-1].status_code == 429 and 9 <= int(responses[-1]["Retry-After"]) <= 10
    monkeypatch.setattr(User3SecRateThrottle, "rate", "1/sec")
    responses = [get(DoubleView) for _ in range(24)]
    assert {r.status_code for r in responses} == {429}
    assert all(9 <= int(r["Retry-After"]) <= 10 for r in responses)


def test_minutes_retry_after_is_the_refill_interval(get):
    responses = [get(MinutesView) for _ in range(4)]
    assert ["Retry-After" in r for r in responses] == [False, False, False, True]
    assert responses[-1]["Retry-After"] == "20"  # 3/min refills one unit every 20 s (DRF: 60)


def test_following_the_refill_rate_is_never_throttled(get):
    started = time.monotonic()
    for _ in range(6):  # one request per refill interval (1/3 s) for 2 s, from a full burst
        response = get(SecondsView)
        assert response.status_code == 200 and "Retry-After" not in response
        time.sleep(0.34)
    assert time.monotonic() - started < 10


def test_scopes_have_their_own_buckets_and_refill(get):
    assert [get(XView).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert [get(YView).status_code for _ in range(2)] == [200, 429]
    time.sleep(1)
    assert [get(XView).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert [get(YView).status_code for _ in range(2)] == [200, 429]


# With DJANGO_GCRA["DRF_ALGORITHM"] = "sliding_log" (DRF's own rolling window, race-free),
# only the tests that move DRF's mocked timer fail: time is Redis's.
TIMER_MOVING = {"ThrottlingTests::test_request_throttling_expires",
                "ThrottlingTests::test_request_throttling_multiple_throttles",
                "ThrottlingTests::test_next_rate_remains_constant_if_followed",
                "ScopedRateThrottleTests::test_scoped_rate_throttle"}


def test_drf_suite_with_the_sliding_log_setting_fails_only_where_the_timer_moves(drf_result):
    sliding = drf_result[1]
    assert sliding.total == TOTAL, sliding.output
    assert set(sliding.failed) == TIMER_MOVING, sliding.output
    assert len(sliding.passed) == TOTAL - len(TIMER_MOVING) >= 25
