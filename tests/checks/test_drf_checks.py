"""System checks of DRF's throttle settings (django_gcra.E060-E063, W060-W063)."""

from __future__ import annotations

import sys
import warnings

import pytest
from django.core import checks
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from django_gcra.drf_checks import drf_problems
from django_gcra.throttling import GCRAScopedRateThrottle, GCRAUserRateThrottle

with warnings.catch_warnings():
    warnings.simplefilter("ignore")

    class FrozenThrottle(GCRAUserRateThrottle):  # W062 (and a ThrottleOverrideWarning at import)
        rate = "5/m"

        def timer(self):
            return 0


class BadRateThrottle(GCRAUserRateThrottle):
    rate = "lots"


class ScopedView(APIView):
    throttle_classes = [GCRAScopedRateThrottle]
    throttle_scope = "uploads"

    def get(self, request):
        return Response("ok")


urlpatterns = [path("uploads/", ScopedView.as_view())]



@pytest.fixture
def drf(settings):
    def apply(**values):
        settings.REST_FRAMEWORK = values

    return apply


def test_a_clean_configuration_has_no_problem(drf):
    drf(DEFAULT_THROTTLE_CLASSES=["django_gcra.throttling.GCRAAnonRateThrottle"],
        DEFAULT_THROTTLE_RATES={"anon": "100/hr", "user": "5/mins", "burst": "10/5m", "off": None})
    assert drf_problems() == []


@pytest.mark.parametrize(("rate", "expected"), [
    ("fast", "django_gcra.E061"), ("5/fortnight2", "django_gcra.E061"), (5, "django_gcra.E061"),
    ("10000000/s", "django_gcra.E061"), ("1/100000000000d", "django_gcra.E061"), ("10/month", "django_gcra.W060"),
    ("0/m", "django_gcra.W063"),
])
def test_each_rate_is_checked(drf, rate, expected):
    drf(DEFAULT_THROTTLE_RATES={"anon": "1/s", "bad": rate})
    [problem] = drf_problems()
    assert problem.id == expected and "['bad']" in problem.msg


def test_the_rates_must_be_a_dict(drf):
    drf(DEFAULT_THROTTLE_RATES=["1/s"])
    assert [p.id for p in drf_problems()] == ["django_gcra.E060"]


def test_throttle_classes_are_imported_and_made(drf):
    drf(DEFAULT_THROTTLE_CLASSES=["myapp.nowhere.Throttle", "django_gcra.throttling.GCRAUserRateThrottle",
                                  "tests.checks.test_drf_checks.BadRateThrottle", "tests.checks.test_drf_checks.FrozenThrottle"],
        DEFAULT_THROTTLE_RATES={"anon": "1/s"})
    problems = {p.id: p.msg for p in drf_problems()}
    assert sorted(problems) == ["django_gcra.E062", "django_gcra.E063", "django_gcra.W062"]
    assert "myapp.nowhere.Throttle" in problems["django_gcra.E062"]
    assert "FrozenThrottle overrides 'timer'" in problems["django_gcra.W062"]
    messages = [p.msg for p in drf_problems() if p.id == "django_gcra.E063"]
    assert any("No default throttle rate set for 'user' scope" in m for m in messages)
    assert any("BadRateThrottle" in m and "'lots'" in m for m in messages)


@pytest.mark.urls("tests.checks.test_drf_checks")
def test_a_views_scope_without_a_rate_is_found(drf):
    drf(DEFAULT_THROTTLE_RATES={"anon": "1/s"})
    [problem] = drf_problems()
    assert problem.id == "django_gcra.E063"
    assert "ScopedView" in problem.msg and "'uploads'" in problem.msg
    drf(DEFAULT_THROTTLE_RATES={"uploads": "2/d"})
    assert drf_problems() == []


@pytest.mark.parametrize(("num_proxies", "gcra", "expected"), [
    (None, {}, []), (0, {}, []), (1, {}, ["django_gcra.W061"]), (1, {"TRUSTED_PROXIES": 1}, []),
    (1, {"TRUSTED_PROXIES": 2}, ["django_gcra.W061"]), (None, {"TRUSTED_PROXIES": 2}, []),
])
def test_num_proxies_and_trusted_proxies_agree(drf, gcra_settings, num_proxies, gcra, expected):
    drf(NUM_PROXIES=num_proxies)
    gcra_settings(**gcra)
    assert [p.id for p in drf_problems()] == expected


def test_registered_with_djangos_checks(drf):
    drf(DEFAULT_THROTTLE_RATES={"anon": "fast"})
    assert "django_gcra.E061" in {m.id for m in checks.run_checks(tags=["django_gcra"])}


def test_without_drf_there_is_nothing_to_check(drf, monkeypatch):
    drf(DEFAULT_THROTTLE_RATES={"anon": "fast"})
    monkeypatch.setitem(sys.modules, "rest_framework.settings", None)  # import fails, as without DRF
    assert drf_problems() == []


def test_every_id_is_documented():
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parent.parent.parent
    from django_gcra.codes import Codes

    used = {value for name, value in vars(Codes).items() if name.startswith("DRF_")}
    documented = set(re.findall(r"`(django_gcra\.[EW]06\d)`", (root / "docs" / "reference" / "checks.md").read_text()))
    assert used == documented and len(used) == 8
