"""System checks of the policy plane: E030, E031, W030, W031."""

from __future__ import annotations

import pytest
from django.core import checks

from django_gcra.models import LimitOverride

POLICIES = {"api": {"limits": [{"name": "tenant", "key": ["ip"], "rate": "5/m"}]}}


def ids(gcra_settings, databases=None, **values):
    gcra_settings(POLICIES=POLICIES, **values)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"], databases=databases,
                                                   include_deployment_checks=False)})


def test_defaults_and_good_values_are_clean(gcra_settings):
    assert ids(gcra_settings) == []
    assert ids(gcra_settings, AUDIT={"ENABLED": False, "FLUSH_INTERVAL": 0.5, "MAX_BUFFER": 10, "RETENTION_DAYS": 0},
               OVERRIDE_REFRESH=0.5, OVERRIDE_TTL=10) == []


@pytest.mark.parametrize("audit", [
    [], {"ENABLED": "yes"}, {"FLUSH_INTERVAL": 0}, {"FLUSH_INTERVAL": "1"}, {"MAX_BUFFER": 0}, {"MAX_BUFFER": 2.5},
    {"RETENTION_DAYS": -1}, {"RETENTION_DAYS": True}, {"FLUSH": 1},
])
def test_e030_bad_audit_settings(gcra_settings, audit):
    assert ids(gcra_settings, AUDIT=audit) == ["django_gcra.E030"]


@pytest.mark.parametrize("values", [{"OVERRIDE_REFRESH": 0}, {"OVERRIDE_REFRESH": "1"}, {"OVERRIDE_TTL": -5},
                                    {"OVERRIDE_TTL": None}])
def test_e031_bad_override_timings(gcra_settings, values):
    assert ids(gcra_settings, **values) == ["django_gcra.E031"]


def test_w031_ttl_shorter_than_refresh(gcra_settings):
    assert ids(gcra_settings, OVERRIDE_REFRESH=5, OVERRIDE_TTL=1) == ["django_gcra.W031"]


@pytest.mark.django_db
def test_w030_overrides_of_unconfigured_limits(gcra_settings):
    LimitOverride.objects.create(policy="api", limit="tenant", match={}, burst=3)
    assert ids(gcra_settings, databases=["default"]) == []
    LimitOverride.objects.create(policy="api", limit="gone", match={}, burst=3)
    LimitOverride.objects.create(policy="old", limit="tenant", match={}, burst=3, enabled=False)  # disabled: quiet
    assert ids(gcra_settings, databases=["default"]) == ["django_gcra.W030"]
    assert ids(gcra_settings) == []  # database checks run only when asked (migrate, check --database)


def test_bad_values_fall_back_to_defaults_at_run_time(gcra_settings):
    from django_gcra.audit import audit_setting
    from django_gcra.overrides import _seconds

    gcra_settings(POLICIES=POLICIES, AUDIT={"FLUSH_INTERVAL": 0, "MAX_BUFFER": "many", "ENABLED": 1,
                                            "RETENTION_DAYS": 0}, OVERRIDE_REFRESH=None, OVERRIDE_TTL=-1)
    assert [audit_setting(k) for k in ("FLUSH_INTERVAL", "MAX_BUFFER", "ENABLED", "RETENTION_DAYS")] == [2.0, 10_000,
                                                                                                     True, 0]
    assert (_seconds("OVERRIDE_REFRESH"), _seconds("OVERRIDE_TTL")) == (1.0, 30.0)
