"""DJANGO_GCRA['SHEDDING'] checks (E070-E079): every bad value is an error naming the key,
the default is used in its place, and a good configuration is clean."""

from __future__ import annotations

import math

import pytest
from django.core import checks

from django_gcra.conf import get_settings, problems


def ids(gcra_settings, shedding):
    gcra_settings(SHEDDING=shedding)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def test_the_contract_example_is_clean(gcra_settings):
    assert ids(gcra_settings, {"max_in_flight": 64, "adaptive": True, "exempt": [r"^/health/"]}) == []
    config = get_settings().shedding
    assert config.max_in_flight == 64 and config.adaptive and config.exempt[0].search("/health/db")


def test_defaults_without_the_setting(gcra_settings):
    gcra_settings()
    config = get_settings().shedding
    assert (config.max_in_flight, config.adaptive, config.min_in_flight, config.exempt, config.retry_after) == (
        64, True, 3, (), 1)


def test_a_small_cap_lowers_the_default_floor(gcra_settings):
    assert ids(gcra_settings, {"max_in_flight": 2}) == []
    assert get_settings().shedding.min_in_flight == 2


@pytest.mark.parametrize("shedding, expected", [
    ("64", "django_gcra.E070"),
    ([("max_in_flight", 64)], "django_gcra.E070"),
    ({"max_inflight": 64}, "django_gcra.E071"),
    ({"max_in_flight": 0}, "django_gcra.E072"),
    ({"max_in_flight": 2.5}, "django_gcra.E072"),
    ({"max_in_flight": True}, "django_gcra.E072"),
    ({"max_in_flight": "64"}, "django_gcra.E072"),
    ({"min_in_flight": 0}, "django_gcra.E073"),
    ({"max_in_flight": 4, "min_in_flight": 5}, "django_gcra.E073"),
    ({"adaptive": "yes"}, "django_gcra.E074"),
    ({"adaptive": 1}, "django_gcra.E074"),
    ({"exempt": r"^/health/"}, "django_gcra.E075"),
    ({"exempt": ["(unclosed"]}, "django_gcra.E075"),
    ({"exempt": [1]}, "django_gcra.E075"),
    ({"retry_after": 0}, "django_gcra.E076"),
    ({"retry_after": 3600}, "django_gcra.E076"),
    ({"retry_after": 1.5}, "django_gcra.E076"),
    ({"sample_interval": 0}, "django_gcra.E077"),
    ({"sample_interval": math.nan}, "django_gcra.E077"),
    ({"min_rtt_interval": math.inf}, "django_gcra.E077"),
    ({"min_rtt_interval": -1}, "django_gcra.E077"),
    ({"min_rtt_samples": 0}, "django_gcra.E078"),
    ({"min_rtt_samples": 10.0}, "django_gcra.E078"),
    ({"buffer": -0.1}, "django_gcra.E079"),
    ({"buffer": math.inf}, "django_gcra.E079"),
    ({"jitter": 1.5}, "django_gcra.E079"),
    ({"jitter": math.nan}, "django_gcra.E079"),
])
def test_bad_values(gcra_settings, shedding, expected):
    assert ids(gcra_settings, shedding) == [expected]
    config = next(p for p in problems() if p.id == expected)
    assert "SHEDDING" in config.msg


def test_a_bad_value_falls_back_to_its_default_in_the_problem_list(gcra_settings):
    gcra_settings(SHEDDING={"max_in_flight": 8, "retry_after": 0})
    assert [p.id for p in problems()] == ["django_gcra.E076"]
    from django_gcra.conf import _load

    built = _load()[0].shedding
    assert built.max_in_flight == 8 and built.retry_after == 1
