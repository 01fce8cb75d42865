"""Instructions per decision, counted by valgrind: the one measure of the hot paths that a
shared, noisy machine does not move.

    .venv/bin/python benchmarks/bench_instructions.py [--decisions 10000] [--paths leased-local,plain]

For each path the script runs itself twice under ``valgrind --tool=cachegrind`` (no cache
simulation: instructions only) in one fresh process each, against a loopback
redis-server it starts: once warming up only, once warming up and then deciding
``--decisions`` times; the difference over the decisions is the path's instructions per
decision in this process (the client side: the server's work is not counted, nor
the time spent waiting for it). ``PYTHONHASHSEED`` is fixed so that both runs lay out
their dicts alike. Paths:

- ``leased-local``: a hot key whose lease never runs out (900 units a lease, 300 s ttl,
  far under the limit): every decision local, no refill, no prefetch;
- ``leased-50``: the hot key at lease 50, low-water 10 (a refill every 50 decisions:
  in this one busy thread mostly taken over by the request, else on the prefetch's
  thread, counted either way);
- ``plain``: the same hot key without a lease: one script call per decision;
- ``plain-cold`` and ``leased-cold``: 10,000 keys round robin, unleased and at lease 50
  (no key proves hot: one store call each);
- ``plain-full`` and ``leased-full``: the same with the plan memo full (no plan memoized:
  a leased key's heat is counted in its wrapper's dict);
- ``bare``: the seed's script, one EVALSHA per decision through redis-py.

Exits with a message (status 0) when valgrind is not installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = ("leased-local", "leased-50", "plain", "plain-cold", "leased-cold", "plain-full", "leased-full", "bare")
WARM = 3000
COLD_KEYS = 10_000


def worker(path: str, decisions: int) -> None:
    """Decide ``WARM`` times and then ``decisions`` times on ``path`` (run under valgrind)."""
    sys.path.insert(0, ROOT)
    from benchmarks.bench_core import BARE_SCRIPT
    from benchmarks.bench_leases import policies
    from tests.support.servers import start_redis
    from tests.support.workers import setup_django

    server = start_redis()
    try:
        gcra = policies()
        gcra["local"] = {"limits": [{"name": "k", "key": ["ip"], "rate": "1000000/s", "burst": 100_000}],
                         "lease": {"size": 900, "ttl": 300.0, "low_water": 0}}
        setup_django(server.url, {"POLICIES": gcra})
        from django_gcra import decide

        if path == "bare":
            script = server.client().register_script(BARE_SCRIPT)
            for _ in range(WARM + decisions):
                script(keys=["bare:{hot}"], args=[1, 1000, 1])
            return
        policy = {"leased-local": "local", "leased-50": "under-L50-pre", "plain": "under-plain",
                  "plain-cold": "under-plain", "leased-cold": "under-L50", "plain-full": "under-plain",
                  "leased-full": "under-L50"}[path]
        if path.endswith("full"):
            from django_gcra.engine import current

            current().planner.memo.size = 0  # full: nothing new is memoized
        if path.endswith(("cold", "full")):
            for i in range(WARM):
                decide(policy, {"ip": f"warm{i}"})
            for i in range(decisions):
                decide(policy, {"ip": f"cold{i % COLD_KEYS}"})
            return
        descriptors = {"ip": "hot"}
        for _ in range(WARM + decisions):
            decide(policy, descriptors)
    finally:
        server.stop()


def instructions(path: str, decisions: int) -> int:
    """Instructions (valgrind's ``I refs``) of one worker process."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    run = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                          sys.executable, os.path.abspath(__file__), "--worker", path, str(decisions)],
                         capture_output=True, text=True, env=env, timeout=1800, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind:\n{run.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated: " + ", ".join(PATHS))
    parser.add_argument("--worker", nargs=2, metavar=("PATH", "DECISIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]))
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing measured (apt-get install valgrind)")
        return
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        parser.error(f"unknown paths: {', '.join(sorted(unknown))}")
    print(f"instructions per decision (client side, valgrind), {args.decisions} decisions after {WARM} warm-up ones")
    for path in paths:
        per = (instructions(path, args.decisions) - instructions(path, 0)) / args.decisions
        print(f"  {path:<13} {per:>9,.0f}")


if __name__ == "__main__":
    main()
