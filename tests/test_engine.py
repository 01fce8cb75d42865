"""The engine (``django_gcra.engine``): one per configuration, built on first use, retired
(its background workers stopped, its queued slot releases sent) when the settings change;
a forked child builds its own; ``decide`` is the engine in force's. On a real redis-server."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time

import pytest
from django.test import override_settings

import django_gcra
from django_gcra import adecide, decide, engine
from django_gcra.backends.lease_backend import HOT_AFTER
from django_gcra.engine import current, retire
from django_gcra.fallback import status
from django_gcra.leases import lease_stats
from django_gcra.reset import forget_process_state

pytestmark = pytest.mark.redis

LOGIN = {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 2}]}
# Refills one unit per 36 s: the remaining counts below are exact.
SEARCH = {"limits": [{"name": "k", "key": ["ip"], "rate": "100/h", "burst": 100}], "lease": {"size": 10, "ttl": 30.0}}
PREFETCHED = {"limits": [{"name": "k", "key": ["ip"], "rate": "1000/s", "burst": 1000}],
              "lease": {"size": 10, "ttl": 5.0, "low_water": 3}}
RUN = {"concurrency": [{"name": "running", "key": ["ip"], "max": 2, "ttl": 5}]}
POLICIES = {"login": LOGIN, "search": SEARCH, "prefetched": PREFETCHED, "run": RUN}


@pytest.fixture(autouse=True)
def policies(real_redis, gcra_settings):
    gcra_settings(POLICIES=POLICIES)
    yield real_redis
    retire()


def engine_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("django_gcra-")]


# -- one engine per configuration ---------------------------------------------------------

def test_the_same_engine_decides_until_the_settings_change(gcra_settings):
    assert engine.running is None  # the settings just changed: none built yet
    first = decide("login", {"ip": "e"})
    built = engine.running
    assert built is not None and current() is built
    assert decide("login", {"ip": "e"}).remaining == first.remaining - 1 and engine.running is built
    assert built.settings.policies["login"].limits[0].burst == 2
    gcra_settings(POLICIES={**POLICIES, "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 9}]}})
    assert engine.running is None  # retired by the change
    after = decide("login", {"ip": "e2"})
    assert engine.running is not None and engine.running is not built
    assert after.allowed and after.limits[0].burst == 9 and after.remaining == 8  # the new limits


def test_override_settings_and_forget_process_state_retire_the_engine_too(settings):
    decide("login", {"ip": "o"})
    built = engine.running
    assert built is not None
    with override_settings(DJANGO_GCRA={**settings.DJANGO_GCRA, "POLICIES": {"login": {
            "limits": [{"name": "ip", "key": ["ip"], "rate": "5/m", "burst": 4}]}}}):
        assert engine.running is None
        assert decide("login", {"ip": "o2"}).limits[0].burst == 4
        inner = engine.running
        assert inner is not None and inner is not built
    assert engine.running is None  # leaving the block changed the settings back
    assert decide("login", {"ip": "o3"}).limits[0].burst == 2
    assert engine.running is not inner
    before = engine.running
    forget_process_state()
    assert engine.running is None
    decide("login", {"ip": "o4"})
    assert engine.running is not None and engine.running is not before


def test_retire_without_an_engine_is_harmless_and_the_next_decision_builds_one():
    retire()
    retire()
    assert engine.running is None
    assert decide("login", {"ip": "r"}).allowed and engine.running is not None


def test_a_new_engine_starts_with_fresh_counters(settings, real_redis):
    decide("login", {"ip": "c"})
    for _ in range(HOT_AFTER + 1):
        decide("search", {"ip": "c"})
    assert lease_stats()["search"].decisions == HOT_AFTER + 1
    retire()
    assert lease_stats() == {}  # a fresh engine: no lease yet
    assert status()["fallback"]["decisions"] == [] and status()["breakers"] == []
    # the store's state is not the engine's: the counts go on
    assert decide("login", {"ip": "c"}).remaining == 0


# -- decide is the engine in force's --------------------------------------------------------

def test_decide_is_the_engine_in_forces_decide_on_the_same_store(real_redis):
    a = django_gcra.decide("login", {"ip": "same"})
    b = current().decide("login", {"ip": "same"})
    assert (a.allowed, a.policy, a.limit, a.remaining) == (True, "login", "ip", 1)
    assert (b.allowed, b.policy, b.limit, b.remaining) == (True, "login", "ip", 0)  # the same key, one store
    c = django_gcra.decide("login", {"ip": "same"})
    assert not c.allowed and not current().decide("login", {"ip": "same"}).allowed
    keys = real_redis.keys("rl:{same}:*")
    assert len(keys) == 1
    assert status() == current().status()


def test_decide_and_current_decide_agree_field_by_field():
    peek = current().decide("login", {"ip": "f"}, cost=0)
    same = django_gcra.decide("login", {"ip": "f"}, cost=0)
    assert peek._replace(settlement=None) == same._replace(settlement=None)


async def test_adecide_is_the_engine_in_forces_adecide():
    a = await adecide("login", {"ip": "async"})
    b = await current().adecide("login", {"ip": "async"})
    assert (a.remaining, b.remaining) == (1, 0) and (a.policy, b.policy) == ("login", "login")
    assert not (await adecide("login", {"ip": "async"})).allowed


# -- retire stops the workers, sends the queued releases --------------------------------------

def test_retire_stops_the_engines_background_workers(real_redis):
    before = set(engine_threads())
    held = decide("run", {"ip": "w"})  # a concurrency slot: its store's keeper starts
    assert held.allowed
    for _ in range(HOT_AFTER - 1 + 7):  # cold, a lease of 10, 6 from it: 3 left, a prefetch
        assert decide("prefetched", {"ip": "w"}).allowed
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
            t.name.startswith("django_gcra-lease") for t in set(engine_threads()) - before):
        time.sleep(0.01)  # (a prefetch is queued for a thread, or sent ahead for the collector)
    started = set(engine_threads()) - before
    names = {t.name for t in started}
    assert "django_gcra-slots" in names and any(name.startswith("django_gcra-lease") for name in names), names
    assert "django_gcra-overrides" in names  # the first decision asked for the policy plane
    held.release()
    retire()
    assert [t.name for t in started if t.is_alive()] == []
    assert not (set(engine_threads()) - before)


def test_retire_sends_the_queued_releases_of_abandoned_slots(real_redis):
    key = "rl:{gone}:run:running~conc:gone"
    built = current()
    keeper = built.stores.backend().keeper

    def busy() -> None:  # the keeper's thread, held until the engine is retired (at most 10 s)
        deadline = time.monotonic() + 10
        while engine.running is built and time.monotonic() < deadline:
            time.sleep(0.001)

    keeper.worker.submit(busy)
    assert decide("run", {"ip": "gone"}).allowed  # abandoned: never released, no reference kept
    gc.collect()  # (dropped already) its finalizer queued the release: the keeper's thread cannot send it yet
    assert real_redis.zcard(key) == 1
    retire()
    assert real_redis.zcard(key) == 0  # sent before retire() returned
    counts = built.slots.stats.snapshot()
    assert (counts["abandoned"], counts["released"]) == (1, 1)


# -- a forked child builds its own engine -------------------------------------------------------

def _child_decides(descriptors: dict) -> tuple[bool, int, int, int, int]:
    """In a forked child: no engine inherited; a decision builds one, on the store."""
    inherited = engine.running is not None
    decision = decide("search", descriptors)
    stats = lease_stats()["search"]
    return inherited, decision.remaining, stats.store_calls, stats.held_units, stats.decisions


def test_a_forked_child_builds_its_own_engine_and_never_spends_the_parents_lease(real_redis):
    for _ in range(HOT_AFTER):
        decide("search", {"ip": "f"})  # the parent's cold decisions, then a lease of 10: it holds 9
    parent = current()
    assert lease_stats()["search"].held_units == 9
    store_left = 100 - (HOT_AFTER - 1) - 10
    assert decide("search", {"ip": "f"}, cost=0).remaining == store_left  # a peek asks the store
    with multiprocessing.get_context("fork").Pool(1) as pool:
        inherited, remaining, store_calls, held, decisions = pool.apply(_child_decides, ({"ip": "f"},))
    assert not inherited  # the parent's engine was dropped in the child
    assert remaining == store_left - 1  # the child's decision went to the store, not the parent's 9 units
    assert (store_calls, held, decisions) == (1, 0, 1)  # the key is cold for the child's own engine
    assert engine.running is parent and lease_stats()["search"].held_units == 9  # the parent's lease stands
    assert decide("search", {"ip": "f"}, cost=0).remaining == store_left - 1  # the store saw the child's unit



def test_decisions_in_flight_across_settings_changes_all_complete(gcra_settings):
    """Threads deciding while the settings change under them: each decision is made whole
    by the engine it started on, or by the next one (never an error, never a fallback), and
    the changes leave no engine's workers running but the last one's."""
    errors: list[BaseException] = []
    made: list[bool] = []
    stop = threading.Event()

    def decide_until_stopped(n: int) -> None:
        for i in range(2000):  # bounded; stopped sooner
            if stop.is_set():
                return
            try:
                decision = decide("search", {"ip": f"t{n}-{i % 5}"})
                decision2 = decide("run", {"ip": f"r{n}"})
                decision2.release()
                made.append(not decision.fallback and not decision2.fallback)
            except BaseException as exc:  # noqa: BLE001 (the test reports it)
                errors.append(exc)
                return

    threads = [threading.Thread(target=decide_until_stopped, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        for burst in (4, 5, 6, 7, 8):  # each a new configuration: the engine in force retired
            time.sleep(0.05)
            gcra_settings(POLICIES={**POLICIES, "login": {"limits": [
                {"name": "ip", "key": ["ip"], "rate": "5/m", "burst": burst}]}})
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert errors == [] and made and all(made)
    retire()
    assert engine_threads() == []
