"""``gcra_check``: is each configured store fit to decide? One line per problem, exit 1.

For the ``CACHE_ALIAS`` store, every ``REGIONS`` cache and every policy's own
``cache_alias``: the scripts load and may call ``TIME``; every key of a decision shares one
Redis Cluster slot; the eviction policy cannot evict limiter keys (``allkeys-*``); the
store's clock is within ``MAX_SKEW`` of this host's; the script's round-trip p99 is within
``TIMEOUT``; and which Lua the server runs.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import redis
import redis.cluster
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.crc import key_slot

from django_gcra import catalog
from django_gcra.backends.base import LimitSpec
from django_gcra.backends.clients import Timeouts, build_sync_client, endpoint_name
from django_gcra.backends.redis import SCRIPT, SCRIPT_SHA, script_args
from django_gcra.backends.slots import EXTEND_SCRIPT
from django_gcra.conf import get_settings
from django_gcra.engine import current
from django_gcra.policy import Policy

MAX_SKEW = 1.0  # seconds between this host's clock and the store's
SAMPLE_VALUES = ("203.0.113.7", "a{b}:c%")  # descriptor values: a plain one, and one a hash tag could trip on
PROBE = "gcra_check"  # the probe key's policy and limit part: <prefix>:{gcra_check}:gcra_check:probe:
LUA_VERSION = "return _VERSION"
host_time = time.time  # this host's clock, as the skew is measured against it


def stores() -> dict[str, list[Policy]]:
    """Every cache alias the limiter decides on, with the policies it decides there."""
    config = get_settings()
    found: dict[str, list[Policy]] = {config.cache_alias: []}
    if config.regions is not None:
        for alias in config.regions.caches.values():
            found.setdefault(alias, [])
    for policy in catalog.policies().values():
        found.setdefault(policy.cache_alias or config.cache_alias, []).append(policy)
        if config.regions is not None and policy.cache_alias is None:  # decided on every region's store
            for alias in config.regions.caches.values():
                if alias != config.cache_alias:
                    found[alias].append(policy)
    return found


def decision_slots(policy: Policy) -> tuple[dict[str, int], list[str]]:
    """The Redis Cluster slot of every key of sample decisions of ``policy`` (every limit
    applying, as ``decide()`` builds them), and a problem per decision spanning slots."""
    found: dict[str, int] = {}
    problems = []
    for value in SAMPLE_VALUES:
        descriptors: dict[str, Any] = dict.fromkeys(policy.descriptors, value)
        keys = [spec.key for spec in current().plan(policy, descriptors, cost=0).specs]
        slots = {key: key_slot(key.encode()) for key in keys}
        found.update(slots)
        if len(set(slots.values())) > 1:
            problems.append(f"policy {policy.name!r}: the keys of one decision span {len(set(slots.values()))} "
                            f"cluster slots ({', '.join(keys)}): a composite decision fails on Redis Cluster")
    return found, problems


def _nodes(client: Any) -> list[Any]:
    """The clients of the primaries behind ``client`` (itself unless on Redis Cluster)."""
    if isinstance(client, redis.cluster.RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def check_store(alias: str, policies: list[Policy], samples: int, timeout: float = 5.0) -> dict[str, Any]:
    """The facts of one store and its problems (each a line of its own). The store is reached
    by a client built as the limiter builds its own (the same servers, TLS and credentials),
    each connect and command bounded by ``timeout`` seconds."""
    from django.conf import settings
    from django.core.cache import caches

    config = get_settings()
    report: dict[str, Any] = {"alias": alias, "endpoint": endpoint_name(settings.CACHES.get(alias, {})),
                              "problems": [], "notes": [], "slots": {}}
    problems, notes = report["problems"], report["notes"]
    for policy in policies:
        report["slots"][policy.name], spanning = decision_slots(policy)
        problems.extend(spanning)
    try:
        client = build_sync_client(caches[alias].client, Timeouts(timeout, timeout))
        node = _nodes(client)[0]
        node.ping()
    except Exception as exc:
        problems.append(f"unreachable: {type(exc).__name__}: {exc}")
        return report
    report["server"] = _server(node)
    # The scripts: each loads (a server or ACL refusing scripts fails here) and runs, TIME included.
    try:
        for script in (SCRIPT, EXTEND_SCRIPT):
            client.script_load(script)
        report["lua"] = _decode(client.eval(LUA_VERSION, 0))
    except redis.RedisError as exc:
        problems.append(f"the scripts cannot run: {type(exc).__name__}: {exc}")
        return report
    # The round trip of the decision script itself (cost 0 peeks: nothing written), and the
    # store's clock from its reply (its TIME), against this host's at the fastest call's midpoint.
    key = f"{config.prefix}:{{{PROBE}}}:{PROBE}:probe:"
    args = script_args([LimitSpec(key, 1_000_000, 1, True)], 0)
    took, skews = [], []
    try:
        for _ in range(samples):
            before = host_time()
            started = time.perf_counter()
            reply = client.evalsha(SCRIPT_SHA, 1, key, *args)
            took.append(time.perf_counter() - started)
            skews.append((took[-1], int(reply[4]) / 1e6 - (before + took[-1] / 2)))
    except redis.RedisError as exc:
        problems.append(f"the decision script fails (TIME not allowed?): {type(exc).__name__}: {exc}")
        return report
    p99 = _percentile(took, 0.99)
    skew = min(skews)[1]
    report.update(p99_ms=round(p99 * 1000, 3), timeout_ms=round(config.timeout * 1000, 3), samples=samples,
                  skew_ms=round(skew * 1000, 1))
    if p99 > config.timeout:
        problems.append(f"script round trip p99 {p99 * 1000:.1f} ms over {samples} calls exceeds TIMEOUT "
                        f"{config.timeout * 1000:g} ms: decisions would fall back (on_failure)")
    if abs(skew) > MAX_SKEW:
        problems.append(f"clock skew {skew:+.1f} s between this host and the store (over {MAX_SKEW:g} s): "
                        "run NTP on both")
    # Eviction: allkeys-* may evict a limiter key, which resets its limit.
    eviction = []
    for node in _nodes(client):
        try:
            eviction.append(_decode(node.config_get("maxmemory-policy").get("maxmemory-policy", "?")))
        except redis.RedisError as exc:
            notes.append(f"maxmemory-policy unknown (CONFIG GET refused: {exc}); use noeviction or volatile-*")
            break
    report["maxmemory_policy"] = ",".join(sorted(set(eviction))) or None
    for policy_name in sorted({p for p in eviction if p.startswith("allkeys-")}):
        problems.append(f"maxmemory-policy {policy_name} can evict limiter keys (a limit silently resets): "
                        "use noeviction or volatile-*")
    return report


def _server(node: Any) -> str:
    """``redis 7.0.15``, ``valkey 9.1.2``: from HELLO (any user may send it), else INFO."""
    try:
        reply = node.execute_command("HELLO")
        hello = dict(zip(reply[::2], reply[1::2])) if isinstance(reply, list) else dict(reply)
        found = {_decode(k): _decode(v) for k, v in hello.items() if k in (b"server", b"version", "server", "version")}
        return f"{found['server']} {found['version']}"
    except (redis.RedisError, KeyError):
        pass
    try:
        info = node.info("server")
    except redis.RedisError:
        return "unknown"
    name = info.get("server_name") or "redis"
    return f"{name} {info.get(f'{name}_version') or info.get('redis_version', '?')}"


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Command(BaseCommand):
    help = ("Check every store the limiter decides on: scripts and TIME, cluster slots, eviction policy, "
            "clock skew, round-trip p99 against TIMEOUT, Lua version. Exits 1 with one line per problem.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the findings as JSON.")
        parser.add_argument("--samples", type=int, default=50,
                            help="Script calls timed per store for the p99 (default 50).")
        parser.add_argument("--timeout", type=float, default=5.0,
                            help="Seconds each connect and command may take (default 5).")

    def handle(self, *args: Any, json: bool, samples: int, timeout: float, **options: Any) -> None:
        if samples < 1:
            raise CommandError("--samples must be at least 1")
        if not 0 < timeout <= 600:
            raise CommandError("--timeout must be a number of seconds above 0 and at most 600")
        try:
            get_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(f"DJANGO_GCRA is in error: {exc}") from None
        catalog.discover()  # the inline and DRF policies' keys are checked too
        reports = [check_store(alias, policies, samples, timeout) for alias, policies in stores().items()]
        problems = [f"{r['alias']} ({r['endpoint']}): {p}" for r in reports for p in r["problems"]]
        if json:
            self.stdout.write(_json({"ok": not problems, "stores": reports, "problems": problems}))
        else:
            for r in reports:
                for note in r["notes"]:
                    self.stdout.write(f"{r['alias']} ({r['endpoint']}): note: {note}")
            for line in problems:
                self.stdout.write(self.style.ERROR(line))
            if not problems:
                for r in reports:
                    self.stdout.write(self.style.SUCCESS(
                        f"OK {r['alias']} ({r['endpoint']}): {r['server']}, {r['lua']}, scripts load, "
                        f"p99 {r['p99_ms']:g} ms (TIMEOUT {r['timeout_ms']:g} ms), skew {r['skew_ms']:+g} ms, "
                        f"maxmemory-policy {r['maxmemory_policy'] or 'unknown'}"))
        if problems:
            raise CommandError(f"{len(problems)} problem(s) found", returncode=1)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)
