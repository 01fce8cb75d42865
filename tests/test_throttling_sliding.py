"""DRF throttles with ``algorithm = "sliding_log"``: DRF's own rolling window, race-free
(real redis-server)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_gcra.throttling import GCRAAnonRateThrottle
from tests.support.surfaces_helpers import configure

pytestmark = pytest.mark.redis


@pytest.fixture(autouse=True)
def drf(real_redis, gcra_settings, settings):
    configure(gcra_settings)
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "2/m"}}
    return real_redis


class RollingAnon(GCRAAnonRateThrottle):
    algorithm = "sliding_log"


class WindowAnon(GCRAAnonRateThrottle):
    algorithm = "sliding_window"


def decide_n(cls, n, ip="10.0.0.1"):
    view, factory = APIView(), APIRequestFactory()
    throttles = []
    for _ in range(n):
        request = view.initialize_request(factory.get("/", REMOTE_ADDR=ip))
        throttle = cls()
        throttle.allowed = throttle.allow_request(request, view)
        throttles.append(throttle)
    return throttles


def test_sliding_log_throttle_waits_for_the_oldest_request_like_drf():
    first, second, third = decide_n(RollingAnon, 3)
    assert (first.allowed, second.allowed, third.allowed) == (True, True, False)
    assert 59 < third.wait() <= 60  # DRF: the oldest of the 2 requests in the minute leaves
    assert third.decision.limits[0].algorithm == "sliding_log"
    gcra = decide_n(GCRAAnonRateThrottle, 3, ip="10.0.0.2")[2]
    assert not gcra.allowed and 29 < gcra.wait() <= 30  # GCRA: one interval, a smooth refill


def test_sliding_window_throttle():
    throttles = decide_n(WindowAnon, 3, ip="10.0.0.3")
    assert [t.allowed for t in throttles] == [True, True, False] and throttles[2].wait() > 0


def test_a_sliding_throttle_with_a_burst_is_a_clear_error():
    class Bursty(RollingAnon):
        burst = 5

    with pytest.raises(ImproperlyConfigured, match="no burst"):
        decide_n(Bursty, 1, ip="10.0.0.4")
