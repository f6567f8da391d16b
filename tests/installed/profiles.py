"""The built wheel and the clean virtual environments the installed-package tests run in.

Theory of operation. A *profile* is what a user installs: the base package, or the base
package with one extra (``mcp``, ``inspect``, ``otel``, ``agentdojo``, ``redis``,
``cloud``). Each profile gets its own venv under ``build/installed/``, made from the built
wheel, never editable and without the test extras. Two keys keep a warm run quick:

- the wheel is keyed by a hash of the source tree (every file ``setup.py`` ships, the
  build files and the README): it is rebuilt only when one of them changed;
- a profile's venv is keyed by its dependency set (the base dependencies and that
  extra's), so dependencies are installed once; a new wheel is put in with
  ``pip install --no-deps --force-reinstall`` and recorded in the venv's stamp.

``python3 dev.py test`` runs this file before pytest (installing needs the package
registry; the tests themselves run offline); the tests' fixture calls :func:`ensure` too,
so ``pytest tests/installed`` alone is right after an edit. A lock file serialises
builders (pytest-xdist workers, a test reading the wheel). Standard library only: ``dev.py`` runs it before any
venv holds the project.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "installed"
#: Each profile and the extra it installs ("" for the base package alone).
PROFILES = {
    "base": "",
    "mcp": "mcp",
    "inspect": "inspect",
    "otel": "otel",
    "agentdojo": "agentdojo",
    "redis": "redis",
    "cloud": "cloud",
}
#: Where each source folder lands in the wheel.
SHIPPED = {"litmus_sandbox": "litmus_sandbox", "adapters": "litmus_sandbox/adapters"}
_BUILD_FILES = ("pyproject.toml", "setup.py", "README.md", "LICENSE")
_QUIET = ("-q", "--disable-pip-version-check")


def source_digest() -> str:
    """A hash of everything the wheel is built from."""
    h = hashlib.sha256()
    files = [ROOT / name for name in _BUILD_FILES]
    for top in SHIPPED:
        files += sorted(p for p in (ROOT / top).rglob("*") if _shipped(p) and p.is_file())
    for path in files:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _shipped(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix != ".pyc"


def source_files() -> set[str]:
    """Every file of the source tree, as its path inside the wheel."""
    out: set[str] = set()
    for folder, target in SHIPPED.items():
        for path in (ROOT / folder).rglob("*"):
            if _shipped(path) and path.is_file():
                out.add(f"{target}/{path.relative_to(ROOT / folder).as_posix()}")
    return out


def dependency_digest(extra: str) -> str:
    """A hash of the dependency set of a profile: the base list and its extra's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {
        "python": sys.version.split()[0],
        "base": project["dependencies"],
        "extra": project.get("optional-dependencies", {}).get(extra, []) if extra else [],
    }
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


@contextmanager
def _locked() -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(*cmd: str | Path, cwd: Path = ROOT) -> None:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        shown = " ".join(str(c) for c in cmd)
        raise RuntimeError(f"{shown}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")


def build_wheel(out: Path, source: Path = ROOT) -> Path:
    """Build a wheel of ``source`` (a tree or an unpacked sdist) into ``out``; its path."""
    out.mkdir(parents=True, exist_ok=True)
    # setuptools copies the sources into build/lib and never removes what was deleted
    # since: a module gone from the tree would still ship.
    for stale in (source / "build" / "lib", *(source / "build").glob("bdist.*")):
        shutil.rmtree(stale, ignore_errors=True)
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        *_QUIET,
        "--no-deps",
        "--no-build-isolation",
        "-w",
        out,
        source,
    )
    (wheel,) = out.glob("litmus_sandbox-*.whl")
    return wheel


def wheel() -> Path:
    """The wheel of the current tree, built once per source digest."""
    with _locked():
        return _wheel()


def _wheel() -> Path:
    folder = CACHE / "wheels" / source_digest()
    found = list(folder.glob("litmus_sandbox-*.whl"))
    if found:
        return found[0]
    if folder.parent.exists():
        shutil.rmtree(folder.parent)  # older trees' wheels
    scratch = CACHE / "wheel-build"
    shutil.rmtree(scratch, ignore_errors=True)
    built = build_wheel(scratch)
    folder.mkdir(parents=True)
    return Path(shutil.move(built, folder / built.name))


def venv_bin(profile: str) -> Path:
    """The ``bin`` folder of ``profile``'s venv (which :func:`ensure` makes)."""
    return CACHE / "venvs" / f"{profile}-{dependency_digest(PROFILES[profile])}" / "bin"


def ensure(profile: str) -> Path:
    """Make ``profile``'s venv hold the current wheel; its ``bin`` folder."""
    extra = PROFILES[profile]
    with _locked():
        built = _wheel()
        bin_dir = venv_bin(profile)
        home = bin_dir.parent
        stamp = home / ".litmus-wheel"
        # The wheel's folder is named by the source digest: the stamp names that wheel.
        wanted = f"{built.parent.name}/{built.name}"
        if stamp.exists() and stamp.read_text() == wanted:
            return bin_dir
        if not stamp.exists():
            for old in home.parent.glob(f"{profile}-*"):
                shutil.rmtree(old)  # another dependency set's venv
            venv.EnvBuilder(with_pip=True).create(home)
            target = f"{built}[{extra}]" if extra else str(built)
            _run(bin_dir / "python", "-m", "pip", "install", *_QUIET, target)
        else:
            _run(
                bin_dir / "python",
                "-m",
                "pip",
                "install",
                *_QUIET,
                "--no-deps",
                "--force-reinstall",
                built,
            )
        stamp.write_text(wanted)
        return bin_dir


def main(argv: list[str]) -> int:
    for profile in argv or list(PROFILES):
        print(f"installed profile {profile}: {ensure(profile).parent}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
