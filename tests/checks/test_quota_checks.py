"""Calendar quotas' and metered routes' checks (E130-E136): every bad value is reported
with its ID, and the contract's example is clean."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from django_gcra.decorators import ratelimit

TENANT = {"tenant": "tests.support.descriptors.tenant_of"}
GOOD = {"name": "month", "key": ["tenant"], "algorithm": "quota", "quota": 100000, "period": "month",
        "tz": "Europe/Paris"}


def ids(gcra_settings, policy, **more):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES={"p": policy}, **more)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def test_the_contract_example_is_clean(gcra_settings):
    assert ids(gcra_settings, {"limits": [GOOD]}) == []
    assert ids(gcra_settings, {"limits": [{"name": "rate", "key": ["tenant"], "rate": "1000/s"}, GOOD]}) == []
    assert ids(gcra_settings, {"limits": [{**GOOD, "quota": {"free": 10, "paid": 1000}}]}) == []
    no_tz = {k: v for k, v in GOOD.items() if k != "tz"}  # Django's TIME_ZONE
    assert ids(gcra_settings, {"limits": [no_tz]}) == []


@pytest.mark.parametrize("limit, expected", [
    ({**GOOD, "period": "fortnight"}, "django_gcra.E130"),
    ({k: v for k, v in GOOD.items() if k != "period"}, "django_gcra.E130"),
    ({**GOOD, "tz": "Mars/Olympus_Mons"}, "django_gcra.E131"),
    ({**GOOD, "tz": 2}, "django_gcra.E131"),
    ({**GOOD, "quota": 0}, "django_gcra.E132"),
    ({**GOOD, "quota": 2.5}, "django_gcra.E132"),
    ({**GOOD, "quota": True}, "django_gcra.E132"),
    ({**GOOD, "quota": "100"}, "django_gcra.E132"),
    ({k: v for k, v in GOOD.items() if k != "quota"}, "django_gcra.E132"),
    ({**GOOD, "quota": {"free": -1}}, "django_gcra.E132"),
    ({**GOOD, "rate": "5/s"}, "django_gcra.E133"),
    ({**GOOD, "burst": 5}, "django_gcra.E133"),
    ({"name": "r", "key": ["tenant"], "rate": "5/s", "quota": 5}, "django_gcra.E135"),
    ({"name": "r", "key": ["tenant"], "rate": "5/s", "period": "day"}, "django_gcra.E135"),
])
def test_bad_quotas(gcra_settings, limit, expected):
    assert expected in ids(gcra_settings, {"limits": [limit]})


def test_a_leased_quota(gcra_settings):
    assert "django_gcra.E134" in ids(gcra_settings, {"limits": [GOOD], "lease": {"size": 10, "ttl": 1.0}})


@pytest.mark.parametrize("route, expected", [
    ({"settle": "tests.checks.test_quota_checks.nowhere"}, ["django_gcra.E136"]),
    ({"count_when": "not a path"}, ["django_gcra.E136"]),
    ({"settle": "tests.checks.test_quota_checks.settle", "count_when": "tests.checks.test_quota_checks.settle"},
     ["django_gcra.E136"]),
    ({"settle": "tests.checks.test_quota_checks.settle"}, []),
])
def test_routes_settle_and_count_when(gcra_settings, settings, route, expected):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django_gcra.middleware.RateLimitMiddleware"]
    found = ids(gcra_settings, {"limits": [GOOD]}, ROUTES=[{"path": "^/api/", "policy": "p", **route}])
    assert found == expected


def settle(request, response) -> int:
    return 1


def test_the_decorator_refuses_both_or_a_non_callable():
    with pytest.raises(ImproperlyConfigured, match="not both"):
        ratelimit(policy="login", settle=settle, count_when=settle)
    with pytest.raises(ImproperlyConfigured, match="callable"):
        ratelimit(policy="login", settle=5)
