"""System checks of the resilience settings: django_gcra.E040-E049 / W040-W049."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from django_gcra.backends.settings import breaker_params, fallback_processes, timeouts

LOCAL = {"p": {"limits": [{"name": "l", "key": ["ip"], "rate": "10/s"}], "on_failure": "local"}}


def ids(gcra_settings, **values):
    gcra_settings(**values)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def test_defaults_are_clean_and_tight(settings):
    settings.DJANGO_GCRA = {}
    assert checks.run_checks(tags=["django_gcra"]) == []
    read, connect = timeouts()
    assert read == connect == 0.01
    assert breaker_params() == (5, 1.0)


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
        timeouts()
    with pytest.raises(ImproperlyConfigured, match="E042"):
        fallback_processes()


@pytest.mark.parametrize("location, expected", [
    (["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"], []),
    (["127.0.0.1:7000"], ["django_gcra.E044"]),
    ("", ["django_gcra.E044"]),
])
def test_cluster_startup_nodes_are_checked(settings, gcra_settings, location, expected):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location,
                                   "OPTIONS": {"CLIENT_CLASS": "django_gcra.backends.cluster.ClusterClient"}}}
    assert ids(gcra_settings) == expected
