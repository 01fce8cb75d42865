"""The package's layering (docs/contributing.md): the import-linter contracts in
pyproject.toml hold (type-only imports included), and no module imports another that
imports it back, at module level, inside a function or only for type checking."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("import-linter is not installed (requirements-dev.txt)")
    result = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def _cycle(graph: grimp.ImportGraph, modules: set[str]) -> list[str] | None:
    """One import cycle among ``modules`` (a depth-first search), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module) & modules):
            if state.get(imported) == 1:
                return path[path.index(imported):] + [imported]
            if imported not in state:
                found = visit(imported)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(modules):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_no_import_cycles():
    graph = grimp.build_graph("django_gcra", exclude_type_checking_imports=False)
    # A package's __init__ re-exports its submodules: an edge from a submodule to its own
    # package is not a cycle of behaviour.
    modules = {m for m in graph.modules if not graph.find_children(m) or m == "django_gcra"}
    modules.discard("django_gcra")
    assert _cycle(graph, modules) is None, " -> ".join(_cycle(graph, modules) or [])


def test_the_cycle_finder_finds_one():
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    assert _cycle(graph, {"p.a", "p.b", "p.c"}) is None
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycle(graph, {"p.a", "p.b", "p.c"}) == ["p.a", "p.b", "p.c", "p.a"]


def test_the_regions_modules_never_import_their_package():
    """``django_gcra.regions`` re-exports its modules' names; a module of it importing the
    package would be a cycle ``test_no_import_cycles`` leaves out (it skips packages), so
    they import each other only (their order: the contract in pyproject.toml)."""
    graph = grimp.build_graph("django_gcra", exclude_type_checking_imports=False)
    modules = graph.find_descendants("django_gcra.regions")
    assert {"django_gcra.regions.shares", "django_gcra.regions.sync", "django_gcra.regions.rebalancer",
            "django_gcra.regions.status"} <= modules
    importers = sorted(m for m in modules if "django_gcra.regions" in graph.find_modules_directly_imported_by(m))
    assert importers == []
