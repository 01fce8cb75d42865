"""Concurrency limits' checks (E090-E094, W090, and the shared ones they reuse): every bad
value is reported with its ID, and the contract's example is clean."""

from __future__ import annotations

import pytest
from django.core import checks

TENANT = {"tenant": "tests.support.descriptors.tenant_of"}
GOOD = {"name": "running", "key": ["tenant"], "max": 2, "ttl": 60}


def ids(gcra_settings, policy):
    gcra_settings(DESCRIPTORS=TENANT, POLICIES={"p": policy})
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def test_the_contract_example_is_clean(gcra_settings):
    assert ids(gcra_settings, {"concurrency": [GOOD]}) == []
    assert ids(gcra_settings, {"limits": [{"name": "user", "key": ["tenant", "user"], "rate": "5/s"}],
                               "concurrency": [GOOD]}) == []


def test_a_global_limit_beside_keyed_rates_shares_one_slot(gcra_settings):
    # key [] has no descriptor in common with the rates: every key has the policy's hash tag (W002).
    assert ids(gcra_settings, {"limits": [{"name": "r", "key": ["tenant"], "rate": "5/s"}],
                               "concurrency": [{**GOOD, "key": []}]}) == ["django_gcra.W002"]


@pytest.mark.parametrize("concurrency, expected", [
    ("running", "django_gcra.E090"),
    ([], "django_gcra.E090"),
    (["running"], "django_gcra.E090"),
    ([{**GOOD, "key": "nope"}], "django_gcra.E091"),
    ([{**GOOD, "key": [1]}], "django_gcra.E091"),
    ([{**GOOD, "key": ["tenant", "tenant"]}], "django_gcra.E091"),
    ([{k: v for k, v in GOOD.items() if k != "key"}], "django_gcra.E091"),
    ([{**GOOD, "max": 0}], "django_gcra.E092"),
    ([{**GOOD, "max": 2.5}], "django_gcra.E092"),
    ([{**GOOD, "max": True}], "django_gcra.E092"),
    ([{**GOOD, "max": 10**9}], "django_gcra.E092"),
    ([{k: v for k, v in GOOD.items() if k != "max"}], "django_gcra.E092"),
    ([{**GOOD, "ttl": 0.5}], "django_gcra.E093"),
    ([{**GOOD, "ttl": float("inf")}], "django_gcra.E093"),
    ([{**GOOD, "ttl": "60"}], "django_gcra.E093"),
    ([{**GOOD, "ttl": 10**6}], "django_gcra.E093"),
    ([{**GOOD, "name": "bad name"}], "django_gcra.E010"),
    ([{**GOOD, "mode": "loud"}], "django_gcra.E009"),
    ([{**GOOD, "maxx": 2}], "django_gcra.E016"),
    ([GOOD, GOOD], "django_gcra.E008"),
])
def test_bad_values(gcra_settings, concurrency, expected):
    assert expected in ids(gcra_settings, {"concurrency": concurrency})


def test_a_name_shared_with_a_rate_limit(gcra_settings):
    assert "django_gcra.E008" in ids(gcra_settings, {"limits": [{"name": "running", "key": ["tenant"],
                                                                 "rate": "5/s"}], "concurrency": [GOOD]})


def test_a_lease_is_refused(gcra_settings):
    assert "django_gcra.E094" in ids(gcra_settings, {
        "limits": [{"name": "r", "key": ["tenant"], "rate": "1000/s", "burst": 100}],
        "concurrency": [GOOD], "lease": {"size": 10, "ttl": 1}})


def test_local_failover_of_a_global_limit_warns(gcra_settings):
    assert ids(gcra_settings, {"concurrency": [{**GOOD, "key": []}], "on_failure": "local"}) == ["django_gcra.W090"]
    assert ids(gcra_settings, {"concurrency": [GOOD], "on_failure": "local"}) == []


def test_a_policy_with_neither_limits_nor_concurrency(gcra_settings):
    assert "django_gcra.E005" in ids(gcra_settings, {"on_failure": "open"})


def test_inline_policies_raise(gcra_settings):
    from django.core.exceptions import ImproperlyConfigured

    from django_gcra.policy import build_policy

    with pytest.raises(ImproperlyConfigured, match="max"):
        build_policy("x", {"concurrency": [{**GOOD, "max": -1}]}, TENANT, "code")
