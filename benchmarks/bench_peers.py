"""django_gcra against the rate limiters a Django user would otherwise pick, on one redis-server.

    ./scripts/bench-peers.sh [--ops 300] [--rounds 20] [--seconds 3]

(which installs benchmarks/requirements.txt into .venv, then runs this module).

Starts a private redis-server on a free loopback port and measures, in one run:
decisions per second from one client thread (a hot key, and 10,000 keys; medians of
short rounds in which all the cases alternate), p50/p99 latency on the hot key, Redis
commands per decision on a hot key (what the client sends, and what Redis runs with the
commands inside scripts, from INFO commandstats), Redis's own time per decision (INFO
commandstats usec of the commands sent, in rounds in which the contenders alternate),
memory per limited user (MEMORY USAGE
of every key one user's 10 decisions leave, averaged over 200 users), a two-limit case
(tenant + user) for every contender that can express it, and what 8 processes hammering
one key are admitted against what each contender's own algorithm promises.
Prints the tables and draws docs/img/peers-*.png. Takes about two to three minutes here.
``--sliding`` runs only django_gcra (GCRA), its two sliding algorithms and the peers that
run the same ones (``limits``' moving window and sliding-window counter), and draws
nothing: the sliding table in under a minute here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict

from tests.support.servers import start_redis

from .peers.contenders import FACTORIES, LOOSE, SLIDING_PAIRS, STRICT, build, setup_django
from .peers.measure import Timing, commands, interleaved, memory, over_admission, rounds, server_times

KEYS = 10_000
# --sliding: GCRA for reference, the sliding pairs, nothing else.
SLIDING_ONLY = ("django_gcra", *SLIDING_PAIRS, *SLIDING_PAIRS.values())
PACKAGES = ("Django", "djangorestframework", "django-redis", "redis", "hiredis", "django-ratelimit",
            "django-smart-ratelimit", "limits", "throttled-py")


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    def one(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    return f"Python {platform.python_version()}, " + ", ".join(f"{p} {one(p)}" for p in PACKAGES)


def hot(i: int) -> tuple[str, str]:
    return "t0", "hot"


def many(i: int) -> tuple[str, str]:
    return "t0", f"u{i % KEYS}"


def pair(i: int) -> tuple[str, str]:  # 10 tenants, 10,000 users
    return f"t{i % 10}", f"w{i % KEYS}"


def ratio(a: Timing, b: Timing) -> float:
    """Median of the per-round ratios a/b (both ran in the same rounds)."""
    return statistics.median(x / y for x, y in zip(a.rates, b.rates))


def measure(server, args) -> dict:
    url, client = server.url, server.client()
    load = os.getloadavg()[0]
    names = SLIDING_ONLY if args.sliding else tuple(FACTORIES)
    single = {k: build(k, url) for k in names}
    two = {k: c for k in names if (c := build(k, url, two=True)) is not None}
    cases = {(k, "hot"): (c, hot) for k, c in single.items()}
    cases |= {(k, "10k"): (c, many) for k, c in single.items()}
    cases |= {(k, "two"): (c, pair) for k, c in two.items()}
    t0 = time.monotonic()
    timings = rounds(cases, args.ops, args.rounds)
    # The leased policy on cold keys against the unleased one: alternating decision by
    # decision (the rounds above time them apart), on keys the rounds left cold.
    leased_plain = (interleaved(single["django_gcra_leased"], single["django_gcra"], many, args.ops, args.rounds,
                                args.ops * args.rounds) if {"django_gcra", "django_gcra_leased"} <= single.keys() else None)
    cmd1 = {k: commands(client, c, hot, args.cmd_ops) for k, c in single.items()}
    cmd2 = {k: commands(client, c, hot, args.cmd_ops) for k, c in two.items()}
    srv_rounds = max(1, args.rounds // 2)
    srv1 = server_times(client, {k: (c, hot) for k, c in single.items()}, max(1, args.cmd_ops // 5), srv_rounds)
    srv2 = server_times(client, {k: (c, hot) for k, c in two.items()}, max(1, args.cmd_ops // 5), srv_rounds)
    strict = {k: build(k, url, "strict") for k in names}
    mem = {k: memory(client, c, args.mem_users, 10) for k, c in strict.items()}
    adm = over_admission(client, url, server.port, {k: c.algorithm for k, c in single.items()},
                         args.processes, args.seconds)
    gcra1, gcra2 = timings[("django_gcra", "hot")], timings[("django_gcra", "two")]
    if "django_gcra_leased" in cmd1 and cmd1["django_gcra_leased"].round_trips > 0.5:  # no lease from memory
        single["django_gcra_leased"].name += " [lease inactive]"
    return {
        "redis": client.info("server")["redis_version"],
        "versions": versions(), "load": load,
        "config": {**vars(args), "loose": asdict(LOOSE), "strict": asdict(STRICT)},
        "seconds": round(time.monotonic() - t0, 1), "load_end": os.getloadavg()[0],
        "single": [{
            "key": k, "name": c.name, "algorithm": c.algorithm,
            "hot": timings[(k, "hot")].median, "many": timings[(k, "10k")].median,
            "cpu_us": timings[(k, "hot")].cpu_us,
            "p50_us": timings[(k, "hot")].percentile(50), "p99_us": timings[(k, "hot")].percentile(99),
            # per round, for the figures' spread (min to max over the rounds)
            "hot_rounds": timings[(k, "hot")].rates, "many_rounds": timings[(k, "10k")].rates,
            "p50_rounds": timings[(k, "hot")].round_percentiles(50),
            "p99_rounds": timings[(k, "hot")].round_percentiles(99),
            "gcra_over_this": ratio(gcra1, timings[(k, "hot")]),
            "round_trips": cmd1[k].round_trips, "server_commands": cmd1[k].server, "commands": cmd1[k].detail,
            "server_us": statistics.median(srv1[k]), "server_us_rounds": srv1[k],
            "bytes_per_user": mem[k].bytes_per_identity, "keys_per_user": mem[k].keys_per_identity,
            "admitted": adm[k].admitted, "calls": adm[k].calls, "promised": adm[k].promised,
            "admitted_over_promise": adm[k].ratio, "elapsed": adm[k].elapsed,
        } for k, c in single.items()],
        "two": [{
            "key": k, "name": c.name, "rate": timings[(k, "two")].median, "cpu_us": timings[(k, "two")].cpu_us,
            "rate_rounds": timings[(k, "two")].rates,
            "gcra_over_this": ratio(gcra2, timings[(k, "two")]),
            "round_trips": cmd2[k].round_trips, "server_commands": cmd2[k].server, "commands": cmd2[k].detail,
            "server_us": statistics.median(srv2[k]), "server_us_rounds": srv2[k],
        } for k, c in two.items()],
        "sliding": [{
            "ours": ours, "peer": peer, "name": single[ours].name, "peer_name": single[peer].name,
            "one": ratio(timings[(ours, "hot")], timings[(peer, "hot")]),
            "two": ratio(timings[(ours, "two")], timings[(peer, "two")]),
            "server_us": (statistics.median(srv1[ours]), statistics.median(srv1[peer])),
            "server_us_two": (statistics.median(srv2[ours]), statistics.median(srv2[peer])),
            "bytes_per_key": tuple(mem[k].bytes_per_identity / max(mem[k].keys_per_identity, 1) for k in (ours, peer)),
        } for ours, peer in SLIDING_PAIRS.items()],
        # Redis time per decision, django_gcra's over the bare script's (two limits: one
        # script call against the bare script's two): medians of the per-round ratios.
        "server_over_bare": {case: (statistics.median(a / b for a, b in zip(srv["django_gcra"], srv["bare"]))
                                    if "django_gcra" in srv and "bare" in srv else None)
                             for case, srv in (("one", srv1), ("two", srv2))},
        "leased_over_bare_hot": (ratio(timings[("django_gcra_leased", "hot")], timings[("bare", "hot")])
                                 if ("bare", "hot") in timings and ("django_gcra_leased", "hot") in timings else None),
        "leased_over_plain_many": None if leased_plain is None else statistics.median(leased_plain[0]),
        "leased_over_plain_many_rounds": None if leased_plain is None else leased_plain[0],
        "leased_over_plain_many_median_decision": None if leased_plain is None else leased_plain[1],
    }


def report(r: dict) -> None:
    c = r["config"]
    print(f"redis-server {r['redis']} on 127.0.0.1; one client thread; {c['rounds']} rounds x {c['ops']} "
          f"decisions per case, contenders alternating; medians. Limits {LOOSE.count:,}/s "
          f"(GCRA burst {LOOSE.burst:,}), never reached: every decision takes the admit path.\n"
          f"{r['versions']}; load average {r['load']:.1f} on {os.cpu_count()} CPUs at the start")
    print(f"\n{'single limit (user)':<36}{'algorithm':<23}{'hot/s':>7}{'10k/s':>7}{'gcra/x':>7}{'cpu us':>7}"
          f"{'p50 us':>7}{'p99 us':>7}{'srv us':>7}{'trips':>6}{'cmds':>6}{'B/user':>7}{'keys':>5}")
    for s in r["single"]:
        print(f"{s['name']:<36}{s['algorithm']:<23}{s['hot']:>7,.0f}{s['many']:>7,.0f}{s['gcra_over_this']:>7.2f}"
              f"{s['cpu_us']:>7.0f}{s['p50_us']:>7.0f}{s['p99_us']:>7.0f}{s['server_us']:>7.1f}{s['round_trips']:>6.2f}"
              f"{s['server_commands']:>6.2f}{s['bytes_per_user']:>7.0f}{s['keys_per_user']:>5.1f}")
    print("gcra/x: django_gcra's decisions/s over this one's on the hot key (median of per-round ratios); "
          "cpu us: client CPU per decision;\nsrv us: Redis's own time per decision on the hot key (INFO commandstats "
          "usec of the commands sent, a script's inner ones counted once; median of alternating rounds);\n"
          "trips: commands the client sends per decision; cmds: commands Redis runs per decision; B/user, keys: "
          "Redis memory and keys one user's 10 decisions leave.")
    if r["leased_over_bare_hot"] is not None:
        print(f"leased/bare (hot key): {r['leased_over_bare_hot']:.2f}x (target >= 5x)")
    if r.get("leased_over_plain_many") is not None:
        summed = r.get("leased_over_plain_many_rounds") or [r["leased_over_plain_many"]]
        medians = r.get("leased_over_plain_many_median_decision") or summed
        print(f"leased/plain (10,000 keys, none hot; alternating decision by decision; median [min-max] of the rounds): "
              f"{statistics.median(summed):.3f}x [{min(summed):.3f}-{max(summed):.3f}] decisions/s, median decision "
              f"{statistics.median(medians):.3f}x [{min(medians):.3f}-{max(medians):.3f}] (target >= 1.0x)")
    if any("[lease inactive]" in s["name"] for s in r["single"]):
        print("  [lease inactive]: the leased policy still sent one command per decision, so this build of "
              "django_gcra does not serve leases from memory; its leased figures are plain decide() figures.")
    print(f"\n{'two limits (tenant + user)':<36}{'decisions/s':>12}{'gcra/x':>8}{'cpu us':>7}{'srv us':>7}{'trips':>6}"
          f"{'cmds':>6}")
    for t in r["two"]:
        print(f"{t['name']:<36}{t['rate']:>12,.0f}{t['gcra_over_this']:>8.2f}{t['cpu_us']:>7.0f}{t['server_us']:>7.1f}"
              f"{t['round_trips']:>6.2f}{t['server_commands']:>6.2f}")
    peers = [t for t in r["two"] if not t["key"].startswith(("django_gcra", "bare"))]
    worst = min(peers, key=lambda t: t["gcra_over_this"])
    print(f"django_gcra composite / slowest-to-beat peer ({worst['name']}): "
          f"{worst['gcra_over_this']:.2f}x (target >= 1.8x)")
    over = r.get("server_over_bare") or {}
    if over.get("one") is not None and over.get("two") is not None:
        print(f"Redis time per decision, django_gcra / bare script (median of per-round ratios): one limit "
              f"{over['one']:.2f}x, two limits {over['two']:.2f}x (one script call against two; target <= 1.1x)")
    print("\nsliding algorithms against limits' same algorithm (decisions/s ratio, median of per-round ratios; "
          "server us: Redis time per decision; B/key after 10 decisions):")
    print(f"{'ours':<32}{'peer':<26}{'one':>6}{'two':>6}{'srv us 1':>14}{'srv us 2':>14}{'B/key':>13}")
    for p in r["sliding"]:
        print(f"{p['name']:<32}{p['peer_name']:<26}{p['one']:>6.2f}{p['two']:>6.2f}"
              f"{p['server_us'][0]:>7.1f}/{p['server_us'][1]:<6.1f}{p['server_us_two'][0]:>7.1f}/"
              f"{p['server_us_two'][1]:<6.1f}{p['bytes_per_key'][0]:>6.0f}/{p['bytes_per_key'][1]:<6.0f}")
    print("  one: single limit (target >= 1.0x); two: tenant + user, one script call against two (target >= 1.8x); "
          "srv us and B/key: ours/peer")
    print(f"\n{c['processes']} processes on one key for {c['seconds']:.0f} s, limit {STRICT.count}/s "
          f"(GCRA burst {STRICT.burst}); promised = the most the contender's own algorithm admits in the run:\n"
          "GCRA burst + seconds x rate; fixed window: limit x clock seconds touched; sliding log and "
          "sliding window counter: limit x (whole seconds + 1)")
    print(f"{'contender':<36}{'algorithm':<23}{'seconds':>8}{'calls':>8}{'admitted':>9}{'promised':>9}{'ratio':>7}")
    for s in r["single"]:
        print(f"{s['name']:<36}{s['algorithm']:<23}{s['elapsed']:>8.2f}{s['calls']:>8,}{s['admitted']:>9,}"
              f"{s['promised']:>9.0f}{s['admitted_over_promise']:>7.2f}")
    print("\ncommands per decision on a hot key (sent by the client | run inside scripts):")
    for s in r["single"]:
        print(f"  {s['name']:<36}{s['commands']}")
    for t in r["two"]:
        print(f"  {t['name'] + ' (two)':<36}{t['commands']}")
    print(f"\nmeasured in {r['seconds']:.0f} s; load average {r['load_end']:.1f} at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=300, help="decisions per round and case")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=3.0, help="over-admission run per contender")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--cmd-ops", type=int, default=500, help="decisions counted for commands per decision; a fifth of them per round for Redis time")
    parser.add_argument("--mem-users", type=int, default=200, help="users averaged for memory per user")
    parser.add_argument("--img", default="docs/img", help="where to draw the plots ('' for none)")
    parser.add_argument("--json", default="benchmarks/results/peers.json",
                        help="also write the results to this file ('' for none); the figures are drawn from it")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: redraw the figures from the results stored in --json")
    parser.add_argument("--sliding", action="store_true",
                        help="only GCRA, the sliding algorithms and limits' same ones; draws and stores nothing")
    args = parser.parse_args()
    if args.plot_only:
        from .peers.plots import draw

        with open(args.json) as stored:
            for path in draw(json.load(stored), args.img):
                print("drew", path)
        return
    if args.sliding:
        args.img = args.json = ""  # the figures, and the results they are drawn from, show every contender

    server = start_redis()
    try:
        setup_django(server.url, server.port)
        results = measure(server, args)
    finally:
        server.stop()
    report(results)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    if args.img:
        from .peers.plots import draw

        for path in draw(results, args.img):
            print("drew", path)


if __name__ == "__main__":
    main()
