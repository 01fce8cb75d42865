"""decide() on the embedded fakeredis: inputs, tiers, skipping, shadow and failure policy."""

from __future__ import annotations

import time

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_gcra import Decision, decide
from django_gcra.signals import decision as decision_signal

POLICIES = {
    "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 2}], "on_failure": "closed"},
    "api": {
        "limits": [
            {"name": "tenant", "key": ["tenant"], "rate": "1000/m", "burst": 5},
            {"name": "user", "key": ["tenant", "user"], "rate": "50/m", "burst": 2},
        ]
    },
    "export": {
        "limits": [{"name": "tenant", "key": ["tenant"], "burst": 1, "rate": {"free": "60/m", "paid": "6000/m"}}],
        "mode": "shadow",
    },
    "tiered": {"limits": [{"name": "t", "key": ["tenant"], "rate": {"free": "1/m", "paid": "3/m"}}]},
    "mixed": {
        "limits": [
            {"name": "hard", "key": ["ip"], "rate": "10/m", "burst": 3},
            {"name": "trial", "key": ["ip"], "rate": "1/m", "burst": 1, "mode": "shadow"},
        ]
    },
}


@pytest.fixture(autouse=True)
def policies(fake_redis, gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of", "tier": "tests.support.descriptors.tier_of"},
                  POLICIES=POLICIES)


def test_decision_fields():
    decision = decide("login", {"ip": "1.2.3.4"})
    assert isinstance(decision, Decision)
    assert (decision.allowed, decision.retry_after, decision.remaining, decision.limit) == (True, 0.0, 1, "ip")
    assert (decision.shadow, decision.fallback, decision.policy) == (False, False, "login")
    assert decision.descriptors == {"ip": "1.2.3.4"}


def test_the_fast_admitted_constructor_equals_the_keyword_one():
    from django_gcra.decision import LimitState, admitted
    from django_gcra.rates import Rate

    state = LimitState("ip", Rate(5, 60), 2, 1, 12.5, "enforce", "gcra")
    settlement = ["settlers", "plan", 7]
    fast = admitted(1, "ip", "login", 3, 12.5, state, {"ip": "a"}, settlement)
    slow = Decision(allowed=True, retry_after=0.0, remaining=1, limit="ip", policy="login", cost=3, reset_after=12.5,
                    limits=(state,), descriptors={"ip": "a"}, settlement=settlement)
    assert len(fast) == len(Decision._fields)
    assert {f: getattr(fast, f) for f in Decision._fields} == {f: getattr(slow, f) for f in Decision._fields}
    assert fast == slow and type(fast) is Decision


async def test_adecide_on_fakeredis_offloads_to_a_thread():
    from django_gcra import adecide
    from django_gcra.engine import current

    assert (await adecide("login", {"ip": "fake"})).remaining == 1
    assert current().stores.async_client("default") is None  # fakeredis has no asyncio twin here


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(KeyError, match="unknown rate-limit policy 'nope'.*login"):
        decide("nope", {})


def test_missing_descriptor_is_a_clear_error():
    with pytest.raises(KeyError, match="needs descriptor 'user'"):
        decide("api", {"tenant": "acme"})


@pytest.mark.parametrize("cost, error", [(-1, ValueError), (1.5, TypeError), ("2", TypeError), (True, TypeError)])
def test_bad_cost_is_a_clear_error(cost, error):
    with pytest.raises(error, match="cost"):
        decide("login", {"ip": "1"}, cost=cost)


def test_bad_descriptor_value_type():
    with pytest.raises(TypeError, match="descriptor 'ip'"):
        decide("login", {"ip": ["1"]})


def test_none_descriptor_skips_its_limits():
    decisions = [decide("api", {"tenant": "acme", "user": None}) for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert decisions[-1].limit == "tenant"


def test_all_limits_skipped_allows_without_quota():
    decision = decide("login", {"ip": None})
    assert decision.allowed and decision.limits == () and decision.headers() == {}


def test_composite_binding_limit_is_user():
    assert decide("api", {"tenant": "a", "user": "1"}).remaining == 1
    decide("api", {"tenant": "a", "user": "1"})
    denied = decide("api", {"tenant": "a", "user": "1"})
    assert not denied.allowed and denied.limit == "user"
    assert {s.name: s.remaining for s in denied.limits} == {"tenant": 3, "user": 0}


def test_tiers_pick_the_rate_and_default_to_the_first_tier():
    assert [decide("tiered", {"tenant": "p", "tier": "paid"}).allowed for _ in range(4)] == [True] * 3 + [False]
    assert [decide("tiered", {"tenant": "f", "tier": None}).allowed for _ in range(2)] == [True, False]
    assert [decide("tiered", {"tenant": "u", "tier": "gold"}).allowed for _ in range(2)] == [True, False]


def test_default_tier_setting(gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of"}, POLICIES=POLICIES, DEFAULT_TIER="paid")
    assert [decide("tiered", {"tenant": "x", "tier": None}).allowed for _ in range(4)] == [True] * 3 + [False]


def test_policy_shadow_never_denies_but_says_so():
    started = time.monotonic()
    first = decide("export", {"tenant": "acme", "tier": "free"})
    second = decide("export", {"tenant": "acme", "tier": "free"})
    elapsed = time.monotonic() - started  # (a busy machine: the wait shrinks by the time between them)
    assert first.allowed and not first.shadow
    assert second.allowed and second.shadow and second.retry_after == 0
    assert 1.0 - elapsed - 0.002 <= second.would_retry_after <= 1.0 + 0.002


def test_limit_shadow_does_not_stop_enforced_limits_consuming():
    results = [decide("mixed", {"ip": "9"}) for _ in range(4)]
    assert [r.allowed for r in results] == [True, True, True, False]
    assert [r.shadow for r in results[:3]] == [False, True, True]
    assert results[3].limit == "hard"


def test_signal_sent_per_decision():
    seen = []

    def receiver(sender, decision, request, **kwargs):
        seen.append((sender, decision.allowed, request))

    decision_signal.connect(receiver)
    try:
        decide("login", {"ip": "5"}, request="req")
    finally:
        decision_signal.disconnect(receiver)
    assert seen == [("login", True, "req")]


def test_bad_configuration_refuses_to_decide(gcra_settings):
    gcra_settings(POLICIES={"bad": {"limits": [{"name": "x", "key": ["ip"], "rate": "5/fortnight"}]}})
    with pytest.raises(ImproperlyConfigured, match="fortnight"):
        decide("bad", {"ip": "1"})


class TestFailurePolicy:
    @pytest.fixture(autouse=True)
    def dead_redis(self, settings):
        from tests.support.servers import free_port

        settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                       "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}

    def test_open_allows_and_flags_fallback(self):
        decision = decide("api", {"tenant": "a", "user": "1"})
        assert decision.allowed and decision.fallback

    def test_closed_denies_and_flags_fallback(self):
        decision = decide("login", {"ip": "1"})
        assert not decision.allowed and decision.fallback and decision.unavailable and decision.retry_after > 0

    def test_local_uses_the_fallback_rate_in_process(self, gcra_settings):
        gcra_settings(POLICIES={"search": {
            "limits": [{"name": "key", "key": ["ip"], "rate": "500/s", "burst": 100, "fallback_rate": "2/m"}],
            "on_failure": "local"}})
        results = [decide("search", {"ip": "local-test"}) for _ in range(3)]
        assert [r.allowed for r in results] == [True, True, False]
        assert all(r.fallback for r in results)
