"""Shaping checks (E100-E101, W100): a ``max_wait`` that is negative or not a finite number,
longer than the limit's period times its burst, or on a policy that can never wait."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse

from django_gcra.decorators import ratelimit, waiting_views

POLICIES = {
    "partner": {"limits": [{"name": "p", "key": ["ip"], "rate": "10/s", "burst": 5}]},  # horizon 1 s x 5
    "daily": {"limits": [{"name": "d", "key": ["ip"], "rate": "5/d", "algorithm": "sliding_log"}]},
    "running": {"limits": [{"name": "p", "key": ["ip"], "rate": "10/s", "burst": 5}],
                "concurrency": [{"name": "c", "key": ["ip"], "max": 2, "ttl": 30}]},
}


@pytest.fixture(autouse=True)
def _forget_waiting_views():
    waiting_views.clear()
    yield
    waiting_views.clear()


def ids(gcra_settings):
    gcra_settings(POLICIES=POLICIES)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def view(request):
    return HttpResponse("ok")


@pytest.mark.parametrize("bad", [-1, -0.001, float("nan"), float("inf"), "2", True])
def test_e100_a_bad_max_wait_is_refused_at_decoration(bad):
    with pytest.raises(ImproperlyConfigured, match="E100"):
        ratelimit(key="ip", rate="10/s", max_wait=bad)
    with pytest.raises(ImproperlyConfigured, match="E100"):
        ratelimit(policy="partner", max_wait=bad)


def test_e101_an_inline_max_wait_longer_than_period_times_burst_is_refused_at_decoration():
    ratelimit(key="ip", rate="10/s", burst=5, max_wait=5.0)(view)  # exactly the horizon: fine
    with pytest.raises(ImproperlyConfigured, match="E101"):
        ratelimit(key="ip", rate="10/s", burst=5, max_wait=5.5)
    ratelimit(key="ip", rate="5/m", max_wait=300)(view)  # 60 s x burst 5


def test_e101_and_w100_for_a_configured_policy_come_from_the_checks(gcra_settings):
    ratelimit(policy="partner", max_wait=2.0)(view)
    ratelimit(policy="daily", max_wait=0)(view)  # no wait asked: nothing to say
    assert ids(gcra_settings) == []
    ratelimit(policy="partner", max_wait=30.0)(view)
    assert ids(gcra_settings) == ["django_gcra.E101"]
    waiting_views.clear()
    ratelimit(policy="daily", max_wait=1.0)(view)
    assert ids(gcra_settings) == ["django_gcra.W100"]


def test_w100_a_policy_with_concurrency_limits_never_waits(gcra_settings):
    ratelimit(policy="running", max_wait=1.0)(view)
    assert ids(gcra_settings) == ["django_gcra.W100"]


def test_w100_an_inline_sliding_limit_with_max_wait_is_reported(gcra_settings):
    # Inline: a warning does not refuse the decoration (the decision simply never waits).
    ratelimit(key="ip", rate="5/d", algorithm="sliding_log", max_wait=1.0)(view)
    assert ids(gcra_settings) == ["django_gcra.W100"]


def test_the_pacing_helpers_refuse_a_bad_max_wait_at_call_time(gcra_settings):
    from django_gcra import pace

    gcra_settings(POLICIES=POLICIES)
    with pytest.raises(ValueError, match="max_wait must be >= 0"):
        pace("partner", {"ip": "1.2.3.4"}, max_wait=-1)
