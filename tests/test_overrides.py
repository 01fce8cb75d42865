"""LimitOverride: matching, precedence, expiry, modes and hot reload (in this process)."""

from __future__ import annotations

import datetime
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.utils import timezone

from django_gcra import adecide, decide
from django_gcra.engine import current, retire
from django_gcra.models import LimitOverride
from django_gcra.overrides import version_key

POLICIES = {
    "api": {
        "limits": [
            {"name": "tenant", "key": ["tenant"], "rate": "1000/m", "burst": 2},
            {"name": "user", "key": ["tenant", "user"], "rate": "60/m", "burst": 2},
        ]
    },
    "tiered": {"limits": [{"name": "t", "key": ["tenant"], "rate": {"free": "1/m", "paid": "3/m"}}]},
}

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def policies(fake_redis, gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of", "tier": "tests.support.descriptors.tier_of"},
                  POLICIES=POLICIES)
    retire()
    yield
    retire()


def burst(policy="api", limit="tenant", **descriptors):
    decision = decide(policy, {"tenant": "acme", "user": None, **descriptors}, cost=0)
    state = next((s for s in decision.limits if s.name == limit), None)
    return None if state is None else state.burst


def test_without_overrides_the_configured_limit_applies():
    assert burst() == 2


def test_an_override_changes_rate_and_burst_for_its_match_only(save):
    save(policy="api", limit="tenant", match={"tenant": "acme"}, rate="10/s", burst=7)
    decision = decide("api", {"tenant": "acme", "user": None})
    assert (decision.limits[0].burst, decision.limits[0].rate.count, decision.remaining) == (7, 10, 6)
    assert burst(tenant="other") == 2


def test_a_rate_without_a_burst_takes_the_limits_burst_rule(save, gcra_settings):
    gcra_settings(POLICIES={"p": {"limits": [{"name": "l", "key": ["ip"], "rate": "5/m"}]}})
    save(policy="p", limit="l", match={}, rate="40/m")
    assert decide("p", {"ip": "1"}, cost=0).limits[0].burst == 40  # no configured burst: the rate's count


def test_the_most_specific_match_wins(save):
    save(policy="api", limit="user", match={}, burst=3)
    save(policy="api", limit="user", match={"tenant": "acme"}, burst=4)
    save(policy="api", limit="user", match={"tenant": "acme", "user": "7"}, burst=6)
    assert burst(limit="user", user="7") == 6
    assert burst(limit="user", user="8") == 4
    assert burst(limit="user", tenant="other", user="7") == 3


def test_among_equal_matches_the_latest_update_wins(save):
    save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=4)
    save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9)
    assert burst() == 9


def test_override_beats_tier_beats_default(save):
    assert decide("tiered", {"tenant": "a", "tier": "paid"}, cost=0).limits[0].burst == 3
    assert decide("tiered", {"tenant": "a", "tier": None}, cost=0).limits[0].burst == 1  # first tier listed
    save(policy="tiered", limit="t", match={"tenant": "a"}, rate="50/m")
    assert decide("tiered", {"tenant": "a", "tier": "paid"}, cost=0).limits[0].burst == 50
    assert decide("tiered", {"tenant": "b", "tier": "paid"}, cost=0).limits[0].burst == 3


def test_mode_off_skips_the_limit(save):
    save(policy="api", limit="tenant", match={"tenant": "acme"}, mode="off")
    assert burst() is None
    assert [decide("api", {"tenant": "acme", "user": None}).allowed for _ in range(5)] == [True] * 5


def test_mode_shadow_lets_would_denies_through(save):
    save(policy="api", limit="tenant", match={"tenant": "acme"}, mode="shadow")
    decisions = [decide("api", {"tenant": "acme", "user": None}) for _ in range(3)]
    assert all(d.allowed for d in decisions)
    assert decisions[-1].shadow and decisions[-1].would_retry_after > 0


def test_disabled_and_expired_overrides_do_not_apply(save):
    save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9, enabled=False)
    save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=8,
         expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert burst() == 2


def test_expiry_is_honoured_without_a_reload(save, django_assert_num_queries):
    save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9,
         expires_at=timezone.now() + datetime.timedelta(seconds=0.5))
    assert burst() == 9
    time.sleep(0.6)
    with django_assert_num_queries(0):
        assert burst() == 2


def test_deleting_restores_the_default(save, django_capture_on_commit_callbacks):
    override = save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9)
    assert burst() == 9
    with django_capture_on_commit_callbacks(execute=True):
        current().overrides.join(5)
        override.delete()
    assert burst() == 2


def test_an_override_reaches_a_key_decided_before_it(save, django_capture_on_commit_callbacks):
    assert burst() == 2  # this key's plan is now memoized
    override = save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=5)
    assert burst() == 5
    with django_capture_on_commit_callbacks(execute=True):
        current().overrides.join(5)
        override.delete()
    assert burst() == 2


def test_overrides_of_unknown_limits_or_bad_rates_are_ignored(save):
    save(policy="api", limit="nope", match={}, burst=9)
    save(policy="api", limit="tenant", match={}, rate="fast")
    assert burst() == 2


def test_no_database_query_per_request(save, django_assert_num_queries):
    save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9)
    assert burst() == 9  # loads
    with django_assert_num_queries(0):
        for _ in range(50):
            decide("api", {"tenant": "acme", "user": "1"})


@pytest.mark.django_db(transaction=True)  # the reload runs in a thread of its own: it sees committed rows
def test_a_bumped_version_stamp_reloads_within_the_refresh_interval(fake_redis, gcra_settings,
                                                                     django_assert_num_queries):
    gcra_settings(DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of"}, POLICIES=POLICIES, OVERRIDE_REFRESH=0.2)
    assert burst() == 2
    # as another process's commit lands: bulk_create sends no signal, so this process is not told
    LimitOverride.objects.bulk_create([LimitOverride(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9)])
    assert burst() == 2  # this process has not been told yet
    fake_redis.incr(version_key())  # what another process's commit does
    time.sleep(0.25)
    burst()  # the first decision after the interval starts the reload in the background
    assert current().overrides.join(5)
    assert burst() == 9


@pytest.mark.django_db(transaction=True)
def test_the_ttl_reloads_when_the_stamp_never_moves(gcra_settings):
    gcra_settings(DESCRIPTORS={"tenant": "tests.support.descriptors.tenant_of"}, POLICIES=POLICIES,
                  OVERRIDE_REFRESH=0.05, OVERRIDE_TTL=0.2)
    assert burst() == 2
    LimitOverride.objects.bulk_create([LimitOverride(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9)])
    time.sleep(0.3)
    burst()
    assert current().overrides.join(5)
    assert burst() == 9


def test_a_database_failure_keeps_the_last_overrides(save, monkeypatch, caplog):
    save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9)
    assert burst() == 9

    def broken():
        raise RuntimeError("database is down")

    monkeypatch.setattr("django_gcra.overrides.load_index", broken)
    current().overrides.expire()
    assert burst() == 9
    assert "could not load limit overrides" in caplog.text


def test_adecide_applies_overrides(save):
    import asyncio

    save(policy="api", limit="tenant", match={"tenant": "acme"}, burst=9)
    assert burst() == 9  # loaded in this thread (the test's database transaction)
    decision = asyncio.run(adecide("api", {"tenant": "acme", "user": None}))
    assert decision.limits[0].burst == 9


# --- Hot reload across processes: a real redis-server and a file SQLite database -------------

ROOT = Path(__file__).resolve().parent.parent
BROWSER_GCRA = {
    "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
    "POLICIES": {"browser": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/m", "burst": 2}]}},
    "OVERRIDE_REFRESH": 1.0,
}


def run(config: dict, *args: str) -> float:
    """Run one tests.support.plane_procs command to completion; return its commit time."""
    done = subprocess.run([sys.executable, "-m", "tests.support.plane_procs", json.dumps(config), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    return float(done.stdout.split("committed ")[-1])


class Watcher:
    """A second process printing the burst in force for tenant acme as it changes."""

    def __init__(self, config: dict, seconds: float = 30.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.plane_procs", json.dumps(config), "watch",
                                      str(seconds)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def wait_for(self, burst: object, timeout: float = 15.0) -> float:
        """The Unix time at which the watcher first saw ``burst`` in force."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            parts = line.split()
            if parts[:2] == ["burst", str(burst)]:
                return float(parts[2])
        self.proc.kill()
        raise AssertionError(f"the second process never saw burst {burst}: {self.proc.stderr.read()[-3000:]}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def deployment(tmp_path, redis_server):
    from tests.support.databases import scratch_database

    redis_server.client().flushall()
    with scratch_database(tmp_path) as db:  # SQLite, or PostgreSQL with DATABASE_URL
        config = {"db": db, "redis": redis_server.url, "gcra": BROWSER_GCRA}
        run(config, "migrate")
        watcher = Watcher(config)
        watcher.wait_for(2)  # the configured burst
        yield config, watcher
        watcher.stop()


@pytest.mark.redis
@pytest.mark.slow
def test_orm_save_and_delete_reach_a_second_process_within_two_seconds(deployment):
    config, watcher = deployment
    committed = run(config, "orm-save", json.dumps({"policy": "browser", "limit": "tenant",
                                                    "match": {"tenant": "acme"}, "burst": 50}))
    assert watcher.wait_for(50) - committed < 2.0
    deleted = run(config, "orm-delete")
    assert watcher.wait_for(2) - deleted < 2.0  # deleting restores the default


@pytest.mark.redis
@pytest.mark.slow
def test_admin_add_form_reaches_a_second_process_within_two_seconds(deployment):
    config, watcher = deployment
    form = {"policy": "browser", "limit": "tenant", "match": '{"tenant": "acme"}', "rate": "", "burst": "40",
            "mode": "enforce", "enabled": "on", "expires_at_0": "", "expires_at_1": "", "reason": "partner launch"}
    committed = run(config, "admin-add", json.dumps(form))
    assert watcher.wait_for(40) - committed < 2.0
    form.update(mode="off", reason="switch the limit off for acme")
    committed = run(config, "admin-add", json.dumps(form))
    assert watcher.wait_for("off") - committed < 2.0


@pytest.mark.redis
@pytest.mark.slow
def test_expiry_is_honoured_in_a_second_process(deployment):
    config, watcher = deployment
    expires = time.time() + 3.0
    run(config, "orm-save", json.dumps({"policy": "browser", "limit": "tenant", "match": {"tenant": "acme"},
                                        "burst": 30, "expires_at": datetime.datetime.fromtimestamp(
                                            expires, datetime.timezone.utc).isoformat()}))
    assert watcher.wait_for(30) < expires
    reverted = watcher.wait_for(2)
    assert expires <= reverted < expires + 0.5


async def test_in_an_event_loop_the_reload_runs_in_a_thread(monkeypatch):
    loaded = threading.Event()
    where = []

    def load():
        where.append(threading.current_thread().name)
        loaded.set()
        return {}

    monkeypatch.setattr("django_gcra.overrides.load_index", load)
    decision = await adecide("api", {"tenant": "acme", "user": None})
    assert decision.limits[0].burst == 2
    assert loaded.wait(5) and where == ["django_gcra-overrides"]
