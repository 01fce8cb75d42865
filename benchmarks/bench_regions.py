"""A day of skewed, shifting traffic over three regions, compressed: what each budget mode
admits against the ideal global limiter, over time and in total.

    .venv/bin/python -m benchmarks.bench_regions [--hour 2.5] [--img docs/img]

Three redis-servers on loopback are the regions eu, us and ap. One worker process per
region decides every request on its own Redis only, for four policies at once (the same
limit under the budgets fixed, full, shared and home); ``gcra_rebalance`` runs in its own
process "in eu", reaching us and ap through TCP proxies that add ``--rtt`` ms (the
cross-region round trip). The ideal global limiter is the GCRA twin
(``django_gcra.algorithm.gcra``) replayed over every region's requests merged in time
order: one limiter that sees everything at no latency. A probe also times decisions from
"us" on a global Redis across the same proxy, the design the regions replace.

Two scenarios run together, each limit 40/s with a burst of 8:

- ``global key``: one key (an API's global quota) whose traffic follows the sun: ap peaks
  at 04:00, eu at 12:00, us at 20:00 (each 0.15 + a raised cosine 10 h wide, 60/s at
  its peak, so the total is up to about 1.5 times the limit where two days overlap);
- ``geo tenants``: three tenants, one homed in each region, each following its region's
  sun, 85 % of its traffic from home and 7.5 % from each other region.

Prints the tables and draws docs/img/regions-day.png. Takes about ``24 * hour + 20`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import threading
import time

from tests.support.region_workers import ALIASES, regions_setting
from tests.support.servers import free_port, start_redis

from .slow_proxy import start_proxy

NAMES = ("eu", "us", "ap")
PEAK = {"ap": 4.0, "eu": 12.0, "us": 20.0}  # hour of each region's peak
RATE, BURST = 40, 8
PEAK_LOAD = 60.0  # requests per second of one key at its region's peak
MODES = ("fixed", "full", "shared", "home")
BUCKETS_PER_HOUR = 2
KEYS = {"global key": ["acme"], "geo tenants": ["eu-t", "us-t", "ap-t"]}


def sun(region: str, hour: float) -> float:
    """0.15 + a raised cosine 10 hours wide around the region's peak (hours wrap)."""
    d = (hour - PEAK[region] + 12) % 24 - 12
    return 0.15 + (0.5 + 0.5 * math.cos(math.pi * d / 5) if abs(d) < 5 else 0.0)


def load(key: str, region: str, hour: float) -> float:
    """Requests per second of ``key`` from ``region`` at ``hour``."""
    if key == "acme":
        return PEAK_LOAD * sun(region, hour) / 1.15
    home = key.split("-")[0]
    return PEAK_LOAD * sun(home, hour) / 1.15 * (0.85 if region == home else 0.075)


def policies() -> dict:
    limit = [{"name": "t", "key": ["tenant"], "rate": f"{RATE}/s", "burst": BURST}]
    return {"fixed": {"limits": limit, "budget": "fixed"}, "full": {"limits": limit, "budget": "full"},
            "shared": {"limits": limit},
            "home": {"limits": limit, "budget": {"home": "tests.support.region_workers.home_of", "away": 0.05}}}


def gcra_for(local: str, interval: float, refresh: float) -> dict:
    return {"REGIONS": regions_setting(local, NAMES, rebalance_interval=interval, refresh=refresh),
            "POLICIES": policies(), "DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"}}


def arrivals(region: str, hour_seconds: float, start: float, seed: int) -> list[tuple[float, str]]:
    """Poisson arrivals of every key from ``region`` over the compressed day, in time order."""
    rng = random.Random(seed)
    events = []
    for key in [k for keys in KEYS.values() for k in keys]:
        for step in range(24 * 12):  # the rate is held for 5 simulated minutes at a time
            hour = step / 12
            rate = load(key, region, hour + 1 / 24)
            a, b = start + hour * hour_seconds, start + (hour + 1 / 12) * hour_seconds
            t = a
            while rate > 0:
                t += rng.expovariate(rate)
                if t >= b:
                    break
                events.append((t, key))
    events.sort()
    return events


def worker(region: str, caches: dict, gcra: dict, hour_seconds: float, start: float, seed: int) -> dict:
    from tests.support.workers import setup_django

    setup_django(None, gcra, caches=caches)
    from django_gcra import decide

    for mode in MODES:
        for keys in KEYS.values():
            for key in keys:
                decide(mode, {"tenant": key}, cost=0)
    events = arrivals(region, hour_seconds, start, seed)
    offered: dict[str, list[float]] = {}
    admitted: dict[str, dict[str, list[float]]] = {mode: {} for mode in MODES}
    fallbacks = 0
    for due, key in events:
        now = time.time()
        if due > now:
            time.sleep(due - now)
        at = time.time()
        offered.setdefault(key, []).append(at)
        for mode in MODES:
            d = decide(mode, {"tenant": key})
            fallbacks += d.fallback
            if d.allowed:
                admitted[mode].setdefault(key, []).append(at)
    return {"region": region, "offered": offered, "admitted": admitted, "fallbacks": fallbacks,
            "late": max(0.0, time.time() - events[-1][0]) if events else 0.0}


def ideal(times: list[float]) -> list[float]:
    """The admitted times of one global GCRA over these request times (the twin)."""
    from django_gcra.algorithm import gcra

    interval = math.ceil(1_000_000 / RATE)
    tat, out = None, []
    for t in times:
        r = gcra(tat, round(t * 1_000_000), interval, BURST)
        if r.allowed:
            tat = r.tat
            out.append(t)
    return out


def buckets(times: list[float], start: float, hour_seconds: float) -> list[int]:
    counts = [0] * (24 * BUCKETS_PER_HOUR)
    for t in times:
        i = int((t - start) / hour_seconds * BUCKETS_PER_HOUR)
        if 0 <= i < len(counts):
            counts[i] += 1
    return counts


def run_proxies(pairs: list[tuple[int, int]], delay: float) -> None:
    loop = asyncio.new_event_loop()

    async def main() -> None:
        for listen, target in pairs:
            await start_proxy(listen, target, lambda: delay, upstream=True)
        await asyncio.Event().wait()

    threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True).start()


def probe(caches: dict, gcra: dict, rounds: int) -> dict:
    """Median decide() latency from us: on its own Redis, and on eu's across the proxy."""
    import dataclasses

    from tests.support.workers import setup_django

    setup_django(None, gcra, caches=caches)
    from django_gcra import decide
    from django_gcra.plan import get_policy

    remote = dataclasses.replace(get_policy("full"), cache_alias="global")
    out = {}
    for name, policy in (("local Redis", get_policy("full")), ("global Redis across the proxy", remote)):
        decide(policy, {"tenant": "probe"}, cost=0)
        took = []
        for _ in range(rounds):
            t = time.perf_counter()
            decide(policy, {"tenant": "probe"}, cost=0)
            took.append((time.perf_counter() - t) * 1000)
        out[name] = statistics.median(took)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hour", type=float, default=2.5, help="seconds per simulated hour")
    parser.add_argument("--interval", type=float, default=0.5, help="rebalance_interval, seconds")
    parser.add_argument("--refresh", type=float, default=0.1, help="refresh, seconds")
    parser.add_argument("--rtt", type=float, default=40.0, help="ms added between regions")
    parser.add_argument("--img", default="docs/img", help="where to draw the plot ('' for none)")
    parser.add_argument("--json", default="benchmarks/results/regions.json",
                        help="where to write the results the plot is drawn from ('' for none)")
    parser.add_argument("--plot-only", action="store_true", help="simulate nothing: redraw from --json")
    args = parser.parse_args()
    if args.plot_only:
        with open(args.json) as stored:
            draw(json.load(stored), args.img)
        return

    servers = {name: start_redis() for name in NAMES}
    proxied = {name: free_port() for name in ("us", "ap")}
    run_proxies([(proxied[n], servers[n].port) for n in proxied], args.rtt / 1000)
    options = {"SOCKET_CONNECT_TIMEOUT": 1.0, "SOCKET_TIMEOUT": 1.0}

    def caches(via_proxy: tuple[str, ...] = ()) -> dict:
        out = {}
        for name in NAMES:
            port = proxied[name] if name in via_proxy else servers[name].port
            out[ALIASES[name]] = {"BACKEND": "django_redis.cache.RedisCache",
                                  "LOCATION": f"redis://127.0.0.1:{port}/0", "OPTIONS": options}
        return out

    try:
        from django_gcra.backends.redis import SCRIPT

        for server in servers.values():
            server.client().script_load(SCRIPT)
        rebalancer_caches = caches(("us", "ap"))
        spec = json.dumps({"gcra": gcra_for("eu", args.interval, args.refresh), "caches": rebalancer_caches})
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        rebalancer = subprocess.Popen([sys.executable, "-c", REBALANCER, spec], cwd=root,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ctx = multiprocessing.get_context("spawn")
        probe_caches = {**caches(), "global": {"BACKEND": "django_redis.cache.RedisCache",
                                                     "LOCATION": f"redis://127.0.0.1:{proxied['us']}/0",
                                                     "OPTIONS": options}}
        with ctx.Pool(1) as pool:
            latency = pool.apply(probe, (probe_caches, gcra_for("us", args.interval, args.refresh), 50))
        start = math.ceil(time.time() + 6.0)
        with ctx.Pool(len(NAMES)) as pool:
            pending = pool.starmap_async(worker, [
                (name, caches(), gcra_for(name, args.interval, args.refresh), args.hour, start, i)
                for i, name in enumerate(NAMES)])
            results = pending.get(24 * args.hour + 120)
        rebalancer.terminate()
        rebalancer.communicate(timeout=10)
        log = [json.loads(e) for e in reversed(servers["eu"].client().lrange("rl:regions:log", 0, -1))]
    finally:
        for server in servers.values():
            server.stop()
    report = analyse(results, start, args, latency, log)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.img:
        draw(report, args.img)


REBALANCER = """
import json, sys
spec = json.loads(sys.argv[1])
from tests.support.workers import setup_django
setup_django(None, spec["gcra"], caches=spec["caches"])
from django.core.management import call_command
call_command("gcra_rebalance")
"""


def analyse(results: list[dict], start: float, args: argparse.Namespace, latency: dict, log: list) -> dict:
    report: dict = {"config": {"hour": args.hour, "interval": args.interval, "refresh": args.refresh,
                               "rtt_ms": args.rtt, "rate": RATE, "burst": BURST},
                    "latency_ms": latency, "rebalances": len(log),
                    "fallbacks": sum(r["fallbacks"] for r in results),
                    "late_s": max(r["late"] for r in results), "scenarios": {}}
    print("decide() median latency from us: " + ", ".join(f"{k} {v:.2f} ms" for k, v in latency.items()))
    print(f"{len(log)} share changes logged; {report['fallbacks']} fallback decisions; the workers ended "
          f"{report['late_s']:.2f}s after their last scheduled request")
    for scenario, keys in KEYS.items():
        ideal_b = [0] * (24 * BUCKETS_PER_HOUR)
        offered_total = 0
        per_mode = {mode: [0] * (24 * BUCKETS_PER_HOUR) for mode in MODES}
        for key in keys:
            times = sorted(t for r in results for t in r["offered"].get(key, []))
            offered_total += len(times)
            for i, c in enumerate(buckets(ideal(times), start, args.hour)):
                ideal_b[i] += c
            for mode in MODES:
                admitted = [t for r in results for t in r["admitted"][mode].get(key, [])]
                for i, c in enumerate(buckets(admitted, start, args.hour)):
                    per_mode[mode][i] += c
        total_ideal = sum(ideal_b)
        rows = {}
        for mode in MODES:
            total = sum(per_mode[mode])
            over = sum(max(0, a - b) for a, b in zip(per_mode[mode], ideal_b))
            under = sum(max(0, b - a) for a, b in zip(per_mode[mode], ideal_b))
            rows[mode] = {"admitted": total, "ratio": total / total_ideal, "over": over / total_ideal,
                          "under": under / total_ideal,
                          "abs_error": (over + under) / total_ideal, "series": per_mode[mode]}
        report["scenarios"][scenario] = {"offered": offered_total, "ideal": total_ideal, "ideal_series": ideal_b,
                                         "modes": rows}
        print(f"\n{scenario}: {offered_total} requests, the ideal global limiter admits {total_ideal}")
        print(f"{'mode':8} {'admitted':>9} {'vs ideal':>9} {'over':>7} {'under':>7} {'|error|':>8}")
        for mode, row in rows.items():
            print(f"{mode:8} {row['admitted']:9d} {row['ratio']:9.1%} {row['over']:7.1%} {row['under']:7.1%} "
                  f"{row['abs_error']:8.1%}")
    return report


def draw(report: dict, directory: str) -> str:
    """Four stacked panels (``benchmarks.figstyle``): per scenario, admitted per second
    against the ideal, then the relative error. One simulated day, no rounds."""
    from benchmarks.figstyle import figure

    os.makedirs(directory, exist_ok=True)
    colors = {"fixed": "#e0a040", "full": "#c0504d", "shared": "#2a7ab9", "home": "#6a9f58"}
    fig, axes = figure(4, height=2.9, sharex=True)
    hours = [i / BUCKETS_PER_HOUR for i in range(24 * BUCKETS_PER_HOUR)]
    for row, (scenario, data) in enumerate(report["scenarios"].items()):
        ax, err = axes[2 * row], axes[2 * row + 1]
        scale = BUCKETS_PER_HOUR / report["config"]["hour"]  # admitted per bucket -> per second
        ax.plot(hours, [v * scale for v in data["ideal_series"]], color="black", lw=2, label="ideal global")
        for mode, m in data["modes"].items():
            ax.plot(hours, [v * scale for v in m["series"]], color=colors[mode], lw=1.2,
                    label=f"{mode} ({m['ratio']:.0%})")
            err.plot(hours, [(a - b) / max(1, b) for a, b in zip(m["series"], data["ideal_series"])],
                     color=colors[mode], lw=1.2, label=f"{mode}: {m['abs_error']:.1%}")
        ax.set_title(f"{scenario}: admitted per second")
        err.set_title(f"{scenario}: (admitted - ideal) / ideal; total |error|")
        err.axhline(0, color="black", lw=0.8)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.45)  # room for the legend
        low, high = err.get_ylim()
        err.set_ylim(low, high + (high - low) * 0.45)
        ax.legend(ncol=3, loc="upper left")
        err.legend(ncol=4, loc="upper left")
        for a in (ax, err):
            a.grid(alpha=0.3)
    axes[-1].set_xlabel("simulated hour")
    c = report["config"]
    fig.suptitle(f"A day over three regions: limit {c['rate']}/s burst {c['burst']}, 1 h = {c['hour']:g} s,\n"
                 f"rebalance every {c['interval']:g} s, +{c['rtt_ms']:g} ms between regions")
    fig.tight_layout()
    path = os.path.join(directory, "regions-day.png")
    fig.savefig(path)
    import matplotlib.pyplot as plt

    plt.close(fig)
    print(f"\ndrew {path}")
    return path


if __name__ == "__main__":
    main()
