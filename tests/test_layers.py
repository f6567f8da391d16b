"""The house rules of CONTRIBUTING.md that no linter checks: small modules, no import cycle,
and a core that loads no I/O library. (The layer order itself is import-linter's contract in
pyproject.toml, run by ``python3 dev.py test``.)"""

from __future__ import annotations

import json
import subprocess
import sys

import grimp
import pytest
from factories import ROOT

MAX_LINES = 600
IO_LIBRARIES = ("anyio", "httpx", "watchdog", "sqlite3", "h11", "trio")


def _modules() -> list[str]:
    return sorted(
        str(p.relative_to(ROOT))
        for folder in ("litmus_sandbox", "adapters")
        for p in (ROOT / folder).rglob("*.py")
    )


@pytest.mark.parametrize("path", _modules())
def test_no_module_is_over_600_lines(path: str) -> None:
    lines = (ROOT / path).read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{path} has {lines} lines; split it by responsibility"


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = [t for t in edges[node] if t in edges]
            if i < len(targets):
                work.append((node, i + 1))
                target = targets[i]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_cycles_finds_a_circle() -> None:
    """The cycle finder itself: a → b → c → a is one component; d → a is not in it."""
    graph = grimp.ImportGraph()
    for name in "abcd":
        graph.add_module(name)
    for importer, imported in (("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")):
        graph.add_import(importer=importer, imported=imported)
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", ["litmus_sandbox", "adapters"])
def test_no_import_cycle(package: str) -> None:
    """No circle of imports, not even through ``TYPE_CHECKING`` or a function-level import."""
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph(package)
    finally:
        sys.path.remove(str(ROOT))
    assert _cycles(graph) == []


PROBE = """
import json, sys
import litmus_sandbox
loaded_by_import = sorted(m for m in sys.modules if m.startswith("litmus_sandbox."))
from litmus_sandbox import (
    Episode, Verdict, LegacyVerdict, ToolCallStep, ScoringPolicy, RefusalDetector,
    gate, compare_case, coverage, diff_episodes, check_episodes, differing_paths,
    read_episodes, iter_episodes, read_verdicts, write_verdicts, JsonlWriter, VerdictStream,
)
print(json.dumps({"by_import": loaded_by_import,
                  "io": [m for m in IO_LIBRARIES if m in sys.modules]}))
""".replace("IO_LIBRARIES", repr(IO_LIBRARIES))


def test_the_core_loads_no_io_library() -> None:
    """``import litmus_sandbox`` loads nothing; the model, core and store names load no I/O."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    report = json.loads(out)
    assert report == {"by_import": [], "io": []}


def test_a_runtime_name_still_loads_on_demand() -> None:
    """The lazy re-exports resolve to the real objects (the probe above is no empty shell)."""
    code = "import sys, litmus_sandbox; litmus_sandbox.Sandbox; print('anyio' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "True"
