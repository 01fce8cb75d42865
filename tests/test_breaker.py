"""The circuit breaker: a state machine with an injected clock, then wired to a real Redis."""

from __future__ import annotations

import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_gcra import decide
from django_gcra.backends import BackendError, LimitSpec
from django_gcra.backends.breaker import Breakers, CircuitBreaker, CircuitOpen
from django_gcra.backends.redis import RedisBackend
from django_gcra.engine import current
from django_gcra.fallback import status
from tests.support.servers import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fail(breaker: CircuitBreaker, n: int = 1) -> None:
    for _ in range(n):
        breaker.before_call()
        breaker.failure(ConnectionError("refused"))


def test_opens_after_consecutive_failures_only():
    b = CircuitBreaker("e", failures=3, cooldown=1.0, clock=Clock())
    fail(b, 2)
    b.before_call()
    b.success()  # a success resets the count
    fail(b, 2)
    assert b.state == "closed"
    fail(b)
    assert b.state == "open"
    with pytest.raises(CircuitOpen):
        b.before_call()
    assert b.snapshot()["refused"] == 1 and b.snapshot()["opened"] == 1


def test_half_open_probe_after_cooldown_closes_on_success():
    clock = Clock()
    b = CircuitBreaker("e", failures=1, cooldown=2.0, clock=clock)
    fail(b)
    clock.now += 1.99
    with pytest.raises(CircuitOpen):
        b.before_call()
    clock.now += 0.01
    b.before_call()  # the probe
    assert b.state == "half-open"
    with pytest.raises(CircuitOpen):  # only one probe at a time
        b.before_call()
    b.success()
    assert b.state == "closed"
    b.before_call()


def test_failed_probe_reopens_for_a_full_cooldown():
    clock = Clock()
    b = CircuitBreaker("e", failures=5, cooldown=1.0, clock=clock)
    fail(b, 5)
    clock.now += 1.0
    fail(b)  # the probe fails: open again at once, not after 5 more failures
    assert b.state == "open"
    clock.now += 0.5
    with pytest.raises(CircuitOpen):
        b.before_call()
    clock.now += 0.5
    b.before_call()


def test_probe_without_verdict_lets_the_next_caller_probe():
    clock = Clock()
    b = CircuitBreaker("e", failures=1, cooldown=1.0, clock=clock)
    fail(b)
    clock.now += 1.0
    b.before_call()
    b.release_probe()
    b.before_call()
    assert b.state == "half-open"


def test_exactly_one_probe_among_threads():
    clock = Clock()
    b = CircuitBreaker("e", failures=1, cooldown=1.0, clock=clock)
    fail(b)
    clock.now += 1.0
    passed, barrier = [], threading.Barrier(16)

    def call() -> None:
        barrier.wait()
        try:
            b.before_call()
            passed.append(1)
        except CircuitOpen:
            pass

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(passed) == 1


def test_registry_is_per_endpoint_and_follows_settings(gcra_settings):
    registry = Breakers()
    a, b = registry.of("redis://a:1/0", 2, 0.5), registry.of("redis://b:1/0", 2, 0.5)
    assert a is registry.of("redis://a:1/0", 2, 0.5) and a is not b
    assert registry.get("redis://a:1/0") is a and registry.get("redis://c:1/0") is None
    assert (a.threshold, a.cooldown) == (2, 0.5)
    assert (registry.of("redis://a:1/0", 7, 3.0).threshold, a.cooldown) == (7, 3.0)
    assert {s["endpoint"] for s in registry.snapshot()} == {"redis://a:1/0", "redis://b:1/0"}
    # the store's breakers follow the BREAKER setting: a new configuration, a new engine's breakers
    gcra_settings(BREAKER={"failures": 3, "cooldown": 0.25})
    store_breaker = current().stores.breaker_of("default", "rl:{x}:p:l:x")
    assert (store_breaker.threshold, store_breaker.cooldown) == (3, 0.25)
    assert current().stores.breaker_of("default", "rl:{y}:p:l:y") is store_breaker  # one per endpoint
    gcra_settings(BREAKER={"failures": 4, "cooldown": 2})
    changed = current().stores.breaker_of("default", "rl:{x}:p:l:x")
    assert changed is not store_breaker and (changed.threshold, changed.cooldown) == (4, 2.0)


SPECS = [LimitSpec("rl:{t}:p:l:t", 100_000, 5)]


def test_open_circuit_spends_no_network_time(gcra_settings):
    gcra_settings(BREAKER={"failures": 2, "cooldown": 60})
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.05, retry=Retry(NoBackoff(), 0))
    calls = []

    def get_client():
        calls.append(1)
        return dead

    registry = Breakers()
    backend = RedisBackend(get_client, breaker_of=lambda key: registry.of("dead-endpoint", 2, 60))
    for _ in range(2):
        with pytest.raises(BackendError) as info:
            backend.evaluate(SPECS, 1)
        assert not isinstance(info.value, CircuitOpen)
    for _ in range(50):
        with pytest.raises(CircuitOpen):
            backend.evaluate(SPECS, 1)
    assert len(calls) == 2  # the client was not even asked for while the circuit was open


@pytest.mark.redis
def test_script_errors_do_not_open_the_circuit(real_redis, gcra_settings):
    """A WRONGTYPE error is one bad key, not a sick endpoint: the breaker stays closed."""
    gcra_settings(BREAKER={"failures": 2, "cooldown": 60},
                  POLICIES={"p": {"limits": [{"name": "l", "key": ["ip"], "rate": "5/s"}], "on_failure": "closed"}})
    real_redis.hset("rl:{1.2.3.4}:p:l:1.2.3.4", "x", "y")
    for _ in range(5):
        assert decide("p", {"ip": "1.2.3.4"}).unavailable
    assert [s["state"] for s in status()["breakers"]] == ["closed"]
    assert decide("p", {"ip": "5.6.7.8"}).allowed  # other keys on the endpoint are served
