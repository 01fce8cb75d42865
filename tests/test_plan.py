"""The planner (``plan.Planner``) of the engine in force: a plan per input, memoized
(never across descriptor types, Policy objects or configurations), the bounded memo, and
the backend each plan carries from its construction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from django_gcra import decide
from django_gcra.engine import current
from django_gcra.plan import get_policy

POLICIES = {
    "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 2}], "on_failure": "closed"},
    "leased": {"limits": [{"name": "k", "key": ["ip"], "rate": "100/s", "burst": 100}],
               "lease": {"size": 10, "ttl": 1.0}},
}


@pytest.fixture(autouse=True)
def policies(fake_redis, gcra_settings):
    gcra_settings(POLICIES=POLICIES)


def test_a_plan_is_memoized_per_input_and_never_across_types_or_configurations(gcra_settings):
    first = current().plan("login", {"ip": 7})
    assert current().plan("login", {"ip": "7"}) is first and current().plan("login", {"ip": 7}, cost=2) is not first
    assert current().plan("login", {"ip": 7}, cost=2).cost == 2
    assert current().planner.plan("login", {"ip": 7}) is first  # Engine.plan is its planner's
    with pytest.raises(TypeError, match="descriptor 'ip'"):
        decide("login", {"ip": True})  # True == 1 as a dict key: the memo must not answer for it
    with pytest.raises(TypeError, match="descriptor 'ip'"):
        current().plan("login", {"ip": True})
    gcra_settings(POLICIES={"login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "9/m"}]}})
    reloaded = current().plan("login", {"ip": 7})
    assert reloaded is not first and reloaded.limits[0].rate.count == 9


def test_the_decisions_use_the_memoized_plan(fake_redis):
    decide("login", {"ip": "m"})
    [memoized] = current().planner.memo.snapshot()
    assert memoized is current().plan("login", {"ip": "m"})
    decide("login", {"ip": "m"})
    assert current().planner.memo.snapshot() == [memoized]  # the second decision resolved nothing new


def test_an_equal_policy_object_gets_its_own_plan():
    policy = get_policy("login")
    configured = current().plan("login", {"ip": "o"})
    other = replace(policy)  # equal, not the same object: a hit must be of the same Policy object
    theirs = current().plan(other, {"ip": "o"})
    assert theirs is not configured and theirs.policy is other
    assert current().plan("login", {"ip": "o"}).policy is policy


def test_a_full_plan_memo_admits_nothing_new_until_its_refill_time(monkeypatch):
    now = [100.0]
    planner = current().planner
    memo = planner.memo
    for name, value in (("size", 2), ("refill_after", 10.0), ("clock", lambda: now[0]), ("next_refill", 110.0)):
        monkeypatch.setattr(memo, name, value)
    memo.clear()
    a = planner.plan("login", {"ip": "a"})
    assert planner.plan("login", {"ip": "a"}) is a
    planner.plan("login", {"ip": "b"})
    assert planner.plan("login", {"ip": "c"}) is not planner.plan("login", {"ip": "c"})  # full: not admitted
    assert planner.plan("login", {"ip": "a"}) is a  # the plans it holds stay
    now[0] = 110.0
    c = planner.plan("login", {"ip": "c"})  # refill time: emptied, and c admitted
    assert planner.plan("login", {"ip": "c"}) is c and list(memo.plans) == [("login", 1, None, "c")]


def test_a_plan_carries_the_backend_of_its_policy_from_its_construction(monkeypatch):
    engine = current()
    plain = engine.plan("login", {"ip": "b"})
    assert plain.backend is engine.backend_for(plain.policy) is engine.stores.backend()
    leased = engine.plan("leased", {"ip": "b"})
    assert leased.backend is engine.backend_for(leased.policy) and leased.backend is not plain.backend
    assert leased.backend.inner is engine.stores.backend()  # the lease wrapper around the store
    monkeypatch.setattr(engine.planner.memo, "size", 0)  # not memoized (a full memo, or overrides)
    assert engine.plan("login", {"ip": "n"}).backend is plain.backend
