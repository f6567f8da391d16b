"""Every module of the installed package imports in every profile, or names its extra.

Runs in each profile's clean venv (``profiles.py``): the base install and one venv per
extra. A module that cannot import must be one that an extra this profile lacks brings,
and the command that uses it must say so in one line, with exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from installed.profiles import source_files
from installed.runner import Profile
from litmus_sandbox._model.errors import EXTRA_OF_MODULE

#: A cold profile venv is made inside the first test that needs it (dev.py makes them
#: before pytest, so a warm run never waits here).
pytestmark = pytest.mark.timeout(900)


#: A script run by the profile's own Python: import every module, report what failed.
IMPORT_ALL = r"""
import importlib, json, pkgutil, sys
import litmus_sandbox

out = {"modules": [], "failed": {}}
for info in pkgutil.walk_packages(litmus_sandbox.__path__, "litmus_sandbox.", onerror=lambda name: None):
    out["modules"].append(info.name)
    if info.name.endswith(".__main__"):
        continue  # runs the command line when imported
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        out["failed"][info.name] = exc.name
out["modules"].append("litmus_sandbox")
out["file"] = litmus_sandbox.__file__
print(json.dumps(out))
"""

#: A command that needs each extra, and its arguments (any files: the extra is looked
#: for before they are read).
NEEDS_EXTRA = {
    "inspect": ["import", "inspect", "no.eval", "-o", "out.jsonl"],
    "otel": ["export", "otel", "no.jsonl", "-o", "out.otlp.jsonl"],
    "agentdojo": ["run", "agentdojo", "--suite", "banking", "-o", "out.jsonl"],
    "cloud": ["show", "s3://bucket/runs/"],
    "ray": ["score", "no.jsonl", "--policy", "p.toml", "-o", "out.jsonl", "--engine", "ray"],
}


def _module_of(wheel_path: str) -> str:
    name = wheel_path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


@pytest.mark.parametrize("name", ["base", "mcp", "inspect", "otel", "agentdojo", "redis", "cloud"])
def test_every_module_ships_and_imports_or_names_its_extra(
    installed: Callable[[str], Profile], name: str
) -> None:
    profile = installed(name)
    done = profile.run("-c", IMPORT_ALL, program="python", timeout=300)
    found = json.loads(done.stdout)
    assert "site-packages" in found["file"], found["file"]  # not the source tree
    expected = {_module_of(p) for p in source_files() if p.endswith(".py")}
    assert sorted(found["modules"]) == sorted(expected)
    own_extra = profile.name if profile.name != "base" else ""
    for module, missing in found["failed"].items():
        extra = EXTRA_OF_MODULE.get(missing.partition(".")[0])
        assert extra is not None, f"{module}: {missing} is missing (no extra brings it)"
        assert extra != own_extra, f"{module}: {missing} is missing with [{own_extra}]"
    if own_extra:
        mine = f"litmus_sandbox.adapters.{own_extra}."
        assert not [m for m in found["failed"] if m.startswith(mine)]


@pytest.mark.parametrize("extra", sorted(NEEDS_EXTRA))
def test_a_missing_extra_is_one_line_and_exit_2(
    installed: Callable[[str], Profile], extra: str
) -> None:
    done = installed("base").run(*NEEDS_EXTRA[extra], expect=2)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"pip install 'litmus-sandbox[{extra}]'" in lines[0]
    assert done.stdout == ""


def test_a_missing_optional_loop_is_one_line(installed: Callable[[str], Profile]) -> None:
    done = installed("base").run("proxy", "mcp", "--loop", "uvloop", "--", "true", expect=2)
    assert done.stderr.count("\n") == 1
    assert "pip install 'litmus-sandbox[mcp]'" in done.stderr
