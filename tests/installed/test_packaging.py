"""The wheel holds the source tree, the sdist builds the same wheel, every import is declared.

Hand-listed packages dropped the MCP relay core from the wheel once, and an import that
only the test extras brought (``sniffio``, through trio) broke every MCP path on a clean
install: both pass in the editable dev venv, so these checks read the built artefacts
and the source itself.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from installed import profiles

#: A cold profile venv is made inside the first test that needs it (dev.py makes them
#: before pytest, so a warm run never waits here).
pytestmark = pytest.mark.timeout(900)

ROOT = profiles.ROOT


def wheel_members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {name: z.read(name) for name in z.namelist()}


def test_the_wheel_holds_every_module_and_data_file() -> None:
    members = wheel_members(profiles.wheel())
    package_files = {n for n in members if ".dist-info/" not in n}
    assert package_files == profiles.source_files()
    assert "litmus_sandbox/py.typed" in package_files
    assert "litmus_sandbox/adapters/mcp/_relay/_core.py" in package_files
    assert not any(n.startswith("adapters/") for n in members), "a bare top-level adapters"
    entry_points = next(v for n, v in members.items() if n.endswith("entry_points.txt"))
    assert b"litmus-sandbox = litmus_sandbox._cli.main:main" in entry_points
    assert b"litmus_sandbox = litmus_sandbox.adapters.inspect._registry" in entry_points


def test_the_sdist_builds_the_same_wheel(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", tmp_path, ROOT],
        check=True,
        capture_output=True,
    )
    (sdist,) = tmp_path.glob("litmus_sandbox-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (tree,) = (tmp_path / "unpacked").iterdir()
    from_sdist = wheel_members(profiles.build_wheel(tmp_path / "wheel", tree))
    from_tree = wheel_members(profiles.wheel())
    assert sorted(from_sdist) == sorted(from_tree)
    changed = [name for name in from_tree if from_tree[name] != from_sdist[name]]
    assert changed == []


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    names = set()
    for req in requirements:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
        assert match, req
        names.add(_canonical(match.group(0)))
    return names


def _imports(path: Path) -> set[str]:
    """The top-level names of the absolute imports in ``path`` that run, wherever they
    stand (those under ``if TYPE_CHECKING:`` are for the type checker only)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for node in ast.walk(stmt)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


#: The package's own modules that only an extra makes importable (opened on demand).
_EXTRA_OF_FILE = {
    "litmus_sandbox/_store/redis_cache.py": "redis",
    "litmus_sandbox/_store/remote.py": "cloud",
    "litmus_sandbox/_runtime/ray_engine.py": "ray",
    "litmus_sandbox/_runtime/output_schema.py": "mcp",
}


def test_every_third_party_import_is_declared() -> None:
    """Each import is the standard library's, the package's own, or a distribution that
    the base dependencies or the extra of the adapter (or store) importing it declare by
    name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    base = _requirement_names(project["dependencies"])
    providers = importlib.metadata.packages_distributions()
    undeclared = []
    for folder in profiles.SHIPPED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            extra = rel.parts[1] if rel.parts[0] == "adapters" and len(rel.parts) > 2 else ""
            extra = _EXTRA_OF_FILE.get(rel.as_posix(), extra)
            allowed = base | (_requirement_names(extras[extra]) if extra in extras else set())
            for name in sorted(_imports(path)):
                if name in sys.stdlib_module_names or name in ("litmus_sandbox", "__future__"):
                    continue
                dists = {_canonical(d) for d in providers.get(name, [])}
                if not dists & allowed:
                    undeclared.append(f"{rel}: {name} (from {sorted(dists) or 'nothing'})")
    assert undeclared == []
