"""Worker processes for the concurrency tests, and the Django set-up they share with the benchmarks."""

from __future__ import annotations

import asyncio
import time

# A generous limiter timeout for tests and benchmarks: a loaded machine must never turn a
# measured decision into an on_failure fallback (the fault tests set their own tight one).
TEST_TIMEOUT_MS = 1000
ASYNC_TASKS = 16  # hammer_path's tasks per event loop


def setup_django(redis_url: str | None, gcra: dict, *, apps: tuple[str, ...] = (), caches: dict | None = None,
                 **extra: object) -> None:
    """Configure Django in a benchmark or worker process: the redis-server at ``redis_url``
    as the default cache (or ``caches``); ``gcra`` as DJANGO_GCRA, with audit off (a denial flood would
    time the database) and ``TEST_TIMEOUT_MS`` unless ``gcra`` sets a TIMEOUT; and an
    in-memory database shared by this process's threads (the override reload of async
    code runs in one) holding an empty overrides table, so decisions take the path of a
    deployment without overrides."""
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", *apps, "django_gcra"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": "file:django_gcra_bench?mode=memory&cache=shared"}},
        CACHES=caches or {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}},
        DJANGO_GCRA={"AUDIT": {"ENABLED": False}, "TIMEOUT": TEST_TIMEOUT_MS, **gcra},
        **extra,
    )
    django.setup()
    from django.db import connection

    from django_gcra.models import LimitOverride

    with connection.schema_editor() as editor:
        editor.create_model(LimitOverride)


def hammer(redis_url: str, gcra: dict, policy: str, descriptors: dict, start_at: float, duration: float,
           max_calls: int = 200_000) -> tuple[int, int, float, float]:
    """Call decide() from ``start_at`` for ``duration`` seconds; return (admitted, calls, first, last)."""
    admitted, calls, first, last, _ = hammer_path("sync", redis_url, gcra, policy, descriptors, start_at, duration,
                                                  max_calls)
    return admitted, calls, first, last


def hammer_path(path: str, redis_url: str, gcra: dict, policy: str, descriptors: dict, start_at: float,
                duration: float, max_calls: int = 200_000) -> tuple[int, int, float, float, int]:
    """``hammer`` by one decision path: ``"sync"`` (``decide()``), ``"memo-full"``
    (``decide()`` with no plan memoized, as when the plan memo is full) or ``"async"``
    (``adecide()`` from ``ASYNC_TASKS`` tasks of one event loop, multiplexed). Also return
    the decisions this process's leases served from memory (0 without a lease)."""
    setup_django(redis_url, gcra)
    from django_gcra import adecide, decide
    from django_gcra.engine import current
    from django_gcra.leases import lease_stats

    if path == "memo-full":
        current().planner.memo.size = 0  # (this process's settings do not change: one engine)
    if path == "async":
        result = asyncio.run(_ahammer(adecide, policy, descriptors, start_at, duration, max_calls))
    else:
        decide(policy, descriptors, cost=0)  # connect and load the script before the clock starts
        result = timed_loop(lambda: decide(policy, descriptors).allowed, start_at, duration, max_calls)
    stats = lease_stats().get(policy)
    return (*result, stats.local if stats else 0)


async def _ahammer(adecide, policy: str, descriptors: dict, start_at: float, duration: float,
                   max_calls: int) -> tuple[int, int, float, float]:
    await adecide(policy, descriptors, cost=0)  # connect and load the script before the clock starts
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    counts = [0, 0]  # admitted, calls
    first = time.time()
    deadline = first + duration

    async def task() -> None:
        while counts[1] < max_calls and time.time() < deadline:
            counts[1] += 1
            allowed = (await adecide(policy, descriptors)).allowed  # (awaited before counts[0] is read)
            counts[0] += allowed

    await asyncio.gather(*(task() for _ in range(ASYNC_TASKS)))
    return counts[0], counts[1], first, time.time()


def timed_loop(admit, start_at: float, duration: float, max_calls: int) -> tuple[int, int, float, float]:
    """Wait for ``start_at``, then call ``admit()`` for ``duration`` seconds (at most
    ``max_calls`` times); return (admitted, calls, first, last) with wall-clock times."""
    while time.time() < start_at:
        time.sleep(0.001)
    admitted = calls = 0
    first = time.time()
    deadline = first + duration
    while calls < max_calls and time.time() < deadline:
        calls += 1
        admitted += bool(admit())
    return admitted, calls, first, time.time()


def hammer_times(redis_url: str, gcra: dict, policy: str, descriptors: dict, start_at: float, duration: float,
                 max_calls: int = 200_000) -> tuple[list[int], int]:
    """Like ``hammer``, on the store directly: the Redis times (us, the script's own clock,
    ``Outcome.now``) of the admitted decisions, and the number of calls."""
    setup_django(redis_url, gcra)
    from django_gcra.engine import current

    engine = current()
    specs = engine.plan(policy, descriptors).specs
    backend = engine.stores.backend()
    backend.evaluate(specs, 0)  # connect and load the script before the clock starts
    times: list[int] = []

    def admit() -> bool:
        outcome = backend.evaluate(specs, 1)
        if outcome.allowed:
            times.append(outcome.now)
        return outcome.allowed

    _, calls, _, _ = timed_loop(admit, start_at, duration, max_calls)
    return times, calls


def pace_times(redis_url: str, gcra: dict, policy: str, descriptors: dict, start_at: float, threads: int,
               calls: int, max_wait: float) -> tuple[int, list[int], int, float]:
    """``threads`` threads each pacing ``calls`` times through ``policy`` (``django_gcra.pace``);
    return (the Redis time before the first call, the Redis times at which paced work started,
    refusals, seconds waited in all). Times are the store's clock (us), read right after each
    wait, so a start is never reported earlier than it happened."""
    import threading

    setup_django(redis_url, gcra)
    import redis

    from django_gcra import SlotRefused, decide, pace

    decide(policy, descriptors, cost=0)  # connect and load the script before the clock starts
    clients = [redis.Redis.from_url(redis_url) for _ in range(threads)]

    def now_us(client: redis.Redis) -> int:
        seconds, micros = client.time()
        return seconds * 1_000_000 + micros

    starts: list[int] = []
    refused = [0]
    waited = [0.0]
    lock = threading.Lock()

    def work(client: redis.Redis) -> None:
        for _ in range(calls):
            try:
                decision = pace(policy, descriptors, max_wait=max_wait).decision
            except SlotRefused:
                with lock:
                    refused[0] += 1
                continue
            started = now_us(client)
            with lock:
                starts.append(started)
                waited[0] += decision.waited

    while time.time() < start_at:
        time.sleep(0.001)
    first = now_us(clients[0])
    workers = [threading.Thread(target=work, args=(c,)) for c in clients]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    for c in clients:
        c.close()
    return first, starts, refused[0], waited[0]


def reserve_and_settle(redis_url: str, gcra: dict, policy: str, descriptors: dict, start_at: float, duration: float,
                       seed: int, max_calls: int = 20_000) -> tuple[int, int, int, int]:
    """Reserve one unit (``decide``) and settle it to 0 (a refund: ``count_when`` false) or
    to 1 (kept), at random, from ``start_at`` for ``duration`` seconds. A counter in the
    store follows what is outstanding (reserved and not refunded, or kept): incremented
    right after each admission, decremented right before each refund, so it never reads
    more than the limiter really has out. Return (admitted, kept, the counter's largest
    value this process saw, calls)."""
    import random

    import redis

    setup_django(redis_url, gcra)
    from django_gcra import decide

    rng = random.Random(seed)
    counter = redis.Redis.from_url(redis_url)
    decide(policy, descriptors, cost=0)  # connect and load the script before the clock starts
    counts = {"admitted": 0, "kept": 0, "most": 0}

    def once() -> bool:
        decision = decide(policy, descriptors)
        if not decision.allowed:
            return False
        counts["admitted"] += 1
        counts["most"] = max(counts["most"], int(counter.incr("outstanding")))
        if rng.random() < 0.05:
            decision.settle(1)
            counts["kept"] += 1
        else:
            counter.decr("outstanding")
            decision.settle(0)
        return True

    _, calls, _, _ = timed_loop(once, start_at, duration, max_calls)
    return counts["admitted"], counts["kept"], counts["most"], calls
