"""decide() against the seed's bare GCRA script, on one real redis-server, in one run.

    .venv/bin/python -m benchmarks.bench_core [--ops 4000] [--rounds 5]

Prints decisions per second (medians of alternating rounds) for a hot key and for
10,000 keys, the ratio decide()/bare, and the Redis commands the client sends per
decision for a two-limit composite policy (INFO commandstats counts the commands a
script runs inside Redis too; those are listed apart).
"""

from __future__ import annotations

import argparse
import statistics
import time

from tests.support.servers import start_redis
from tests.support.workers import setup_django

from .wire import sent_commands

BARE_SCRIPT = """
local T    = tonumber(ARGV[1])
local B    = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t    = redis.call('TIME')
local now  = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat  = tat + T * cost
local allow_at = new_tat - B * T
if allow_at > now then
  return {0, allow_at - now, 0}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, 0, math.floor((now - allow_at) / T)}
"""  # the seed's script, verbatim but for comments

POLICIES = {
    "one": {"limits": [{"name": "user", "key": ["user"], "rate": "100000/s", "burst": 1000}]},
    "two": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "100000/s", "burst": 1000},
                       {"name": "user", "key": ["tenant", "user"], "rate": "100000/s", "burst": 1000}]},
}


def setup(url: str) -> None:
    setup_django(url, {"DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"}, "POLICIES": POLICIES})


def rate(func, ops: int) -> float:
    start = time.perf_counter()
    for i in range(ops):
        func(i)
    return ops / (time.perf_counter() - start)


def commandstats(client) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in client.info("commandstats").items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=4000, help="decisions per round and contender")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    server = start_redis()
    try:
        setup(server.url)
        from django_gcra import decide
        from django_gcra.engine import current
        from django_gcra.limiter import get_policy

        client = server.client()
        bare = client.register_script(BARE_SCRIPT)
        interval = get_policy("one").limits[0].rates[None].interval
        n_keys = 10_000
        contenders = {
            ("bare script", "hot"): lambda i: bare(keys=["bare:{u}:hot"], args=[interval, 1000, 1]),
            ("decide()", "hot"): lambda i: decide("one", {"user": "hot"}),
            ("bare script", "10k keys"): lambda i: bare(keys=[f"bare:{{u{i % n_keys}}}"], args=[interval, 1000, 1]),
            ("decide()", "10k keys"): lambda i: decide("one", {"user": f"u{i % n_keys}"}),
        }
        for func in contenders.values():
            func(0)  # connect, load scripts
        results: dict[tuple[str, str], list[float]] = {name: [] for name in contenders}
        for _ in range(args.rounds):  # alternate, so noise hits every contender alike
            for name, func in contenders.items():
                results[name].append(rate(func, args.ops))

        print(f"redis-server {client.info('server')['redis_version']} on 127.0.0.1, one client thread, "
              f"{args.rounds} rounds x {args.ops} decisions, medians")
        print(f"{'contender':<14}{'keys':<10}{'decisions/s':>12}")
        for (who, keys), values in results.items():
            print(f"{who:<14}{keys:<10}{statistics.median(values):>12,.0f}")
        for keys in ("hot", "10k keys"):
            ratios = [d / b for d, b in zip(results[("decide()", keys)], results[("bare script", keys)])]
            print(f"decide()/bare ({keys}): {statistics.median(ratios):.2f}x (target >= 0.8x)")

        # Commands the client sends per decision of the two-limit composite policy.
        current().backend_for(get_policy("two"))
        decide("two", {"tenant": "t", "user": "u"})
        before = commandstats(client)
        n = 1000
        with sent_commands() as sent:
            for i in range(n):
                decide("two", {"tenant": "t", "user": f"u{i % 50}"})
        after = commandstats(client)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
        delta.pop("info", None)
        client_side = {k: v for k, v in delta.items() if k in ("evalsha", "eval", "script|load", "script")}
        in_script = {k: v for k, v in delta.items() if k not in client_side}
        print(f"two-limit composite: {len(sent) / n:.3f} commands sent by the client per decision "
              f"({', '.join(sorted(set(map(str, sent))))}); commandstats: "
              + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(client_side.items()))
              + " per decision; inside the script: "
              + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(in_script.items())))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
