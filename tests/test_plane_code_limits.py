"""Every limit in the plane: inline ``@ratelimit`` limits and DRF scopes are listed,
overridable (rate, burst, mode, match) exactly like a settings policy's limits, previewed
by the form, inspectable with ``gcra_inspect`` and known to ``gcra_status`` and the checks."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from django_gcra import catalog
from django_gcra.checks import check_overrides
from django_gcra.engine import current, retire
from django_gcra.forms import LimitOverrideForm
from django_gcra.models import LimitOverride
from tests.plane_urls import INLINE_POLICY

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.plane_urls")]

GCRA = {"DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
        "POLICIES": {"browser": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "6/m", "burst": 2}]}}}
RATES = {"DEFAULT_THROTTLE_RATES": {"uploads": "4/m", "anon:v1": "10/h"}}


@pytest.fixture(autouse=True)
def plane(gcra_settings, settings):
    settings.ROOT_URLCONF = "tests.plane_urls"
    settings.REST_FRAMEWORK = RATES
    gcra_settings(**GCRA)
    retire()
    yield
    retire()


def statuses(path, n, **extra):
    client = Client()
    return [client.get(path, **extra).status_code for _ in range(n)]


def bodies(path, n, **extra):
    client = Client()
    return [client.get(path, **extra).json() for _ in range(n)]


def test_discover_lists_the_inline_limits_and_drf_scopes_beside_the_settings_policies():
    assert catalog.discover() == ""
    found = catalog.policies()
    assert {"browser", INLINE_POLICY, "drf.uploads", f"drf.{catalog.scope_name('anon:v1')}"} <= set(found)
    assert [lim.name for lim in found[INLINE_POLICY].limits] == ["view"]
    assert [lim.name for lim in found["drf.uploads"].limits] == ["uploads"]
    assert (catalog.origin("browser"), catalog.origin(INLINE_POLICY), catalog.origin("drf.uploads"),
            catalog.origin("nope")) == ("settings", "inline", "drf", "")


def test_a_urlconf_that_does_not_import_is_reported(settings):
    settings.ROOT_URLCONF = "tests.no_such_urlconf"
    assert "ROOT_URLCONF does not import: ModuleNotFoundError" in catalog.discover()


def test_an_override_of_an_inline_limit_changes_its_rate_and_burst_for_its_match(fake_redis, save):
    assert statuses("/inline/", 3) == [200, 200, 429]  # as decorated: burst 2
    fake_redis.flushall()
    save(policy=INLINE_POLICY, limit="view", match={"ip": "127.0.0.1"}, rate="600/m", burst=5)
    seen = bodies("/inline/", 5)
    assert [b["burst"] for b in seen] == [5] * 5 and [b["remaining"] for b in seen] == [4, 3, 2, 1, 0]
    assert statuses("/inline/", 1) == [429]
    assert statuses("/inline/", 3, REMOTE_ADDR="10.0.0.9") == [200, 200, 429]  # another ip: as decorated


@pytest.mark.parametrize("mode, expected", [("shadow", [200] * 4), ("off", [200] * 4)])
def test_an_inline_limit_can_be_put_in_shadow_or_turned_off(fake_redis, save, mode, expected):
    save(policy=INLINE_POLICY, limit="view", match={}, mode=mode)
    assert statuses("/inline/", 4) == expected
    last = bodies("/inline/", 1)[0]
    assert last["shadow"] is (mode == "shadow") and (last["burst"] is None) is (mode == "off")


def test_an_override_of_a_drf_scope_takes_effect(fake_redis, save):
    assert statuses("/uploads/", 5) == [200] * 4 + [429]  # 4/m: burst 4
    fake_redis.flushall()
    save(policy="drf.uploads", limit="uploads", match={}, burst=6, reason="batch import")
    seen = bodies("/uploads/", 6)
    assert [b["burst"] for b in seen] == [6] * 6
    assert statuses("/uploads/", 1) == [429]


@pytest.mark.django_db(transaction=True)  # the reload runs in a thread of its own: it must see the row
def test_an_override_saved_before_a_scope_is_first_seen_applies_once_it_is(fake_redis, save):
    catalog._code.pop("drf.uploads", None)  # this process has not built the scope's policy yet
    catalog._throttle_policy.cache_clear()
    save(policy="drf.uploads", limit="uploads", match={}, burst=1)
    assert current().overrides.get() == {}  # the index knew no such limit when it loaded
    assert statuses("/uploads/", 1) == [200]  # registers drf.uploads: the index reloads, in the background
    assert current().overrides.join(5)
    assert "drf.uploads" in current().overrides.get()
    assert statuses("/uploads/", 1) == [429]  # burst 1 (as configured, 4 would admit it)


def test_an_override_of_a_drf_scope_matches_on_the_cache_key(fake_redis, save):
    key = "throttle_uploads_127.0.0.1"  # DRF's cache key: throttle_<scope>_<ident>
    save(policy="drf.uploads", limit="uploads", match={"cache_key": key}, mode="off")
    assert statuses("/uploads/", 6) == [200] * 6
    assert statuses("/uploads/", 5, REMOTE_ADDR="10.0.0.9") == [200] * 4 + [429]


def test_the_form_offers_inline_and_drf_limits_and_validates_them():
    form = LimitOverrideForm()
    policies = dict(form.fields["policy"].choices)
    assert policies[INLINE_POLICY] == f"{INLINE_POLICY} (@ratelimit)" and policies["drf.uploads"] == \
        "drf.uploads (DRF scope)" and policies["browser"] == "browser"
    groups = dict(form.fields["limit"].choices)
    assert [v for v, _ in groups[INLINE_POLICY]] == ["view"] and [v for v, _ in groups["drf.uploads"]] == ["uploads"]
    table = form.limits_table
    assert table[INLINE_POLICY]["limits"]["view"]["rates"] == {"": "3/m"}
    assert table[INLINE_POLICY]["limits"]["view"]["burst"] == 2 and table["drf.uploads"]["origin"] == "drf"
    good = LimitOverrideForm(data={"policy": INLINE_POLICY, "limit": "view", "match": "ip=10.0.0.1",
                                   "rate": "10/m", "mode": "enforce", "enabled": "on"})
    assert good.is_valid(), good.errors
    bad = LimitOverrideForm(data={"policy": "drf.uploads", "limit": "uploads", "match": "tenant=acme",
                                  "mode": "enforce", "enabled": "on"})
    assert not bad.is_valid()
    assert "does not use descriptor(s) tenant; it uses cache_key, rate" in str(bad.errors["match"])


def test_gcra_inspect_shows_an_inline_limit_and_a_drf_scope_with_their_overrides(fake_redis, save):
    save(policy=INLINE_POLICY, limit="view", match={"ip": "10.0.0.1"}, burst=9)
    assert statuses("/inline/", 2, REMOTE_ADDR="10.0.0.1") == [200, 200]
    out = StringIO()
    call_command("gcra_inspect", INLINE_POLICY, "ip=10.0.0.1", "--json", stdout=out)
    row = json.loads(out.getvalue())["limits"][0]
    assert (row["limit"], row["burst"], row["remaining"]) == ("view", 9, 7)
    out = StringIO()
    call_command("gcra_inspect", "drf.uploads", "cache_key=throttle_uploads_127.0.0.1", "rate=4/4", "--json",
                 stdout=out)
    row = json.loads(out.getvalue())["limits"][0]
    assert (row["limit"], row["burst"], row["remaining"]) == ("uploads", 4, 4)


def test_gcra_inspect_names_the_known_policies_when_one_is_unknown():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=r"unknown rate-limit policy 'nope' \(known: .*drf\.uploads.*view\."):
        call_command("gcra_inspect", "nope")


def test_gcra_status_names_the_policy_and_limit_of_each_code_limit():
    out = StringIO()
    call_command("gcra_status", stdout=out)
    text = out.getvalue()
    assert f"- {INLINE_POLICY} [enforce] key ip: 3/m, burst 2, on_failure open (limit view)" in text
    assert "- uploads: 4/m (policy drf.uploads, limit uploads)" in text


def test_an_override_of_an_inline_limit_is_not_reported_stale(save):
    save(policy=INLINE_POLICY, limit="view", match={}, burst=3)
    save(policy="view.gone", limit="view", match={}, burst=3)
    messages = check_overrides(databases=["default"])
    gone = LimitOverride.objects.get(policy="view.gone").pk
    stale = f"LimitOverride {gone} overrides view.gone.view, which is not configured; it is ignored."
    assert [m.msg for m in messages] == [stale]


@pytest.mark.redis
def test_an_inline_override_against_a_real_redis_server(real_redis, save):
    save(policy=INLINE_POLICY, limit="view", match={}, rate="1/h", burst=1)
    assert statuses("/inline/", 2) == [200, 429]
    keys = [k.decode() for k in real_redis.keys("*")]
    assert any(INLINE_POLICY in k and k.endswith(":view:127.0.0.1") for k in keys), keys
