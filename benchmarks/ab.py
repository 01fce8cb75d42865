"""Run one benchmark against two git revisions, alternating them in the same run.

    .venv/bin/python benchmarks/ab.py --old <rev> --new <rev> [--repeat 3] [--same-bench] -- <benchmark> [args...]

Each revision is checked out in a detached git worktree under a temporary directory;
the benchmark runs with that worktree as its working directory and ``PYTHONPATH``, by
this interpreter (the current venv's python), so it imports that revision's
``django_gcra`` (checked first: ``django_gcra.__file__`` must lie inside the worktree).
The runs alternate old, new, old, new... ``--repeat`` times each; each run's stdout (and
stderr) is saved in the results directory, and each repeat's two outputs are printed
side by side (one after the other when too wide). The worktrees are removed at the end.
Only committed revisions are measured: uncommitted changes are not in any worktree.

``<benchmark>`` is a path such as ``benchmarks/bench_core.py`` (run as ``python -m
benchmarks.bench_core``, which the modules with relative imports need) or anything
``python`` takes (``-m module``, ``-c``). ``--same-bench`` copies the new revision's
``benchmarks/`` and ``tests/support/`` over the old worktree's, so both builds run the
same benchmark code (and the old one can run a benchmark it does not have yet).

The four benchmarks issue 39 asks for, with short flags:

    benchmarks/ab.py --old main --new HEAD -- benchmarks/bench_core.py --ops 1000 --rounds 3
    benchmarks/ab.py --old main --new HEAD -- benchmarks/bench_leases.py --seconds 0.2 --rounds 3 --max-decisions 20000
    benchmarks/ab.py --old main --new HEAD -- benchmarks/bench_async.py --seconds 0.2 --rounds 3
    benchmarks/ab.py --old main --new HEAD -- benchmarks/bench_peers.py --ops 100 --rounds 5 --seconds 1 --img '' --json ''

(bench_peers has no ``--quick``; the flags above are its short run, and it needs
benchmarks/requirements.txt in the venv: scripts/bench-peers.sh installs them). The seed
comparison: ``--same-bench -- benchmarks/bench_seed_lease.py --rounds 5 --decisions 5000``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile

WIDE = 110  # the widest left column printed beside the right one
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", REPO, *args], check=True, capture_output=True, text=True).stdout.strip()


def command(argv: list[str]) -> list[str]:
    first = argv[0]
    if first.endswith(".py") and first.startswith("benchmarks/") and "/" not in first[len("benchmarks/"):]:
        return [sys.executable, "-m", "benchmarks." + first[len("benchmarks/"):-3], *argv[1:]]
    return [sys.executable, *argv]


def check_import(tree: str, env: dict) -> None:
    out = subprocess.run([sys.executable, "-c", "import django_gcra; print(django_gcra.__file__)"], cwd=tree, env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    if not os.path.realpath(out).startswith(os.path.realpath(tree) + os.sep):
        sys.exit(f"ab.py: django_gcra imports from {out}, not from the worktree {tree}")


def run_one(cmd: list[str], tree: str, env: dict, timeout: float) -> tuple[str, str, str]:
    """Run the benchmark in its own process group, so a timeout also stops the redis-server it started."""
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return out, err, f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return out, err, "timed out"


def side_by_side(left: str, right: str, titles: tuple[str, str]) -> str:
    a, b = [titles[0], *left.splitlines()], [titles[1], *right.splitlines()]
    width = max(map(len, a))
    if width > WIDE:  # too wide for two columns: one after the other
        return "\n".join(a + [""] + b)
    a += [""] * (len(b) - len(a))
    b += [""] * (len(a) - len(b))
    return "\n".join(f"{x:<{width}} | {y}" for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, help="the old revision (anything git rev-parse takes)")
    parser.add_argument("--new", required=True, help="the new revision")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each revision, alternating")
    parser.add_argument("--results", help="where to save the outputs (default: a new temporary directory)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds, per run")
    parser.add_argument("--same-bench", action="store_true",
                        help="run the new revision's benchmarks/ and tests/support/ on both builds")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- then the benchmark and its arguments")
    args = parser.parse_args()
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        parser.error("no benchmark given (after --)")
    results = args.results or tempfile.mkdtemp(prefix="gcra-ab-results-")
    os.makedirs(results, exist_ok=True)
    base = tempfile.mkdtemp(prefix="gcra-ab-")
    trees: dict[str, str] = {}
    try:
        for label, rev in (("old", args.old), ("new", args.new)):
            sha = git("rev-parse", "--verify", rev + "^{commit}")
            trees[label] = os.path.join(base, label)
            git("worktree", "add", "--detach", trees[label], sha)
            print(f"{label}: {rev} = {sha[:12]}")
        if args.same_bench:
            for sub in ("benchmarks", os.path.join("tests", "support")):
                shutil.copytree(os.path.join(trees["new"], sub), os.path.join(trees["old"], sub), dirs_exist_ok=True)
        envs = {label: {**os.environ, "PYTHONPATH": tree} for label, tree in trees.items()}
        for label, tree in trees.items():
            check_import(tree, envs[label])
        cmd = command(bench)
        print("command:", " ".join(cmd), f"\nresults: {results}\n")
        for i in range(1, args.repeat + 1):
            outputs = {}
            for label, tree in trees.items():  # old, then new
                out, err, status = run_one(cmd, tree, envs[label], args.timeout)
                for ext, text in (("txt", out), ("err", err)):
                    with open(os.path.join(results, f"{i}-{label}.{ext}"), "w") as f:
                        f.write(text)
                outputs[label] = (out + ("" if status == "exit 0" else f"[{status}; stderr in {i}-{label}.err]"))
            print(f"=== repeat {i}/{args.repeat}")
            print(side_by_side(outputs["old"], outputs["new"], (f"old ({args.old})", f"new ({args.new})")), "\n")
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], capture_output=True)
        git("worktree", "prune")
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
