"""Every system check ID fires for its misconfiguration, and a good configuration is clean:
policies and top-level settings (E001-E018, E054), surfaces (E020-E026, W020-W021), the policy
plane (E030-E031, W030-W031) and resilience (E040-E044, W040-W041). Lease checks: test_leases."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from django_gcra import decide
from django_gcra.conf import get_settings
from django_gcra.models import LimitOverride

GOOD = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of", "tier": "tests.support.descriptors.tier_of"},
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
        ({"p": limit(algorithm="leaky")}, "django_gcra.E009"),
        ({"p": limit(algorithm="sliding_log", burst=5)}, "django_gcra.E017"),
        ({"p": limit(algorithm="sliding_window", burst=5)}, "django_gcra.E017"),
        ({"p": limit(algorithm="sliding_log", rate="10001/h")}, "django_gcra.E018"),
        ({"p": limit(algorithm="sliding_log", rate={"free": "5/m", "paid": "20000/d"})}, "django_gcra.E018"),
        ({"p": limit(algorithm="sliding_log", fallback_rate="20000/d")}, "django_gcra.E018"),
        ({"p": {**limit(algorithm="sliding_log", rate="100/s"), "lease": {"size": 5}}}, "django_gcra.E054"),
    ],
)
def test_policy_problems(gcra_settings, policies, expected):
    assert expected in ids(gcra_settings, POLICIES=policies)


def test_sliding_limits_are_clean(gcra_settings):
    policies = {"p": {"limits": [{"name": "a", "key": ["ip"], "rate": "10000/h", "algorithm": "sliding_log"},
                                 {"name": "b", "key": ["ip"], "rate": "1000000/d", "algorithm": "sliding_window"},
                                 {"name": "c", "key": ["ip"], "rate": "5/s", "algorithm": "gcra", "burst": 2}]}}
    assert ids(gcra_settings, POLICIES=policies) == []
    algorithms = [lim.algorithm for lim in get_settings().policies["p"].limits]
    assert algorithms == ["sliding_log", "sliding_window", "gcra"]


def test_the_log_limit_message_says_the_memory_per_key(gcra_settings):
    gcra_settings(POLICIES={"p": limit(algorithm="sliding_log", rate="20000/d")})
    [message] = [m for m in checks.run_checks(tags=["django_gcra"]) if m.id == "django_gcra.E018"]
    assert "2.6 MB" in message.msg and "10,000" in message.msg


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
    assert ids(gcra_settings, DESCRIPTORS={"tenant": "tests.support.descriptors.missing"}) == ["django_gcra.E013"]


def test_drf_algorithm_is_checked(gcra_settings):
    assert ids(gcra_settings, DRF_ALGORITHM="sliding_log") == []
    assert ids(gcra_settings, DRF_ALGORITHM="rolling") == ["django_gcra.E009"]


# Surfaces

SURFACE_POLICIES = {"login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m"}]}}
OURS = "django_gcra.middleware.RateLimitMiddleware"
AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"


def surface_ids(gcra_settings, **values):
    gcra_settings(**{"POLICIES": SURFACE_POLICIES, **values})
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def test_good_surface_settings_are_clean(gcra_settings, settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, OURS]
    assert surface_ids(gcra_settings, HEADERS="draft-03", DENIED_VIEW="tests.surfaces_urls.custom_denied",
               IPV6_PREFIX=56, TRUSTED_PROXIES=2,
               ROUTES=[{"path": "^/api/", "policy": "login", "methods": ["post"], "names": ["x"]}]) == []


@pytest.mark.parametrize("values, expected", [
    ({"HEADERS": "draft-12"}, "django_gcra.E020"),
    ({"DENIED_VIEW": "tests.nowhere.view"}, "django_gcra.E021"),
    ({"DENIED_VIEW": "tests.support.surfaces_helpers.POLICIES"}, "django_gcra.E021"),
    ({"IPV6_PREFIX": 129}, "django_gcra.E022"),
    ({"IPV6_PREFIX": "64"}, "django_gcra.E022"),
    ({"TRUSTED_PROXIES": -1}, "django_gcra.E023"),
    ({"TRUSTED_PROXIES": True}, "django_gcra.E023"),
    ({"ROUTES": {"path": "^/"}}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/("}]}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/(", "policy": "login"}]}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/", "policy": "login", "methods": "GET"}]}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/", "policy": "login", "method": ["GET"]}]}, "django_gcra.E024"),
    ({"ROUTES": [{"path": "^/", "policy": "nope"}]}, "django_gcra.E025"),
])
def test_surface_problems(gcra_settings, settings, values, expected):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, OURS]
    assert surface_ids(gcra_settings, **values) == [expected]


@pytest.mark.urls("tests.surfaces_urls")
def test_routed_views_naming_unknown_policies(gcra_settings, settings):
    # surfaces_urls has @ratelimit(policy="login") and DRF views with ratelimit_policy = "api"
    # ... and DRF throttles whose scopes need rates (else django_gcra.E063)
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "2/m", "user": "3/m", "uploads": "2/5m"}}
    assert surface_ids(gcra_settings) == ["django_gcra.E026"]
    assert surface_ids(gcra_settings, POLICIES={**SURFACE_POLICIES, "api": SURFACE_POLICIES["login"], "shadowed": SURFACE_POLICIES["login"]}) == []


def test_middleware_warnings(gcra_settings, settings):
    routes = [{"path": "^/", "policy": "login"}]
    assert surface_ids(gcra_settings, ROUTES=routes) == ["django_gcra.W020"]
    settings.MIDDLEWARE = [OURS, *settings.MIDDLEWARE]
    assert AUTH in settings.MIDDLEWARE
    assert surface_ids(gcra_settings, ROUTES=routes) == ["django_gcra.W021"]


# Policy plane

PLANE_POLICIES = {"api": {"limits": [{"name": "tenant", "key": ["ip"], "rate": "5/m"}]}}


def plane_ids(gcra_settings, databases=None, **values):
    gcra_settings(POLICIES=PLANE_POLICIES, **values)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"], databases=databases,
                                                   include_deployment_checks=False)})


def test_defaults_and_good_values_are_clean(gcra_settings):
    assert plane_ids(gcra_settings) == []
    assert plane_ids(gcra_settings, AUDIT={"ENABLED": False, "FLUSH_INTERVAL": 0.5, "MAX_BUFFER": 10, "RETENTION_DAYS": 0},
               OVERRIDE_REFRESH=0.5, OVERRIDE_TTL=10) == []


@pytest.mark.parametrize("audit", [
    [], {"ENABLED": "yes"}, {"FLUSH_INTERVAL": 0}, {"FLUSH_INTERVAL": "1"}, {"MAX_BUFFER": 0}, {"MAX_BUFFER": 2.5},
    {"RETENTION_DAYS": -1}, {"RETENTION_DAYS": True}, {"FLUSH": 1},
])
def test_e030_bad_audit_settings(gcra_settings, audit):
    assert plane_ids(gcra_settings, AUDIT=audit) == ["django_gcra.E030"]


@pytest.mark.parametrize("values", [{"OVERRIDE_REFRESH": 0}, {"OVERRIDE_REFRESH": "1"}, {"OVERRIDE_TTL": -5},
                                    {"OVERRIDE_TTL": None}])
def test_e031_bad_override_timings(gcra_settings, values):
    assert plane_ids(gcra_settings, **values) == ["django_gcra.E031"]


def test_w031_ttl_shorter_than_refresh(gcra_settings):
    assert plane_ids(gcra_settings, OVERRIDE_REFRESH=5, OVERRIDE_TTL=1) == ["django_gcra.W031"]


@pytest.mark.django_db
def test_w030_overrides_of_unconfigured_limits(gcra_settings):
    LimitOverride.objects.create(policy="api", limit="tenant", match={}, burst=3)
    assert plane_ids(gcra_settings, databases=["default"]) == []
    LimitOverride.objects.create(policy="api", limit="gone", match={}, burst=3)
    LimitOverride.objects.create(policy="old", limit="tenant", match={}, burst=3, enabled=False)  # disabled: quiet
    assert plane_ids(gcra_settings, databases=["default"]) == ["django_gcra.W030"]
    assert plane_ids(gcra_settings) == []  # database checks run only when asked (migrate, check --database)


def test_bad_plane_values_refuse_at_run_time(gcra_settings):
    gcra_settings(POLICIES=PLANE_POLICIES, AUDIT={"FLUSH_INTERVAL": 0}, OVERRIDE_REFRESH=None)
    with pytest.raises(ImproperlyConfigured, match="E03[01]"):
        decide("api", {"ip": "1.2.3.4"})


# Resilience

LOCAL = {"p": {"limits": [{"name": "l", "key": ["ip"], "rate": "10/s"}], "on_failure": "local"}}


def test_defaults_are_clean_and_tight(settings):
    settings.DJANGO_GCRA = {}
    assert checks.run_checks(tags=["django_gcra"]) == []
    config = get_settings()
    assert config.timeout == config.connect_timeout == 0.01
    assert (config.breaker.failures, config.breaker.cooldown) == (5, 1.0)


@pytest.mark.parametrize("values, expected", [
    ({"TIMEOUT": 0}, "django_gcra.E040"),
    ({"TIMEOUT": "5"}, "django_gcra.E040"),
    ({"CONNECT_TIMEOUT": -1}, "django_gcra.E040"),
    ({"TIMEOUT": 2000}, "django_gcra.W040"),
    ({"CONNECT_TIMEOUT": 1500}, "django_gcra.W040"),
    ({"BREAKER": {"failures": 0}}, "django_gcra.E041"),
    ({"BREAKER": {"cooldown": 0}}, "django_gcra.E041"),
    ({"BREAKER": {"failure": 3}}, "django_gcra.E041"),
    ({"BREAKER": 5}, "django_gcra.E041"),
    ({"FALLBACK_PROCESSES": 0}, "django_gcra.E042"),
    ({"FALLBACK_PROCESSES": 2.5}, "django_gcra.E042"),
    ({"FALLBACK_LOG_INTERVAL": -1}, "django_gcra.E043"),
    ({"POLICIES": LOCAL}, "django_gcra.W041"),
])
def test_each_id_fires(gcra_settings, values, expected):
    assert expected in ids(gcra_settings, **values)


def test_local_fallback_is_fine_once_shared_or_explicit(gcra_settings):
    assert ids(gcra_settings, POLICIES=LOCAL, FALLBACK_PROCESSES=8) == []
    explicit = {"p": {**LOCAL["p"], "limits": [{**LOCAL["p"]["limits"][0], "fallback_rate": "2/s"}]}}
    assert ids(gcra_settings, POLICIES=explicit) == []


def test_bad_values_refuse_at_runtime_too(gcra_settings):
    gcra_settings(TIMEOUT=0, FALLBACK_PROCESSES=0)
    with pytest.raises(ImproperlyConfigured, match="E040"):
        get_settings()


@pytest.mark.parametrize("location, expected", [
    (["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"], []),
    (["127.0.0.1:7000"], ["django_gcra.E044"]),
    ("", ["django_gcra.E044"]),
])
def test_cluster_startup_nodes_are_checked(settings, gcra_settings, location, expected):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location,
                                   "OPTIONS": {"CLIENT_CLASS": "django_gcra.backends.cluster.ClusterClient"}}}
    assert ids(gcra_settings) == expected


# Multi-region budgets (E080-E088, W080)

def region_caches(settings, *aliases):
    settings.CACHES = {**settings.CACHES, **{a: dict(settings.CACHES["default"]) for a in aliases}}


REGIONS = {"local": "eu", "caches": {"eu": "default", "us": "us-redis"}, "rebalance_interval": 5.0}


def test_good_regions_are_clean(gcra_settings, settings):
    region_caches(settings, "us-redis")
    policies = {"a": {**limit(), "budget": "shared"}, "b": {**limit(), "budget": {"fixed": {"eu": 0.7, "us": 0.3}}},
                "c": {**limit(), "budget": "full"}, "d": {**limit(), "budget": "fixed"},
                "e": {**limit(), "budget": {"home": "tests.test_regions.home_of", "away": 0.1}}, "f": limit()}
    assert ids(gcra_settings, REGIONS=REGIONS, POLICIES=policies) == []
    assert get_settings().cache_alias == "default" and get_settings().regions.names == ("eu", "us")


@pytest.mark.parametrize("regions, policies, expected", [
    ("eu", {}, "django_gcra.E080"),
    ({**REGIONS, "caches": {}}, {}, "django_gcra.E080"),
    ({**REGIONS, "intervall": 5}, {}, "django_gcra.E080"),
    ({**REGIONS, "caches": {"eu": "default", "us": "nowhere"}}, {}, "django_gcra.E081"),
    ({**REGIONS, "local": "ap"}, {}, "django_gcra.E082"),
    ({**REGIONS, "rebalance_interval": 0}, {}, "django_gcra.E083"),
    ({**REGIONS, "rebalance_interval": float("inf")}, {}, "django_gcra.E083"),
    ({**REGIONS, "refresh": 10.0}, {}, "django_gcra.E083"),
    (REGIONS, {"p": {**limit(), "budget": "half"}}, "django_gcra.E084"),
    (REGIONS, {"p": {**limit(), "budget": {"fixed": {"eu": 0.7, "us": 0.2}}}}, "django_gcra.E085"),
    (REGIONS, {"p": {**limit(), "budget": {"fixed": {"eu": 0.7, "ap": 0.3}}}}, "django_gcra.E085"),
    (REGIONS, {"p": {**limit(), "budget": {"fixed": {"eu": 1.5}}}}, "django_gcra.E085"),
    ({**REGIONS, "floor": 0.5}, {}, "django_gcra.E086"),
    ({**REGIONS, "smoothing": 1.0}, {}, "django_gcra.E086"),
    ({**REGIONS, "max_step": 0}, {}, "django_gcra.E086"),
    (REGIONS, {"p": {**limit(), "budget": {"home": "tests.nowhere.home"}}}, "django_gcra.E088"),
    (REGIONS, {"p": {**limit(), "budget": {"home": "tests.test_regions.home_of", "away": 0}}}, "django_gcra.E088"),
    (None, {"p": {**limit(), "budget": "full"}}, "django_gcra.W080"),
])
def test_region_problems(gcra_settings, settings, regions, policies, expected):
    region_caches(settings, "us-redis")
    assert ids(gcra_settings, REGIONS=regions, POLICIES=policies) == [expected]


def test_cache_alias_other_than_the_local_regions(gcra_settings, settings):
    region_caches(settings, "us-redis", "other")
    assert ids(gcra_settings, REGIONS=REGIONS, CACHE_ALIAS="other") == ["django_gcra.E087"]
    assert ids(gcra_settings, REGIONS=REGIONS, CACHE_ALIAS="default") == []


def test_the_engine_follows_every_change_and_is_never_built_from_settings_in_error(gcra_settings):
    """The engine in force is built from the settings of the first decision after a
    change: a change retires it, and settings in error never build one (every decision
    keeps raising)."""
    from django_gcra import engine

    gcra_settings(**GOOD)
    decide("api", {"tenant": "acme", "user": None})
    good = engine.running
    assert good is not None and good.settings is get_settings() and "api" in good.settings.policies
    gcra_settings(TIMEOUT=0)
    assert engine.running is None
    for _ in range(2):
        with pytest.raises(ImproperlyConfigured, match="E040"):
            decide("api", {"tenant": "acme", "user": None})
        assert engine.running is None
    gcra_settings(**GOOD)
    assert engine.running is None
    decide("api", {"tenant": "acme", "user": None})
    assert engine.running is not good and engine.running.settings is get_settings()
