"""Every system check ID fires for its misconfiguration, and a good configuration is clean."""

from __future__ import annotations

import pytest
from django.core import checks

GOOD = {
    "DESCRIPTORS": {"tenant": "tests.descriptors.tenant_of", "tier": "tests.descriptors.tier_of"},
    "POLICIES": {
        "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "1000/s", "burst": 200},
                           {"name": "user", "key": ["tenant", "user"], "rate": "50/s", "burst": 20}],
                "on_failure": "open"},
        "export": {"limits": [{"name": "tenant", "key": ["tenant"], "burst": 10,
                               "rate": {"free": "60/m", "paid": "6000/m"}}], "mode": "shadow"},
    },
}


def ids(gcra_settings, **values):
    gcra_settings(**values)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def limit(**overrides):
    return {"limits": [{"name": "l", "key": ["ip"], "rate": "5/m", **overrides}]}


def test_good_configuration_is_clean(gcra_settings):
    assert ids(gcra_settings, **GOOD) == []


@pytest.mark.parametrize(
    "policies, expected",
    [
        ({"p": limit(rate="5/fortnight")}, "django_gcra.E002"),
        ({"p": limit(rate={"free": "x"})}, "django_gcra.E002"),
        ({"p": limit(rate=None)}, "django_gcra.E002"),
        ({"p": limit(burst=0)}, "django_gcra.E003"),
        ({"p": limit(burst="5")}, "django_gcra.E003"),
        ({"p": limit(key=["nope"])}, "django_gcra.E004"),
        ({"p": limit(key=[])}, "django_gcra.E004"),
        ({"p": {"limits": []}}, "django_gcra.E005"),
        ({"p": {}}, "django_gcra.E005"),
        ({"p": {"limits": [{"name": "l", "key": ["ip"], "rate": "5/m"}] * 2}}, "django_gcra.E008"),
        ({"p": {**limit(), "on_failure": "maybe"}}, "django_gcra.E009"),
        ({"p": {**limit(), "mode": "loud"}}, "django_gcra.E009"),
        ({"bad name": limit()}, "django_gcra.E010"),
        ({"p": limit(name="a:b")}, "django_gcra.E010"),
        ({"p": {**limit(), "shard": "user"}}, "django_gcra.E011"),
        ({"p": limit(fallback_rate="lots")}, "django_gcra.E012"),
        ({"p": {**limit(), "lease": {"size": 0}}}, "django_gcra.E014"),
        ({"p": {"limits": [{"name": "a", "key": ["ip"], "rate": "5/m"},
                           {"name": "b", "key": ["user"], "rate": "5/m"}]}}, "django_gcra.W002"),
        ({"p": "not a dict"}, "django_gcra.E001"),
        ({"p": {**limit(), "on_falure": "closed"}}, "django_gcra.E016"),
        ({"p": limit(brust=5)}, "django_gcra.E016"),
        ({"p": {**limit(), "lease": {"size": 2, "tll": 1}}}, "django_gcra.E016"),
    ],
)
def test_policy_problems(gcra_settings, policies, expected):
    assert expected in ids(gcra_settings, POLICIES=policies)


def test_default_tier_missing_from_a_tiered_limit(gcra_settings):
    assert ids(gcra_settings, **GOOD, DEFAULT_TIER="gold") == ["django_gcra.E015"]
    assert ids(gcra_settings, **GOOD, DEFAULT_TIER="paid") == []


def test_unknown_setting_warns(gcra_settings):
    assert ids(gcra_settings, POLICIES={}, TRUSTED_PROXY=1) == ["django_gcra.W001"]


def test_unknown_cache_alias(gcra_settings):
    assert ids(gcra_settings, CACHE_ALIAS="nope") == ["django_gcra.E006"]


def test_non_django_redis_cache(gcra_settings, settings):
    settings.CACHES = {**settings.CACHES, "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert ids(gcra_settings, CACHE_ALIAS="locmem") == ["django_gcra.E007"]


def test_descriptor_path_that_does_not_import(gcra_settings):
    assert ids(gcra_settings, DESCRIPTORS={"tenant": "tests.descriptors.missing"}) == ["django_gcra.E013"]
