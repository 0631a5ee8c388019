"""The packages' layers point one way, module by module:

    tui → engine (loadgen's run loop, workers, drivers) → stacks (compose) / collectors → core
    analysis → core

The core (loadgen/core: errors, targets, ticks and events, histograms, workloads, interventions,
settings, and the platform contract: the Platform record and the Driver, Stack and Collector
bases) imports nothing but itself. Stacks and collectors import only the core, never each
other. Only tui imports Textual; only the report modules of analysis import pyspark or
matplotlib. Every import counts, including those inside functions. No two modules import each
other, directly or round a longer circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tui", "loadgen", "collectors", "analysis", "compose")
# the layers each layer may import (a layer may always import itself)
ALLOWED = {
    "core": {"core"},
    "stacks": {"core"},
    "collectors": {"core"},
    "engine": {"core", "stacks", "collectors"},
    "analysis": {"core"},
    "tui": {"core", "stacks", "collectors", "engine", "analysis"},
}
REPORT_MODULES = {"analysis.report", "analysis.compute", "analysis.runs", "analysis.session",
                  "analysis.charts", "analysis.warmup"}


def layer(module: str) -> str:
    if module == "loadgen.core" or module.startswith("loadgen.core."):
        return "core"
    top = module.split(".")[0]
    return {"loadgen": "engine", "compose": "stacks"}.get(top, top)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module an import statement in the file names, at any depth of the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from package import module` names a module too
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def project_modules() -> dict[str, set[str]]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[module_name(path)] = imports(path)
    return modules


MODULES = project_modules()


def own(name: str) -> str | None:
    """The project module an imported name refers to (the longest known prefix), or None."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        candidate = ".".join(parts[:k])
        if candidate in MODULES:
            return candidate
    return None


def test_the_walk_finds_every_package() -> None:
    assert {m.split(".")[0] for m in MODULES} == set(PACKAGES)
    assert {layer(m) for m in MODULES} == set(ALLOWED)
    assert {m for m in MODULES if layer(m) == "core"} >= {
        "loadgen.core", "loadgen.core.errors", "loadgen.core.ticks", "loadgen.core.events",
        "loadgen.core.platform", "loadgen.core.driver", "loadgen.core.stack",
        "loadgen.core.collector"}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    mine = layer(module)
    wrong = sorted({f"{target} ({layer(target)})" for name in MODULES[module]
                   if (target := own(name)) is not None
                   and layer(target) != mine and layer(target) not in ALLOWED[mine]})
    assert not wrong, f"{module} ({mine}) imports {', '.join(wrong)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_heavy_and_ui_libraries_stay_in_their_layer(module: str) -> None:
    tops = {name.split(".")[0] for name in MODULES[module]}
    if not module.startswith("tui"):
        assert "textual" not in tops, f"{module} imports Textual"
    if module not in REPORT_MODULES:
        heavy = tops & {"pyspark", "py4j", "matplotlib"}
        assert not heavy, f"{module} imports {', '.join(sorted(heavy))}"


def test_the_checker_catches_an_upward_import(tmp_path: Path) -> None:
    """The check is not vacuous: an engine module importing the sink is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from analysis.sink import ParquetSink\n", encoding="utf-8")
    names = imports(probe)
    assert "analysis.sink" in names
    assert layer(own("analysis.sink") or "") == "analysis"
    assert "analysis" not in ALLOWED[layer("loadgen.run")]


def test_a_live_run_does_not_import_the_report_libraries() -> None:
    """What `streambench run` imports to show its dashboard (the CLI, the app, the run loop)
    leaves pyspark and matplotlib out, about 0.3 s of CPU at each start: only a run with
    --report loads them, in the background. Imported in a fresh interpreter, as a run is."""
    probe = ("import sys, tui.cli, tui.app, loadgen.run\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'matplotlib'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other round a circle (strongly connected
    components of more than one module, or a module importing itself), Tarjan's algorithm
    without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in graph.get(node, ()):
                    found.append(sorted(group))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports (a package's own __init__ left out: importing
    `pkg.mod` runs `pkg` first, which is not a circle of the code's making)."""
    return {module: {target for name in names
                     if (target := own(name)) is not None and target != module
                     and not module.startswith(target + ".")}
            for module, names in MODULES.items()}


def test_no_modules_import_each_other_round_a_circle() -> None:
    assert circles(import_graph()) == []


def test_the_circle_check_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert circles(graph) == [["a", "b", "c"], ["e"]]
    assert circles({"x": {"y"}, "y": set()}) == []


def test_no_private_name_is_imported_from_another_module() -> None:
    wrong = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                        and node.module.split(".")[0] in PACKAGES):
                    wrong += [f"{module_name(path)}: {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert not wrong
