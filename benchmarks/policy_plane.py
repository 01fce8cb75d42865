"""What the policy plane adds to a decision: override lookup, audit buffer, metrics.

Starts a real redis-server on a free loopback port and a file SQLite database, then
times decide() in the same run under four set-ups and prints per-call times and their
ratio to the bare one. Usage: python benchmarks/policy_plane.py [calls]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def setup(redis_url: str, db: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_gcra"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": db}},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}},
        USE_TZ=True,
        DJANGO_GCRA={
            "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"},
            "POLICIES": {
                "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "1000000/s", "burst": 1000000},
                                   {"name": "user", "key": ["tenant", "user"], "rate": "1000000/s"}]},
                "trial": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "1/h", "burst": 1}],
                          "mode": "shadow"},
            },
            "AUDIT": {"FLUSH_INTERVAL": 0.5},
        },
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def per_call(policy: str, descriptors: dict, calls: int) -> float:
    from django_gcra import decide

    started = time.perf_counter()
    for _ in range(calls):
        decide(policy, descriptors)
    return (time.perf_counter() - started) / calls


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rounds = 5
    from tests.support.servers import start_redis

    server = start_redis()
    try:
        setup(server.url, os.path.join(tempfile.mkdtemp(prefix="gcra-bench-"), "db.sqlite3"))
        from django_gcra import audit, metrics
        from django_gcra.engine import current
        from django_gcra.models import AuditEvent, LimitOverride
        from django_gcra.overrides import load_index
        from django_gcra.signals import notable_observers, observers

        LimitOverride.objects.bulk_create(
            [LimitOverride(policy="api", limit="user", match={"tenant": f"t{i}", "user": str(i)}, burst=5)
             for i in range(1000)] + [LimitOverride(policy="api", limit="tenant", match={"tenant": "acme"},
                                                    rate="999999/s")])
        loaded, empty = load_index(), {}

        def state(index: dict, observe: bool) -> None:
            cache = current().overrides
            cache.index, cache.loaded_at, cache.next_check = index, time.monotonic(), time.monotonic() + 3600
            observers[:] = []
            notable_observers[:] = [audit.on_decision, metrics.on_decision] if observe else []

        who = {"tenant": "acme", "user": "7"}
        scenarios = [
            ("bare (no observers, no overrides)", empty, False, "api", who),
            ("1,001 overrides loaded (one matches)", loaded, False, "api", who),
            ("overrides + audit and metrics observers", loaded, True, "api", who),
            ("overrides + observers, every call a shadow would-deny", loaded, True, "trial", {"tenant": "acme"}),
        ]
        best = [float("inf")] * len(scenarios)
        for _ in range(rounds):  # interleaved, so load on the machine hits every scenario alike
            for i, (_, index, observe, policy, descriptors) in enumerate(scenarios):
                state(index, observe)
                best[i] = min(best[i], per_call(policy, descriptors, calls))
        audit.recorder.stop()
        counts = list(AuditEvent.objects.values_list("count", flat=True))
        print(f"decide() against a real redis-server, best of {rounds} interleaved rounds x {calls} calls, "
              f"prometheus_client={metrics.AVAILABLE}")
        for (label, *_), value in zip(scenarios, best):
            print(f"  {label:<55} {value * 1e6:8.1f} us/call  x{value / best[0]:.2f}")
        print(f"  audit: {rounds * calls - 1} shadow would-denies left {len(counts)} rows, counts summing to "
              f"{sum(counts)}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
