"""Worker processes for the multi-region tests and benchmark: one region's Django process
offering a paced load to several policies, and the rebalancer command in its own process.

Run as ``python -m tests.support.region_workers rebalance '<json>'`` for the command:
the JSON holds ``urls`` (region -> redis URL), ``gcra`` (DJANGO_GCRA) and ``args``."""

from __future__ import annotations

import dataclasses
import json
import sys
import time

from tests.support.workers import setup_django

ALIASES = {"eu": "default", "us": "us-redis", "ap": "ap-redis"}  # region -> cache alias
GLOBAL_ALIAS = "global"  # the one-Redis baseline: the ideal global limiter
SOCKET_TIMEOUT = 0.5  # seconds, on every alias: a paused peer fails a rebalance read in bounded time


def home_of(descriptors):
    """A home-region function: a tenant named "<region>-..." lives in that region, the others in eu."""
    prefix = str(descriptors.get("tenant", "")).split("-", 1)[0]
    return prefix if prefix in ALIASES else "eu"


def caches_for(urls: dict[str, str]) -> dict:
    options = {"SOCKET_CONNECT_TIMEOUT": SOCKET_TIMEOUT, "SOCKET_TIMEOUT": SOCKET_TIMEOUT}
    caches = {ALIASES[region]: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url, "OPTIONS": options}
              for region, url in urls.items() if region in ALIASES}
    if GLOBAL_ALIAS in urls:
        caches[GLOBAL_ALIAS] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": urls[GLOBAL_ALIAS],
                                "OPTIONS": options}
    return caches


def regions_setting(local: str, regions: tuple[str, ...], **tuning) -> dict:
    return {"local": local, "caches": {r: ALIASES[r] for r in regions}, **tuning}


def region_worker(urls: dict[str, str], gcra: dict, calls: list[tuple[str, str]], phases: list[tuple[float, float]],
                  start_at: float, global_policies: tuple[str, ...] = ()) -> dict:
    """From ``start_at``, offer a paced load in ``phases`` ((seconds, requests per second),
    one after the other); each request decides every (policy, tenant) in ``calls``.
    Policies in ``global_policies`` are decided on the one global Redis (the baseline).
    Returns, per "policy:tenant", the admitted times, the decisions made on the store and
    the fallback decisions; and the requests offered."""
    setup_django(None, gcra, caches=caches_for(urls))
    from django_gcra import decide
    from django_gcra.plan import get_policy

    policies = {}
    for name, _ in calls:
        policy = get_policy(name)
        policies[name] = dataclasses.replace(policy, cache_alias=GLOBAL_ALIAS) if name in global_policies else policy
    out = {f"{p}:{t}": {"admitted": [], "store": 0, "fallback": 0, "calls": 0} for p, t in calls}
    for name, tenant in calls:  # connect, load the share table, before the clock starts
        decide(policies[name], {"tenant": tenant}, cost=0)
        out[f"{name}:{tenant}"]["store"] += 1
    while time.time() < start_at:
        time.sleep(0.001)
    first = time.time()
    offered = 0
    times = []
    for due in _schedule(first, phases):
        now = time.time()
        if due > now:
            time.sleep(due - now)
        offered += 1
        times.append(time.time())
        for name, tenant in calls:
            d = decide(policies[name], {"tenant": tenant})
            entry = out[f"{name}:{tenant}"]
            entry["calls"] += 1
            if d.fallback:
                entry["fallback"] += 1
            else:
                entry["store"] += 1
            if d.allowed:
                entry["admitted"].append(time.time())
    return {"results": out, "first": first, "last": time.time(), "offered": offered, "times": times}


def _schedule(first: float, phases: list[tuple[float, float]], most: int = 1_000_000):
    """The due times of a paced load: ``phases`` of (seconds, rate) from ``first``."""
    start, count = first, 0
    for seconds, rate in phases:
        if rate > 0:
            for i in range(int(seconds * rate)):
                if count >= most:
                    return
                count += 1
                yield start + i / rate
        start += seconds


def rebalance_command(urls: dict[str, str], gcra: dict, args: list[str]) -> None:
    setup_django(None, gcra, caches=caches_for(urls))
    from django.core.management import call_command

    call_command("gcra_rebalance", *args)


if __name__ == "__main__":
    if sys.argv[1] == "rebalance":
        spec = json.loads(sys.argv[2])
        rebalance_command(spec["urls"], spec["gcra"], spec["args"])
