"""Prometheus counters and the decision signal contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from django_gcra import decide
from django_gcra.metrics import OUTCOMES, outcome_of
from django_gcra.signals import decision as decision_signal

GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {
        "m_api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 1}]},
        "m_trial": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 1}], "mode": "shadow"},
        "m_open": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m"}], "on_failure": "open"},
        "m_closed": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m"}], "on_failure": "closed"},
        "m_rolling": {"limits": [{"name": "log", "key": ["tenant"], "rate": "2/h", "algorithm": "sliding_log"},
                                 {"name": "win", "key": ["tenant"], "rate": "3/h", "algorithm": "sliding_window"}]},
    },
}


@pytest.fixture(autouse=True)
def policies(gcra_settings, monkeypatch):
    gcra_settings(**GCRA)
    monkeypatch.setattr("django_gcra.audit.recorder.record", lambda *a, **k: None)  # keep the audit out of it


def count(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_decisions_are_counted_by_policy_limit_and_outcome(fake_redis):
    before = {o: count("django_gcra_decisions_total", policy="m_api", limit="tenant", outcome=o) for o in OUTCOMES}
    for _ in range(3):
        decide("m_api", {"tenant": "acme"})
    after = {o: count("django_gcra_decisions_total", policy="m_api", limit="tenant", outcome=o) for o in OUTCOMES}
    assert after["allowed"] - before["allowed"] == 1
    assert after["denied"] - before["denied"] == 2
    shadow = count("django_gcra_decisions_total", policy="m_trial", limit="tenant", outcome="shadow_denied")
    decide("m_trial", {"tenant": "t"}), decide("m_trial", {"tenant": "t"})
    assert count("django_gcra_decisions_total", policy="m_trial", limit="tenant", outcome="shadow_denied") == shadow + 1


def test_sliding_limits_are_counted_like_any_limit(fake_redis):
    """(on the embedded fakeredis too: the script runs on its Lua as on Redis's)"""
    before = [count("django_gcra_decisions_total", policy="m_rolling", limit=lim, outcome=o)
              for lim, o in (("log", "allowed"), ("log", "denied"))]
    decisions = [decide("m_rolling", {"tenant": "acme"}) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False] and decisions[2].limit == "log"
    after = [count("django_gcra_decisions_total", policy="m_rolling", limit=lim, outcome=o)
             for lim, o in (("log", "allowed"), ("log", "denied"))]
    assert [a - b for a, b in zip(after, before)] == [2, 1]


def test_fallback_decisions_are_counted_apart(settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:9/0"}}
    opened = count("django_gcra_fallback_decisions_total", policy="m_open", outcome="fallback_allowed")
    closed = count("django_gcra_fallback_decisions_total", policy="m_closed", outcome="unavailable")
    healthy = count("django_gcra_decisions_total", policy="m_open", limit="", outcome="allowed")
    assert decide("m_open", {"tenant": "a"}).fallback
    assert decide("m_closed", {"tenant": "a"}).unavailable
    assert count("django_gcra_fallback_decisions_total", policy="m_open", outcome="fallback_allowed") == opened + 1
    assert count("django_gcra_fallback_decisions_total", policy="m_closed", outcome="unavailable") == closed + 1
    assert count("django_gcra_decisions_total", policy="m_open", limit="", outcome="allowed") == healthy  # not healthy


def test_no_key_or_descriptor_value_becomes_a_label(fake_redis):
    for _ in range(3):
        decide("m_api", {"tenant": "secret-tenant-4242"})
        decide("m_trial", {"tenant": "secret-tenant-4242"})
    for metric in REGISTRY.collect():
        if metric.name.startswith("django_gcra"):
            for sample in metric.samples:
                assert set(sample.labels) <= {"policy", "limit", "outcome"}
                assert not any("secret-tenant" in value for value in sample.labels.values())


def test_outcome_labels():
    from django_gcra.decision import Decision

    assert outcome_of(Decision(True, 0, 1, "l", "p")) == "allowed"
    assert outcome_of(Decision(False, 1, 0, "l", "p")) == "denied"
    assert outcome_of(Decision(True, 0, 0, "l", "p", shadow=True)) == "shadow_denied"
    assert outcome_of(Decision(False, 1, 0, "l", "p", fallback=True)) == "fallback_denied"
    assert outcome_of(Decision(True, 0, 0, "", "p", fallback=True)) == "fallback_allowed"
    assert outcome_of(Decision(False, 1, 0, "", "p", fallback=True, unavailable=True)) == "unavailable"


def test_the_decision_signal_contract(fake_redis):
    from django_gcra import audit, metrics, tally

    received = []

    def receiver(sender, decision, request, **kwargs):
        received.append((sender, decision, request))

    decision_signal.connect(receiver)
    try:
        result = decide("m_api", {"tenant": "sig"})
    finally:
        decision_signal.disconnect(receiver)
    assert received == [("m_api", result, None)]
    from django_gcra.signals import notable_observers, observers

    assert observers == [tally.on_decision]  # set in AppConfig.ready (and region_demand.on_decision with REGIONS)
    assert notable_observers == [audit.on_decision, metrics.on_decision]


def test_notable_observers_are_offered_exactly_the_decisions_that_are_not_a_plain_admission(monkeypatch):
    """The limiter's own test for a plain admission must agree with ``outcome_of``: a
    decision it wrongly took for plain would never reach the audit trail or the metrics."""
    from types import SimpleNamespace

    from django_gcra import outcomes
    from django_gcra.decision import Decision

    plain = Decision(allowed=True, retry_after=0.0, remaining=1, limit="l", policy="p")
    variants = [plain, plain._replace(allowed=False, retry_after=1.0), plain._replace(shadow=True, would_retry_after=1.0),
                plain._replace(fallback=True), plain._replace(allowed=False, fallback=True, retry_after=1.0),
                plain._replace(waited=0.25), plain._replace(allowed=False, fallback=True, unavailable=True)]
    every, notable = [], []
    monkeypatch.setattr(outcomes, "observers", [lambda sender, decision, request: every.append(decision)])
    monkeypatch.setattr(outcomes, "notable_observers", [lambda sender, decision, request: notable.append(decision)])
    for variant in variants:
        monkeypatch.setattr(outcomes, "_to_decision", lambda p, outcome, fallback, variant=variant: variant)
        assert outcomes.finish(SimpleNamespace(policy=SimpleNamespace(name="p")), None, None, (None, None)) is variant
    assert every == variants
    assert notable == [d for d in variants if outcome_of(d) != "allowed"] and len(notable) == 6


def test_without_prometheus_client_metrics_are_a_no_op():
    code = ("import sys; sys.modules['prometheus_client'] = None\n"
            "from django_gcra import metrics\n"
            "from django_gcra.decision import Decision\n"
            "assert not metrics.AVAILABLE\n"
            "metrics.on_decision(None, decision=Decision(False, 1, 0, 'l', 'p'))\n"
            "metrics.audit_failed(3)\n"
            "print('ok')")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_counter_follows_the_console_counts_once_each(fake_redis):
    """The decisions counter is fed from the console's counts (one count per decision):
    each decision is added once however often it is collected, and a flush of the counts
    brings it up to date without a scrape (multiprocess mode scrapes from another process)."""
    from django_gcra import metrics, tally

    child = metrics.DECISIONS.labels("m_api", "tenant", "allowed")
    count("django_gcra_decisions_total", policy="m_api", limit="tenant", outcome="allowed")  # up to date
    before = child._value.get()
    decide("m_api", {"tenant": "once-a"})
    tally.tally.flush()
    assert child._value.get() == before + 1
    for _ in range(3):
        metrics.export()
        assert count("django_gcra_decisions_total", policy="m_api", limit="tenant", outcome="allowed") == before + 1


def test_a_forked_child_counts_only_its_own_decisions(fake_redis):
    """The parent flushes and exports what it counted before the fork; a child starts with
    no counts (a copy would be written to Redis and exported twice)."""
    import os

    from django_gcra import tally

    decide("m_api", {"tenant": "before-fork"})
    assert tally.tally.decision_totals()  # pending, or flushed into the totals
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        try:
            ok = not tally.tally.decision_totals() and not tally.tally.pending and not tally.tally.lock.locked()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    assert tally.tally.decision_totals()  # the parent's are its own still
