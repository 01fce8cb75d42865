"""Sliding limits through decide() on a real redis-server: mixed composites in one script
call, all-or-nothing both ways, the binding limit, headers, shadow mode, tiers,
overrides, the local fallback, the audit trail and the decision signal."""

from __future__ import annotations

import time

import pytest

from django_gcra import decide
from django_gcra.audit import AuditRecorder
from django_gcra.engine import current, retire
from django_gcra.models import LimitOverride
from django_gcra.signals import decision as decision_signal

pytestmark = pytest.mark.redis

TENANT = "tests.support.descriptors.tenant_of"


def lim(name, rate, algorithm, **extra):
    return {"name": name, "key": ["tenant"], "rate": rate, "algorithm": algorithm, **extra}


POLICIES = {
    "log": {"limits": [lim("exports", "3/h", "sliding_log")]},
    "win": {"limits": [lim("calls", "3/h", "sliding_window")]},
    # GCRA 10/s burst 2 on the tenant, a log of 5 per hour on the tenant and user
    "mixed": {"limits": [{"name": "g", "key": ["tenant"], "rate": "10/s", "burst": 2},
                         {**lim("l", "5/h", "sliding_log"), "key": ["tenant", "user"]},
                         lim("w", "100/h", "sliding_window")]},
    "shadowed": {"limits": [lim("hard", "10/h", "sliding_log"), lim("trial", "1/h", "sliding_log", mode="shadow")]},
    "tiered": {"limits": [lim("t", {"free": "1/h", "paid": "3/h"}, "sliding_window")]},
    **{f"fast_{a}": {"limits": [lim("f", "2/s", a)]} for a in ("gcra", "sliding_log", "sliding_window")},
    "local": {"limits": [lim("l", "4/h", "sliding_log"), lim("w", "6/h", "sliding_window",
                                                                 fallback_rate="2/h")],
              "on_failure": "local"},
}


@pytest.fixture(autouse=True)
def policies(real_redis, gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": TENANT, "tier": "tests.support.descriptors.tier_of"}, POLICIES=POLICIES,
                  FALLBACK_PROCESSES=2)
    retire()
    current()  # built now: an override's commit reloads it in this thread (the one that sees the test's transaction)
    yield real_redis
    retire()


def evalsha_calls(client) -> int:
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def test_a_sliding_log_admits_n_then_waits_for_the_oldest(real_redis):
    decisions = [decide("log", {"tenant": "a"}) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions[:3]] == [2, 1, 0]
    denied = decisions[3]
    assert denied.limit == "exports" and 3590 < denied.retry_after <= 3600
    assert real_redis.zcard(current().plan("log", {"tenant": "a"}).specs[0].key) == 3  # the denial wrote nothing
    headers = denied.headers()
    assert headers["Retry-After"] == "3600"
    assert headers["RateLimit-Policy"] == '"exports";q=3;w=3600'
    assert headers["RateLimit"] == '"exports";r=0;t=3600'
    # An allowed decision's t: the seconds until the oldest entry leaves.
    fresh = decide("log", {"tenant": "b"}).headers()
    assert fresh["RateLimit"] == '"exports";r=2;t=3600' and fresh["X-RateLimit-Limit"] == "3"


def test_a_weighted_window_admits_n_in_a_window(real_redis):
    decisions = [decide("win", {"tenant": "a"}) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert 0 < decisions[3].retry_after <= 2 * 3600
    assert real_redis.get(current().plan("win", {"tenant": "a"}).specs[0].key).endswith(b":3:0")
    assert decide("win", {"tenant": "a"}, cost=0).remaining == 0  # a peek


def test_cost_counts_units_and_a_cost_above_n_is_never_satisfiable():
    assert decide("log", {"tenant": "c"}, cost=2).remaining == 1
    assert not decide("log", {"tenant": "c"}, cost=2).allowed
    never = decide("log", {"tenant": "c"}, cost=4)
    assert never.impossible and "Retry-After" not in never.headers()


def test_a_mixed_composite_is_one_script_call(real_redis):
    decide("mixed", {"tenant": "t", "user": "u"})  # loads the script
    before = evalsha_calls(real_redis)
    for _ in range(10):
        decide("mixed", {"tenant": "t", "user": "u"})
    assert evalsha_calls(real_redis) - before == 10


def test_mixed_all_or_nothing_both_ways(real_redis):
    specs = current().plan("mixed", {"tenant": "t", "user": "u"}).specs
    gcra_key, log_key, win_key = (s.key for s in specs)
    assert [decide("mixed", {"tenant": "t", "user": "u"}).allowed for _ in range(2)] == [True, True]
    # The GCRA burst of 2 is spent: its denial consumes no log entry and no counter unit.
    denied = decide("mixed", {"tenant": "t", "user": "u"})
    assert not denied.allowed and denied.limit == "g"
    assert real_redis.zcard(log_key) == 2 and real_redis.get(win_key).endswith(b":2:0")
    time.sleep(0.25)  # GCRA refills its 2 units; the log still holds 2 of 5
    assert decide("mixed", {"tenant": "t", "user": "u"}, cost=2).allowed
    assert real_redis.zcard(log_key) == 4
    # Now the log denies (4 + 2 > 5): the GCRA TAT and the counter are left as they were.
    time.sleep(0.25)
    tat, window = real_redis.get(gcra_key), real_redis.get(win_key)
    log_denied = decide("mixed", {"tenant": "t", "user": "u"}, cost=2)
    assert not log_denied.allowed and log_denied.limit == "l" and 3590 < log_denied.retry_after <= 3600
    assert (real_redis.get(gcra_key), real_redis.get(win_key), real_redis.zcard(log_key)) == (tat, window, 4)


def test_the_binding_limit_is_the_one_with_the_longest_wait():
    assert decide("mixed", {"tenant": "x", "user": "y"}, cost=2).allowed
    time.sleep(0.25)  # GCRA refills
    assert decide("mixed", {"tenant": "x", "user": "y"}, cost=2).allowed  # GCRA empty; the log holds 4 of 5
    both = decide("mixed", {"tenant": "x", "user": "y"}, cost=2)  # both deny: GCRA 200 ms, the log an hour
    assert not both.allowed and both.limit == "l" and both.retry_after > 3000
    gcra_only = decide("mixed", {"tenant": "x", "user": "z"}, cost=2)  # a fresh user: only GCRA denies
    assert not gcra_only.allowed and gcra_only.limit == "g" and gcra_only.retry_after <= 0.2


def test_shadow_sliding_limit_reports_without_denying():
    assert decide("shadowed", {"tenant": "s"}).allowed
    second = decide("shadowed", {"tenant": "s"})
    assert second.allowed and second.shadow and second.would_retry_after > 3000
    assert second.limit == "trial"  # the would-deny binds, as for GCRA
    assert second.remaining == 8  # the enforced limit counted both


def test_tiers_pick_the_sliding_rate():
    assert [decide("tiered", {"tenant": "f", "tier": "free"}).allowed for _ in range(2)] == [True, False]
    assert [decide("tiered", {"tenant": "p", "tier": "paid"}).allowed for _ in range(4)] == [True] * 3 + [False]


@pytest.mark.django_db
def test_an_override_changes_n_and_the_period(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        LimitOverride.objects.create(policy="log", limit="exports", match={"tenant": "big"}, rate="5/2h")
    decisions = [decide("log", {"tenant": "big"}) for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    assert 7190 < decisions[5].retry_after <= 7200
    assert decisions[0].headers()["RateLimit-Policy"] == '"exports";q=5;w=7200'
    assert [decide("log", {"tenant": "small"}).allowed for _ in range(4)] == [True] * 3 + [False]


@pytest.mark.django_db
def test_an_override_with_a_burst_on_a_sliding_limit_is_ignored(django_capture_on_commit_callbacks, caplog):
    with django_capture_on_commit_callbacks(execute=True):
        LimitOverride.objects.create(policy="log", limit="exports", rate="50/h", burst=50)
    assert decide("log", {"tenant": "o"}, cost=0).limits[0].burst == 3
    assert "takes no burst" in caplog.text


def test_local_fallback_runs_the_same_algorithms(settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}}
    decisions = [decide("local", {"tenant": "f"}) for _ in range(4)]
    assert all(d.fallback for d in decisions)
    # The log 4/h over FALLBACK_PROCESSES=2: 2; the window's fallback_rate: 2 per hour too.
    assert [d.allowed for d in decisions] == [True, True, False, False]
    assert decisions[2].retry_after > 3000
    [state] = current().failures.local_backend.read_states(current().plan("local", {"tenant": "f"}).specs[:1])
    assert len(state) == 2  # two entries in the process's log (the CACHES change built a new engine)


def test_audit_and_signal_see_sliding_denials(monkeypatch):
    recorder = AuditRecorder(autostart=False)
    monkeypatch.setattr("django_gcra.audit.recorder", recorder)
    seen = []

    def receiver(sender, decision, **kwargs):
        seen.append((sender, decision.allowed, decision.limit, decision.limits[0].algorithm))

    decision_signal.connect(receiver)
    try:
        for _ in range(4):
            decide("log", {"tenant": "audited"})
    finally:
        decision_signal.disconnect(receiver)
    assert seen[-1] == ("log", False, "exports", "sliding_log")
    assert [(b[0], b[1], b[3]) for b in recorder.buffer] == [("log", "exports", "denied")]


@pytest.mark.parametrize("algorithm", ["gcra", "sliding_log", "sliding_window"])
def test_waiting_the_retry_after_header_is_enough(algorithm):
    """Real time: a client that sleeps the whole seconds of Retry-After is admitted (the
    microsecond-exact version runs on the script's clock in test_lua_twin)."""
    policy = f"fast_{algorithm}"
    for _ in range(10):
        decision = decide(policy, {"tenant": "r"})
        if not decision.allowed:
            break
    assert not decision.allowed
    time.sleep(int(decision.headers()["Retry-After"]))
    assert decide(policy, {"tenant": "r"}).allowed
