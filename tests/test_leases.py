"""Local token leases: the partial take, the lease wrapper on a fake clock, the system
checks, and the global guarantees on a real redis-server with several processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time

import pytest
from django.core import checks

from django_gcra import adecide, decide
from django_gcra.algorithm import ALLOWED, DENIED, gcra_composite
from django_gcra.backends import BackendError, LimitSpec
from django_gcra.backends.lease_backend import HOT_AFTER
from django_gcra.backends.memory import MemoryBackend
from django_gcra.backends.prefetchers import Prefetchers
from django_gcra.engine import current, retire
from django_gcra.leases import LeasingBackend, lease_stats
from django_gcra.limiter import get_policy
from tests.support.lease_workers import lease_hammer

T, B = 200_000, 3  # the seed's hand trace: 5/s, burst 3


# The twin's partial take ---------------------------------------------------------------

def test_twin_take_grants_what_is_free_between_least_and_most():
    fresh = gcra_composite([None], 0, [(T, B, True)], cost=10, least=1)
    assert (fresh.enforced, fresh.cost, fresh.writes, fresh.remaining) == (ALLOWED, 3, (3 * T,), (0,))
    empty = gcra_composite([3 * T], 0, [(T, B, True)], cost=10, least=1)
    assert (empty.enforced, empty.cost, empty.retry_after, empty.writes) == (DENIED, 1, T, (None,))
    later = gcra_composite([3 * T], 250_000, [(T, B, True)], cost=10, least=1)
    assert (later.enforced, later.cost, later.writes) == (ALLOWED, 1, (4 * T,))
    assert gcra_composite([None], 0, [(T, B, True)], cost=2, least=1).cost == 2  # at most `cost`


# The wrapper on a fake clock -----------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def us(self) -> int:
        return round(self.t * 1_000_000)


class Counting(MemoryBackend):
    """The memory store, counting its calls (each one stands for one script call)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock.us)
        self.calls = 0

    def evaluate(self, specs, cost):
        self.calls += 1
        return super().evaluate(specs, cost)

    def take(self, specs, most, least):
        self.calls += 1
        return super().take(specs, most, least)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(clock):
    return Counting(clock)


def leased(store, clock, size=10, ttl=1.0, **kwargs):
    """A wrapper that leases a key at its first decision (``hot_after=1``), unless told."""
    kwargs.setdefault("hot_after", 1)
    return LeasingBackend(store, size, ttl, kwargs.pop("low_water", 0), clock=lambda: clock.t, **kwargs)


SPEC = LimitSpec("k", 1_000, 100)  # 1000/s, burst 100


def test_one_store_call_per_lease(store, clock):
    backend = leased(store, clock)
    outcomes = [backend.evaluate([SPEC], 1) for _ in range(35)]
    assert all(o.allowed for o in outcomes)
    assert store.calls == 4  # 35 decisions, leases of 10
    stats = backend.stats()
    assert (stats.decisions, stats.local, stats.store_calls, stats.leased_units, stats.held_units) == (35, 31, 4, 40, 5)
    assert stats.calls_saved == 31


def test_remaining_is_the_unleased_remaining_for_one_process(store, clock):
    backend, plain = leased(store, clock), MemoryBackend(clock.us)
    for step in range(40):
        clock.t += 0.00037 * (step % 3)  # never on an interval boundary: clocks round apart
        assert backend.evaluate([SPEC], 1).remaining == plain.evaluate([SPEC], 1).remaining


def test_unused_lease_expires_after_ttl_as_stranded(store, clock):
    backend = leased(store, clock, ttl=0.5)
    backend.evaluate([SPEC], 1)  # takes 10, holds 9
    clock.t += 0.49
    assert backend.evaluate([SPEC], 1).allowed and store.calls == 1
    clock.t += 0.02
    assert backend.evaluate([SPEC], 1).allowed and store.calls == 2  # the 8 left expired
    stats = backend.stats()
    assert (stats.stranded_units, stats.held_units, stats.leased_units) == (8, 9, 20)


def test_single_unit_fallback_admits_what_a_full_lease_could_not(store, clock):
    spec = LimitSpec("edge", 60_000_000, 5)  # 1/m, burst 5: nothing refills during the test
    a, b, c = (leased(store, clock, size=4) for _ in range(3))  # three processes
    assert a.evaluate([spec], 1).allowed  # takes 4, holds 3
    assert store.evaluate([spec], 0).remaining == (1,)  # a lease of 4 cannot be had any more
    assert not store.evaluate([spec], 4).allowed
    second = b.evaluate([spec], 1)
    assert second.allowed and second.granted == 1 and store.calls == 4
    third = c.evaluate([spec], 1)
    assert not third.allowed and third.retry_after == 60_000_000
    assert [a.evaluate([spec], 1).allowed for _ in range(4)] == [True] * 3 + [False]


def test_costs_spend_held_units_first(store, clock):
    backend = leased(store, clock)
    backend.evaluate([SPEC], 8)  # takes 10, holds 2
    assert backend.evaluate([SPEC], 5).allowed  # spends the 2, takes 10 more (3 for itself)
    assert (backend.stats().held_units, backend.stats().leased_units) == (7, 20)
    assert store.evaluate([SPEC], 0).remaining == (100 - 20,)


def test_a_denied_refill_keeps_the_held_units(store, clock):
    spec = LimitSpec("d", 60_000_000, 12)
    backend = leased(store, clock)
    assert backend.evaluate([spec], 10).allowed  # takes 10 for itself; nothing held
    assert backend.evaluate([spec], 1).allowed  # takes the last 2, holds 1
    denied = backend.evaluate([spec], 2)  # needs 1 more: none free
    assert not denied.allowed and denied.retry_after == 60_000_000 and denied.remaining == (1,)
    assert backend.evaluate([spec], 1).allowed and store.calls == 3  # the held unit still serves


@pytest.mark.parametrize("specs, cost", [
    ([LimitSpec("s", 1_000, 100, enforce=False)], 1),  # shadow: the store reports would-deny
    ([SPEC, LimitSpec("k2", 1_000, 100)], 1),  # several limits
    ([SPEC], 0),  # a peek
    ([SPEC], 101),  # above the burst: impossible, never served from a lease
])
def test_what_a_lease_cannot_answer_goes_to_the_store(store, clock, specs, cost):
    backend = leased(store, clock)
    for _ in range(3):
        backend.evaluate(specs, cost)
    assert store.calls == 3 and backend.stats().leased_units == 0


def test_store_failure_during_refill_raises_and_keeps_nothing_half_done(store, clock):
    backend = leased(store, clock)
    store.take = lambda *a: (_ for _ in ()).throw(BackendError("down"))
    with pytest.raises(BackendError):
        backend.evaluate([SPEC], 1)
    del store.take
    assert backend.evaluate([SPEC], 1).allowed  # not stuck "refilling"
    assert backend.stats().leased_units == 10


def test_low_water_prefetch_keeps_the_request_path_off_the_store(store, clock):
    jobs = []
    backend = leased(store, clock, low_water=3, prefetch=jobs.append)
    backend.evaluate([SPEC], 1)  # the only call on the request path
    for _ in range(6):
        backend.evaluate([SPEC], 1)
    assert len(jobs) == 1 and store.calls == 1  # 3 left: a prefetch is queued, not run
    jobs.pop()()  # the background thread runs it
    assert store.calls == 2 and backend.stats().held_units == 13
    for _ in range(40):
        backend.evaluate([SPEC], 1)
        while jobs:
            jobs.pop()()
    stats = backend.stats()
    assert stats.local == 46 and stats.decisions == 47  # only the first decision waited on the store


def test_a_request_running_dry_takes_over_a_prefetch_that_has_not_started(store, clock):
    # One busy thread holding the GIL: the prefetch's thread has not run when the lease is spent.
    jobs = []
    backend = leased(store, clock, low_water=3, prefetch=jobs.append)
    for _ in range(10):
        assert backend.evaluate([SPEC], 1).allowed  # 3 left after the 7th: a prefetch is queued
    assert len(jobs) == 1 and store.calls == 1 and backend.stats().held_units == 0
    assert backend.evaluate([SPEC], 1).allowed  # dry: this request refills itself, at once
    assert store.calls == 2 and backend.stats().held_units == 9
    jobs.pop()()  # the queued prefetch finds its claim taken: no call, no units
    assert store.calls == 2 and backend.stats().held_units == 9
    for _ in range(10):
        backend.evaluate([SPEC], 1)  # for a ttl, the key refills on demand: no prefetch queued
    assert not jobs and store.calls == 3 and backend.stats().held_units == 9
    clock.t += 1.0  # a ttl later (the 9 units expire): prefetches again
    for _ in range(7):
        backend.evaluate([SPEC], 1)  # a new lease, 3 left: a prefetch is queued, and runs
    assert len(jobs) == 1
    jobs.pop()()
    assert store.calls == 5 and backend.stats().held_units == 13
    stats = backend.stats()
    assert (stats.decisions, stats.leased_units, stats.stranded_units) == (28, 50, 9)


class SendingAhead(Counting):
    """The counting store, sending takes ahead: each one is counted when sent (as the script
    counts it), and its outcome waits in ``owed`` until ``collect``."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.owed: list = []

    def take_ahead(self, specs, most, least, done):
        self.calls += 1
        self.owed.append((done, MemoryBackend.take(self, specs, most, least)))
        return self.collect

    def collect(self):
        while self.owed:
            done, outcome = self.owed.pop(0)
            done(outcome)


@pytest.fixture
def late(monkeypatch):
    """The replies left for the collector thread (not started: the tests hand them out)."""
    left: list = []
    monkeypatch.setattr(Prefetchers, "collect_late", lambda self, collect: left.append(collect))
    return left


def run_dry_with_a_prefetch_queued(backend, jobs):
    """A lease of 10 spent by one thread before its queued prefetch ran, and the request
    that ran it dry taking the refill over: the key sends its prefetches ahead for a ttl."""
    for _ in range(11):
        assert backend.evaluate([SPEC], 1).allowed
    assert len(jobs) == 1 and backend.stats().held_units == 9
    jobs.pop()()  # taken over: no call


def test_a_thread_that_outruns_the_prefetch_thread_sends_its_prefetches_ahead(clock, late):
    store, jobs = SendingAhead(clock), []
    backend = leased(store, clock, low_water=3, prefetch=jobs.append)
    run_dry_with_a_prefetch_queued(backend, jobs)
    for _ in range(6):
        backend.evaluate([SPEC], 1)  # 3 left: the prefetch is written now, not queued
    assert (store.calls, len(store.owed), jobs, len(late)) == (3, 1, [], 1)
    for _ in range(3):
        backend.evaluate([SPEC], 1)
    assert len(store.owed) == 1 and backend.stats().held_units == 0  # its reply not read yet
    assert backend.evaluate([SPEC], 1).allowed  # dry: reads the reply sent ahead, no call of its own
    assert (store.calls, store.owed, backend.stats().held_units) == (3, [], 9)
    stats = backend.stats()
    assert (stats.decisions, stats.local, stats.store_calls, stats.leased_units) == (21, 19, 3, 30)


def test_a_prefetch_sent_ahead_is_collected_by_the_thread_that_needs_it(clock, late):
    store, jobs = SendingAhead(clock), []
    backend = leased(store, clock, low_water=3, prefetch=jobs.append)
    run_dry_with_a_prefetch_queued(backend, jobs)
    for _ in range(9):
        backend.evaluate([SPEC], 1)  # sent ahead at 3 left, then spent
    other = []
    thread = threading.Thread(target=lambda: other.append(backend.evaluate([SPEC], 1)))
    thread.start()
    thread.join()
    assert other[0].allowed and (store.calls, store.owed, backend.stats().held_units) == (3, [], 9)


async def test_a_coroutine_takes_a_prefetch_sent_ahead_over(clock, late):
    store, jobs = SendingAhead(clock), []
    backend = leased(store, clock, low_water=3, prefetch=jobs.append)
    run_dry_with_a_prefetch_queued(backend, jobs)
    for _ in range(9):
        backend.evaluate([SPEC], 1)
    assert (await backend.aevaluate([SPEC], 1)).allowed  # never blocks the loop on another's reply
    assert (store.calls, len(store.owed), backend.stats().held_units) == (4, 1, 9)  # a refill of its own
    late[0]()  # the reply, read later: its units join the lease, the claim is the coroutine's (ended)
    assert backend.stats().held_units == 19 and not backend._keys[SPEC.key].refilling


def test_a_store_failure_sending_ahead_ends_the_claim(clock, late):
    store, jobs = SendingAhead(clock), []
    backend = leased(store, clock, low_water=3, prefetch=jobs.append)
    run_dry_with_a_prefetch_queued(backend, jobs)
    store.take_ahead = lambda *a: (_ for _ in ()).throw(BackendError("circuit open"))
    for _ in range(9):
        backend.evaluate([SPEC], 1)  # the prefetch at 3 left fails: nothing held, nothing claimed
    del store.take_ahead
    assert not backend._keys[SPEC.key].refilling
    assert backend.evaluate([SPEC], 1).allowed and store.calls == 3  # a refill on the request path


def test_idle_leases_are_evicted_and_memory_is_bounded(store, clock):
    backend = leased(store, clock, max_keys=3)
    for i in range(5):
        backend.evaluate([LimitSpec(f"k{i}", 1_000, 100)], 1)
    assert backend.held_keys() <= 3
    assert backend.stats().stranded_units == 2 * 9  # two evicted leases held 9 each
    clock.t += 1.5
    backend.evaluate([LimitSpec("new", 1_000, 100)], 1)
    assert backend.held_keys() == 1  # every idle lease swept
    assert backend.stats().stranded_units == 5 * 9


def test_a_cold_key_goes_to_the_store_without_taking_a_lease(store, clock):
    backend = leased(store, clock, hot_after=3)
    for _ in range(2):
        assert backend.evaluate([SPEC], 1).remaining == (100 - store.calls,)
    stats = backend.stats()
    assert (store.calls, stats.leased_units, backend.held_keys()) == (2, 0, 0)
    backend.evaluate([SPEC], 1)  # the third store decision within a ttl: the key is hot
    assert (store.calls, backend.stats().leased_units, backend.stats().held_units) == (3, 10, 9)
    assert [backend.evaluate([SPEC], 1).allowed for _ in range(9)] == [True] * 9 and store.calls == 3


def test_a_key_seen_less_often_than_hot_after_per_ttl_never_strands_a_lease(store, clock):
    backend = leased(store, clock, hot_after=3)
    for i in range(12):
        clock.t += 0.51  # two decisions per ttl, never three
        backend.evaluate([SPEC], 1)
        backend.evaluate([LimitSpec(f"once{i}", 1_000, 100)], 1)  # and keys seen once
    stats = backend.stats()
    assert (stats.store_calls, stats.decisions, stats.leased_units, stats.stranded_units) == (24, 24, 0, 0)
    assert backend.held_keys() == 0


def test_a_key_alone_seen_less_often_than_hot_after_per_ttl_never_strands_a_lease(store, clock):
    backend = leased(store, clock, hot_after=3)  # (no write of this store counts heat: each counted at once)
    for _ in range(12):
        clock.t += 0.51
        backend.evaluate([SPEC], 1)
    assert (store.calls, backend.stats().leased_units, backend.held_keys()) == (12, 0, 0)


def test_counts_from_a_window_that_has_ended_never_make_a_key_hot(store, clock):
    backend = leased(store, clock, hot_after=3)
    backend.evaluate([SPEC], 1)
    backend.evaluate([SPEC], 1)
    clock.t += 1.01  # the window (one ttl from the first count) has ended
    backend.evaluate([SPEC], 1)  # the third, but the first of a new window: still cold
    assert (store.calls, backend.stats().leased_units) == (3, 0)
    backend.evaluate([SPEC], 1)
    assert backend.stats().leased_units == 0  # the second within the new window
    backend.evaluate([SPEC], 1)  # the third within the new window: hot
    assert backend.stats().leased_units == 10 and backend.held_keys() == 1


def test_cold_keys_are_remembered_within_max_keys(store, clock):
    backend = leased(store, clock, hot_after=2, max_keys=4)
    for i in range(10):
        backend.evaluate([LimitSpec(f"c{i}", 1_000, 100)], 1)
    assert len(backend._heat) <= 4 and backend.stats().leased_units == 0


def test_an_expired_lease_makes_the_key_cold_again(store, clock):
    backend = leased(store, clock, hot_after=2)
    backend.evaluate([SPEC], 1)
    backend.evaluate([SPEC], 1)  # hot: leases 10, holds 9
    clock.t += 1.5  # unused: the 9 expire
    backend.evaluate([LimitSpec("other", 1_000, 100)], 1)  # a new hot key's sweep would drop it; cold: none
    backend.evaluate([LimitSpec("other", 1_000, 100)], 1)  # hot: the sweep drops the idle lease
    assert backend.stats().stranded_units == 9 and backend.held_keys() == 1
    calls = store.calls
    backend.evaluate([SPEC], 1)
    assert store.calls == calls + 1 and backend.stats().held_units == 9  # direct again, no new lease


def test_a_prefetch_tranche_keeps_its_own_expiry(store, clock):
    jobs = []
    backend = leased(store, clock, low_water=3, prefetch=jobs.append)
    for _ in range(7):
        backend.evaluate([SPEC], 1)  # leases 10 at t, 3 left: a prefetch is queued
    clock.t += 0.5
    jobs.pop()()  # 10 more, taken at t + 0.5
    assert backend.stats().held_units == 13
    clock.t += 0.6  # the first lease's 3 units expired, the prefetched 10 did not
    assert backend.evaluate([SPEC], 1).allowed and store.calls == 2
    stats = backend.stats()
    assert (stats.stranded_units, stats.held_units) == (3, 9)
    clock.t += 0.5  # past the prefetch's ttl too
    backend.evaluate([SPEC], 1)
    assert store.calls == 3 and backend.stats().stranded_units == 3 + 9


def test_threads_never_admit_more_than_was_counted(clock):
    store = MemoryBackend(clock.us)
    spec = LimitSpec("hot", 60_000_000, 500)  # no refill: the store counts exactly
    backend = leased(store, clock, size=7)
    admitted = []

    def work():
        admitted.append(sum(backend.evaluate([spec], 1).allowed for _ in range(200)))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counted = 500 - store.evaluate([spec], 0).remaining[0]
    held = backend.stats().held_units
    assert sum(admitted) + held == counted == 500 and held < 7


async def test_async_decisions_are_served_from_the_lease(clock):
    store = MemoryBackend(clock.us)
    spec = LimitSpec("a", 60_000_000, 50)
    backend = leased(store, clock, size=4)
    outcomes = []
    for _ in range(8):  # batches: the first of each may refill while the rest go direct
        outcomes += await asyncio.gather(*(backend.aevaluate([spec], 1) for _ in range(10)))
    counted = 50 - store.evaluate([spec], 0).remaining[0]
    assert sum(o.allowed for o in outcomes) + backend.stats().held_units == counted == 50
    assert backend.stats().local > 0


# Configuration and system checks -------------------------------------------------------

def lease_policy(rate="500/s", burst=100, limits=None, **lease):
    return {"limits": limits or [{"name": "k", "key": ["ip"], "rate": rate, "burst": burst}],
            "lease": {"size": 10, "ttl": 1.0, **lease}}


def check_ids(gcra_settings, **policies):
    gcra_settings(POLICIES=policies)
    return sorted({m.id for m in checks.run_checks(tags=["django_gcra"])})


def test_a_good_lease_is_clean(gcra_settings):
    assert check_ids(gcra_settings, search=lease_policy(low_water=2)) == []
    gcra_settings(POLICIES={"search": lease_policy()}, LEASE_MAX_KEYS=50)
    assert checks.run_checks(tags=["django_gcra"]) == []


@pytest.mark.parametrize("policy, expected", [
    (lease_policy(limits=[{"name": "t", "key": ["ip"], "rate": "1000/s", "burst": 200},
                          {"name": "u", "key": ["ip", "user"], "rate": "50/s", "burst": 20}]), "django_gcra.E050"),
    (lease_policy(burst=10), "django_gcra.E051"),
    (lease_policy(rate={"free": "5/s", "paid": "5000/s"}, burst=None), "django_gcra.E051"),  # free: burst 5
    (lease_policy(low_water=10), "django_gcra.E052"),
    (lease_policy(low_water="2"), "django_gcra.E052"),
    (lease_policy(rate="5/s", burst=20), "django_gcra.W050"),
    ({**lease_policy(), "mode": "shadow"}, "django_gcra.W051"),
    ({**lease_policy(limits=[{"name": "t", "key": ["ip"], "rate": "1000/s", "burst": 200},
                             {"name": "u", "key": ["ip", "user"], "rate": "50/s", "burst": 20}]), "mode": "shadow"},
     "django_gcra.E050"),  # shadow or not, a composite lease is an error
])
def test_lease_problems(gcra_settings, policy, expected):
    assert expected in check_ids(gcra_settings, p=policy)


@pytest.mark.parametrize("value", [0, "100", True])
def test_lease_max_keys_must_be_a_positive_int(fake_redis, gcra_settings, value):
    from django.core.exceptions import ImproperlyConfigured

    gcra_settings(POLICIES={"search": lease_policy()}, LEASE_MAX_KEYS=value)
    assert sorted({m.id for m in checks.run_checks(tags=["django_gcra"])}) == ["django_gcra.E053"]
    with pytest.raises(ImproperlyConfigured, match="E053"):
        decide("search", {"ip": "1"})


def test_a_bad_lease_is_refused_at_run_time(gcra_settings):
    from django.core.exceptions import ImproperlyConfigured

    check_ids(gcra_settings, p=lease_policy(burst=10))
    with pytest.raises(ImproperlyConfigured, match="E051"):
        decide("p", {"ip": "1"})


def test_backend_for_wraps_only_leased_policies(gcra_settings):
    gcra_settings(POLICIES={"leased": lease_policy(), "plain": {"limits": [{"name": "k", "key": ["ip"], "rate": "5/s"}]}})
    assert isinstance(current().backend_for(get_policy("leased")), LeasingBackend)
    assert current().backend_for(get_policy("leased")) is current().backend_for(get_policy("leased"))
    assert not isinstance(current().backend_for(get_policy("plain")), LeasingBackend)
    plain = current().backend_for(get_policy("plain"))
    assert plain is current().stores.backend() and current().leases.wrap(plain, get_policy("plain")) is plain


def test_cold_keys_go_to_the_store_one_call_each_until_hot(gcra_settings):
    gcra_settings(POLICIES={"leased": lease_policy()})
    for i in range(50):
        for _ in range(HOT_AFTER - 1):
            assert decide("leased", {"ip": f"cold{i}"}).allowed  # 50 keys, each still cold
    wrapper, stats = current().backend_for(get_policy("leased")), lease_stats()["leased"]
    assert (stats.decisions, stats.store_calls, stats.leased_units, wrapper.held_keys()) == (100, 100, 0, 0)
    decide("leased", {"ip": "cold7"})  # its HOT_AFTER-th: leased
    assert wrapper.held_keys() == 1 and lease_stats()["leased"].held_units == 9


def test_a_plan_replaced_in_the_memo_hands_its_first_decision_over(gcra_settings):
    from dataclasses import replace

    gcra_settings(POLICIES={"leased": lease_policy()})
    decide("leased", {"ip": "x"})
    decide(replace(get_policy("leased")), {"ip": "x"})  # an equal Policy object: same wrapper, a new plan
    assert lease_stats()["leased"].decisions == 2


def test_threads_deciding_while_the_memo_empties_lose_no_count(gcra_settings):
    gcra_settings(POLICIES={"leased": lease_policy(rate="1000000/s", burst=100_000)})
    memo = current().planner.memo
    done = threading.Event()

    def work(n: int) -> None:
        for i in range(300):
            decide("leased", {"ip": f"k{(i * 7 + n) % 60}"})  # keys cold, warming and hot

    def empty() -> None:
        for _ in range(5000):  # bounded
            if done.wait(0.0005):
                return
            memo.clear()

    emptier = threading.Thread(target=empty)
    emptier.start()
    workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    done.set()
    emptier.join()
    stats = lease_stats()["leased"]
    assert stats.decisions == 1200  # every decision counted once: on its plan, or by the wrapper


def test_decisions_a_lease_cannot_answer_go_to_the_store_and_never_make_a_key_hot(gcra_settings):
    shadow = {"name": "s", "key": ["ip"], "rate": "50/s", "burst": 50, "mode": "shadow"}
    gcra_settings(POLICIES={"leased": lease_policy(burst=50), "shadow": lease_policy(limits=[shadow])})
    for _ in range(2 * HOT_AFTER):
        assert decide("leased", {"ip": "a"}, cost=0).allowed  # a peek
        assert not decide("leased", {"ip": "a"}, cost=51).allowed  # above the burst
        assert decide("shadow", {"ip": "a"}).allowed  # a shadow limit
    for name in ("leased", "shadow"):
        stats = lease_stats()[name]
        assert stats.store_calls == stats.decisions and stats.leased_units == 0 and stats.held_units == 0
    assert lease_stats()["leased"].decisions == 4 * HOT_AFTER


def test_a_key_whose_plan_is_not_memoized_is_counted_by_the_wrapper(gcra_settings, monkeypatch):
    gcra_settings(POLICIES={"leased": lease_policy()})
    monkeypatch.setattr(current().planner.memo, "size", 0)  # a full memo (or overrides): every decision resolves a new plan
    for _ in range(HOT_AFTER + 5):
        assert decide("leased", {"ip": "n"}).allowed
    stats = lease_stats()["leased"]
    assert (stats.store_calls, stats.leased_units, stats.local) == (HOT_AFTER, 10, 5)


def test_a_plan_not_memoized_is_leased_at_once_with_hot_after_1(gcra_settings, monkeypatch):
    gcra_settings(POLICIES={"leased": lease_policy()})
    monkeypatch.setattr(current().planner.memo, "size", 0)
    current().backend_for(get_policy("leased")).hot_after = 1
    for _ in range(10):
        assert decide("leased", {"ip": "n"}).allowed
    stats = lease_stats()["leased"]
    assert (stats.store_calls, stats.leased_units, stats.local) == (1, 10, 9)


def test_a_memoized_plan_keeps_its_backend_only_while_the_leases_stand(gcra_settings):
    gcra_settings(POLICIES={"leased": lease_policy()})
    for _ in range(HOT_AFTER):
        decide("leased", {"ip": "1"})
    engine = current()
    p = engine.plan("leased", {"ip": "1"})  # the memoized plan the decisions used
    first = engine.backend_for(p.policy)
    assert isinstance(first, LeasingBackend) and p.backend is first  # hot: the lease wrapper, kept
    retire()  # as a fork or a changed configuration does: every lease (and every plan) forgotten
    for _ in range(HOT_AFTER):
        decide("leased", {"ip": "1"})  # cold again for the new wrapper, then hot
    fresh = current()
    again = fresh.plan("leased", {"ip": "1"})
    assert fresh is not engine and again is not p and fresh.backend_for(p.policy) is not first
    assert again.backend is fresh.backend_for(p.policy) and p.backend is first  # each plan its engine's
    stats = lease_stats()["leased"]  # decided by the new wrapper, not the forgotten one
    assert (stats.decisions, stats.store_calls, stats.leased_units) == (HOT_AFTER, HOT_AFTER, 10)


# Real redis-server ---------------------------------------------------------------------

SEARCH = {"POLICIES": {"search": lease_policy(rate="1000/s", burst=100)}}


def evalsha_calls(client) -> int:
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def test_decide_takes_one_script_call_per_lease(real_redis, gcra_settings):
    gcra_settings(**SEARCH)
    decide("search", {"ip": "warm"})  # loads the script
    before = evalsha_calls(real_redis)
    decisions = [decide("search", {"ip": "hot"}) for _ in range(50)]
    assert all(d.allowed for d in decisions)
    cold = HOT_AFTER - 1  # a key's first decisions go to the store one call each
    assert evalsha_calls(real_redis) - before == cold + 5  # then 48 decisions: 5 leases of 10
    assert lease_stats()["search"].calls_saved == 51 - (1 + cold + 5)


def test_threads_counting_heat_in_flight_lose_no_decision(real_redis, gcra_settings, monkeypatch):
    gcra_settings(**SEARCH)
    monkeypatch.setattr(current().planner.memo, "size", 0)
    decide("search", {"ip": "warm"})
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(300):  # a key of its own, then the shared one
                decide("search", {"ip": f"t{t}:{i}" if i % 2 else "shared"})
        except BaseException as exc:  # pragma: no cover (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    stats = lease_stats()["search"]
    assert stats.decisions == 1 + 4 * 300  # every decision counted once
    assert stats.leased_units > 0 and current().backend_for(get_policy("search")).held_keys() == 1  # only the shared key


def test_plans_not_memoized_that_no_lease_can_answer_count_no_heat(real_redis, gcra_settings, monkeypatch):
    gcra_settings(**SEARCH)
    monkeypatch.setattr(current().planner.memo, "size", 0)  # no plan memoized (a full memo, or overrides)
    decide("search", {"ip": "warm"})
    wrapper = current().backend_for(get_policy("search"))
    before = evalsha_calls(real_redis)
    for _ in range(2 * HOT_AFTER):
        assert decide("search", {"ip": "peek"}, cost=0).allowed  # a peek
        assert not decide("search", {"ip": "big"}, cost=101).allowed  # above the burst
    assert evalsha_calls(real_redis) - before == 4 * HOT_AFTER
    stats = lease_stats()["search"]
    assert (stats.decisions, stats.store_calls, stats.leased_units, wrapper.held_keys()) == (
        1 + 4 * HOT_AFTER, 1 + 4 * HOT_AFTER, 0, 0)


async def test_adecide_uses_the_lease_on_the_native_async_client(real_redis, gcra_settings):
    gcra_settings(**SEARCH)
    decisions = [await adecide("search", {"ip": "async"}) for _ in range(25)]
    assert all(d.allowed for d in decisions) and decisions[0].remaining == 99
    assert lease_stats()["search"].store_calls == HOT_AFTER - 1 + 3  # the cold decisions, then 3 leases
    assert lease_stats()["search"].local == 25 - (HOT_AFTER - 1 + 3)


async def test_an_async_prefetch_runs_as_a_task_of_the_event_loop(real_redis, gcra_settings):
    gcra_settings(POLICIES={"search": lease_policy(rate="1000/s", burst=100, low_water=3)})
    for _ in range(HOT_AFTER - 1 + 7):  # the cold decisions, a lease of 10, then 6 from it: 3 left
        assert (await adecide("search", {"ip": "pre"})).allowed
    tasks = current().leases.prefetchers.tasks
    assert len(tasks) == 1  # the prefetch: a task of this loop, not the thread
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    stats = lease_stats()["search"]
    assert (stats.store_calls, stats.held_units, stats.leased_units) == (HOT_AFTER - 1 + 2, 13, 20)


def test_single_unit_fallback_on_redis(real_redis, gcra_settings):
    gcra_settings(POLICIES={"edge": lease_policy(rate="1/s", burst=5, size=4, ttl=4.0)})
    policy = get_policy("edge")
    current().backend_for(policy).hot_after = 1  # lease the key at its first decision
    assert decide("edge", {"ip": "x"}).allowed  # this process leases 4
    other = LeasingBackend(current().backend_for(policy).inner, policy.lease.size, policy.lease.ttl, hot_after=1)  # a second process
    spec = [LimitSpec("rl:{x}:edge:k:x", 1_000_000, 5)]
    assert not other.inner.evaluate(spec, 4).allowed  # a full lease is not available
    assert other.evaluate(spec, 1).allowed  # one unit is
    assert not other.evaluate(spec, 1).allowed


PROCESSES = 4


def run_workers(url, gcra, policy, descriptors, duration, max_calls):
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0  # time for the spawned interpreters to import Django
    with ctx.Pool(PROCESSES) as pool:
        return pool.starmap(lease_hammer, [(url, gcra, policy, descriptors, start_at, duration, calls)
                                           for calls in max_calls])


def tat_ahead(client, key: str) -> int:
    """Put ``key``'s TAT 60 s ahead, so it never falls behind the clock: then every unit the
    script counts moves it by exactly one interval, and counted = its movement. The start."""
    now = client.time()
    start = (now[0] + 60) * 1_000_000 + now[1]
    client.set(key, start)
    return start


@pytest.mark.slow
# prefetch: each process decides back to back, so its prefetches are sent ahead; at 1000/s,
# about a hundred leases a second succeed and send the next one ahead.
@pytest.mark.parametrize(("rate", "burst", "size", "low_water"), [(50, 20, 5, 0), (50, 20, 5, 2), (1000, 50, 10, 3)],
                         ids=["on-demand", "prefetch", "prefetch-many-leases"])
def test_processes_with_leases_never_exceed_the_global_limit(redis_server, rate, burst, size, low_water):
    gcra = {"POLICIES": {"p": lease_policy(rate=f"{rate}/s", burst=burst, size=size, low_water=low_water)}}
    redis_server.client().flushall()
    results = run_workers(redis_server.url, gcra, "p", {"ip": "hot"}, 3.0, [100_000] * PROCESSES)
    admitted, calls = sum(r[0] for r in results), sum(r[1] for r in results)
    elapsed = max(r[3] for r in results) - min(r[2] for r in results)
    store_calls = sum(r[4]["store_calls"] for r in results)
    bound = burst + elapsed * rate + 1
    print(f"admitted {admitted} of {calls} calls in {elapsed:.2f}s with {store_calls} store calls; bound {bound:.1f}")
    assert calls > 4 * admitted  # the key was really contended
    assert admitted <= bound
    assert admitted >= 0.5 * bound  # not starved (loose: a loaded 2-core machine stalls workers)
    assert sum(r[4]["local"] for r in results) > 0


@pytest.mark.slow
def test_stranded_quota_stays_within_processes_times_lease_size(redis_server):
    size, interval = 10, 100_000  # 10/s
    # ttl 30 s: one heat window from each worker's warm-up (which makes its wrapper) to its
    # end, so every process leases the key at its HOT_AFTER-th decision, however long the
    # workers wait at the start line (with a window ending in between, a key counts anew).
    gcra = {"POLICIES": {"p": lease_policy(rate="10/s", burst=1000, size=size, ttl=30.0)}}
    client = redis_server.client()
    client.flushall()
    key = "rl:{q}:p:k:q"
    start = tat_ahead(client, key)
    per_process = [3, 10, 11, 25]
    results = run_workers(redis_server.url, gcra, "p", {"ip": "q"}, 10.0, per_process)
    admitted = sum(r[0] for r in results)
    counted = (int(client.get(key)) - start) // interval
    stranded = counted - admitted
    print(f"admitted {admitted}, counted {counted}, stranded {stranded}")
    assert admitted == sum(per_process)
    # each process's first HOT_AFTER - 1 decisions go to the store directly; the rest through leases of 10
    leased = [n - min(n, HOT_AFTER - 1) for n in per_process]
    assert stranded == sum(-n % size for n in leased) == sum(r[4]["held_units"] for r in results)
    assert 0 < stranded <= PROCESSES * size


def test_a_denial_is_remembered_until_its_retry_after(store, clock):
    spec = LimitSpec("over", 100_000, 5)  # 10/s, burst 5
    backend = leased(store, clock, size=4)
    assert [backend.evaluate([spec], 1).allowed for _ in range(5)] == [True] * 5
    calls = store.calls
    first = backend.evaluate([spec], 1)
    assert not first.allowed and first.retry_after == 100_000 and store.calls == calls + 1
    clock.t += 0.06
    again = backend.evaluate([spec], 1)
    assert not again.allowed and again.retry_after == 40_000 and store.calls == calls + 1  # from memory
    clock.t += 0.04
    assert backend.evaluate([spec], 1).allowed and store.calls == calls + 2
    assert backend.stats().decisions == 8


def test_remaining_counts_held_units_on_top_of_a_rested_store(store, clock):
    backend = leased(store, clock, ttl=10.0)
    backend.evaluate([SPEC], 1)  # holds 9; the store has 90
    clock.t += 5  # the key rests: the store has its full burst again, and we still hold 9
    assert backend.evaluate([SPEC], 1).remaining == (100 + 8,)  # what this caller can still be admitted now
    assert store.evaluate([SPEC], 0).remaining == (100,)


def test_counters_reach_prometheus_through_the_optional_collector(fake_redis, gcra_settings):
    prometheus_client = pytest.importorskip("prometheus_client")
    from django_gcra.leases import LeaseCollector

    gcra_settings(POLICIES={"search": lease_policy()})
    for _ in range(25):
        assert decide("search", {"ip": "p"}).allowed  # on the embedded fakeredis: 2 cold calls, 3 leases of 10
    assert HOT_AFTER == 3  # the figures below
    registry = prometheus_client.CollectorRegistry()
    registry.register(LeaseCollector())
    value = registry.get_sample_value
    assert value("django_gcra_lease_decisions_total", {"policy": "search"}) == 25
    assert value("django_gcra_lease_store_calls_total", {"policy": "search"}) == 5
    assert value("django_gcra_lease_local_total", {"policy": "search"}) == 20
    assert value("django_gcra_lease_leased_units_total", {"policy": "search"}) == 30
    assert value("django_gcra_lease_held_units", {"policy": "search"}) == 7


def test_a_decision_served_from_the_lease_is_the_one_its_outcome_would_give(fake_redis, gcra_settings, monkeypatch):
    from django_gcra.backends import lease_backend
    from django_gcra.backends.key_lease import admitted
    from django_gcra.outcomes import finish

    gcra_settings(POLICIES={"search": lease_policy(rate="1/s")})  # slow to refill: exact remaining
    for _ in range(HOT_AFTER):
        decide("search", {"ip": "s"})  # the cold decisions, then a lease of 10: 9 held, the store at 100 - 12
    before = lease_stats()["search"]
    with monkeypatch.context() as patched:
        patched.setattr(lease_backend, "admitted", None)  # (evaluate's local path would call it)
        served = decide("search", {"ip": "s"})  # decide's local path: LeasingBackend.serve, no Outcome
    after = lease_stats()["search"]
    assert (after.local, after.store_calls) == (before.local + 1, before.store_calls)
    assert served.allowed and served.remaining == served.limits[0].remaining == 100 - 12 + 8
    assert served.limit == "k" and served.limits[0].burst == 100 and not (served.shadow or served.fallback)
    assert 11 < served.reset_after <= 12  # 12 units counted at 1/s: rested 12 s after the lease
    p = current().plan("search", {"ip": "s"})
    numbers = current().backend_for(get_policy("search")).serve(p.specs, 1)
    assert numbers is not None and numbers[0] == 100 - 12 + 7
    settlers = current().settler.settlers
    assert finish(p, numbers, None, settlers) == finish(p, admitted(numbers), None, settlers)


def test_a_changed_rate_or_burst_forgets_the_remembered_denial(store, clock):
    spec = LimitSpec("o", 60_000_000, 3)
    backend = leased(store, clock, size=2)
    assert [backend.evaluate([spec], 1).allowed for _ in range(4)] == [True] * 3 + [False]
    calls = store.calls
    assert not backend.evaluate([spec], 1).allowed and store.calls == calls  # remembered
    raised = LimitSpec("o", 60_000_000, 6)  # an override raised the burst
    assert backend.evaluate([raised], 1).allowed and store.calls == calls + 1


def test_the_default_take_falls_back_to_the_least_in_a_second_decision(clock):
    from django_gcra.backends import Backend

    class EvaluateOnly(Backend):  # a store that knows nothing of takes
        def __init__(self):
            self.memory, self.costs = MemoryBackend(clock.us), []

        def evaluate(self, specs, cost):
            self.costs.append(cost)
            return self.memory.evaluate(specs, cost)

    backend, spec = EvaluateOnly(), [LimitSpec("t", 60_000_000, 5)]
    assert backend.take(spec, 4, 1).granted == 4
    assert backend.take(spec, 4, 1).granted == 1  # a full lease is denied, one unit is not
    denied = backend.take(spec, 4, 1)
    assert (denied.allowed, denied.granted) == (False, 0) and backend.costs == [4, 4, 1, 4, 1]


def test_threads_with_background_prefetch_on_redis_account_for_every_unit(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": lease_policy(rate="10/s", burst=1000, size=10, low_water=3)})
    key, interval = "rl:{t}:p:k:t", 100_000
    start = tat_ahead(real_redis, key)
    admitted = []

    def work():
        admitted.append(sum(decide("p", {"ip": "t"}).allowed for _ in range(50)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    def unaccounted() -> int:
        """Units the store counted that are neither admitted, nor held, nor stranded (a lease
        of 1 s can expire on a busy machine): 0 once no prefetch is in flight."""
        stats = lease_stats()["p"]
        return (int(real_redis.get(key)) - start) // interval - 200 - stats.held_units - stats.stranded_units

    deadline = time.monotonic() + 10  # (a busy machine: the background thread may be late)
    while time.monotonic() < deadline and unaccounted():
        time.sleep(0.01)  # a prefetch may still be in flight on the background thread
    counted = (int(real_redis.get(key)) - start) // interval
    stats = lease_stats()["p"]
    assert sum(admitted) == 200
    assert unaccounted() == 0 and stats.held_units <= 10 + 3, (counted, stats)
    # Most from memory (the rest decided directly: a thread waits REFILL_WAIT for a late prefetch, no longer).
    assert stats.local > 100 and stats.leased_units <= counted, stats


def starve_the_prefetch_thread(policy_name):
    """One thread deciding back to back: the prefetch thread never gets to run its jobs."""
    current().backend_for(get_policy(policy_name)).prefetch = lambda job: None


def test_one_thread_back_to_back_sends_its_prefetches_ahead_on_redis(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": lease_policy(rate="10/s", burst=1000, size=10, low_water=3)})
    key, interval = "rl:{b}:p:k:b", 100_000
    start = tat_ahead(real_redis, key)
    starve_the_prefetch_thread("p")
    inner = current().backend_for(get_policy("p")).inner
    calls = {"take": 0, "take_ahead": 0}
    for name in calls:
        def counting(*args, _name=name, _method=getattr(inner, name)):
            calls[_name] += 1
            return _method(*args)
        setattr(inner, name, counting)
    assert all(decide("p", {"ip": "b"}).allowed for _ in range(HOT_AFTER - 1 + 200))
    stats = lease_stats()["p"]
    # The first lease, the request that ran dry with the prefetch queued, then every lease sent
    # ahead (one more refill per ttl if this ran past one).
    assert calls["take"] <= 3 and calls["take_ahead"] >= 17, calls
    assert stats.decisions - stats.local == HOT_AFTER - 1 + calls["take"]  # no decision went to the store directly
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and current().backend_for(get_policy("p"))._keys[key].refilling:
        time.sleep(0.01)  # the last reply sent ahead, read by the collector thread
    stats = lease_stats()["p"]
    counted = (int(real_redis.get(key)) - start) // interval
    assert counted == HOT_AFTER - 1 + stats.leased_units == HOT_AFTER - 1 + 200 + stats.held_units + stats.stranded_units


def test_a_reply_sent_ahead_by_a_thread_that_ended_is_read_by_the_collector(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": lease_policy(rate="10/s", burst=1000, size=10, low_water=3)})
    starve_the_prefetch_thread("p")
    # 2 cold, a lease of 10 (3 left at the 9th: a prefetch queued, never run), dry at the 13th
    # (refilled on the request path), 3 left at the 19th: a prefetch sent ahead. Then the thread ends.
    thread = threading.Thread(target=lambda: [decide("p", {"ip": "e"}) for _ in range(19)])
    thread.start()
    thread.join()
    state = current().backend_for(get_policy("p"))._keys["rl:{e}:p:k:e"]
    assert state.ahead is not None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and state.refilling:
        time.sleep(0.01)
    stats = lease_stats()["p"]
    assert not state.refilling and (stats.leased_units, stats.held_units, stats.store_calls) == (30, 13, 5)


def test_a_prefetch_sent_ahead_into_a_flushed_script_cache_is_refilled_on_the_request_path(real_redis, gcra_settings):
    gcra_settings(POLICIES={"p": lease_policy(rate="10/s", burst=1000, size=10, low_water=3)})
    starve_the_prefetch_thread("p")
    assert all(decide("p", {"ip": "f"}).allowed for _ in range(18))  # as above: 3 left at the next
    real_redis.script_flush()  # a restart or failover: the script is gone
    assert decide("p", {"ip": "f"}).allowed  # sends the prefetch ahead: NOSCRIPT
    assert all(decide("p", {"ip": "f"}).allowed for _ in range(4))  # dry at the 4th: refilled, the script loaded
    stats = lease_stats()["p"]
    assert (stats.leased_units, stats.held_units) == (30, 9)  # the failed prefetch took nothing
