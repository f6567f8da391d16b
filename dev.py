#!/usr/bin/env python3
"""Set up a local virtual environment and run the project's jobs.

    python3 dev.py demo       run the built-in demo end to end (litmus-sandbox demo)
    python3 dev.py incident   reproduce the incident's figures on a synthetic suite
    python3 dev.py test       lint (ruff), type-check (mypy --strict), check the layers
                              (import-linter), build the docs (mkdocs --strict: a broken
                              link fails), build the wheel and its clean venvs (one per
                              extra, tests/installed/profiles.py) and run the tests on
                              every core (pytest-xdist; extra arguments go to pytest)

Only Python 3.11+ is needed: the first run creates ``.venv`` beside this file and
installs the project into it (editable, with its test and dev extras). The command is
then ``.venv/bin/litmus-sandbox`` (or ``source .venv/bin/activate``); ``pip install .``
from the clone installs it anywhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".litmus-installed"


def _run(*cmd: str | Path) -> int:
    return subprocess.call([str(c) for c in cmd], cwd=ROOT)


def _ensure_env() -> None:
    if not (BIN / "python").exists():
        print("dev.py: creating .venv", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    # Reinstall only when the project's metadata changed.
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    print("dev.py: installing litmus-sandbox[dev] into .venv", flush=True)
    quiet = ["-q", "--disable-pip-version-check"]
    if _run(BIN / "python", "-m", "pip", "install", *quiet, "-e", ".[dev]") != 0:
        sys.exit("dev.py: installation failed")
    STAMP.write_text(digest)


def _ensure_npm_servers() -> None:
    """Install the npm MCP servers the tests run against (tests/mcp_servers).

    ``npm ci`` runs when node_modules is missing or package-lock.json changed since the
    last install; a machine without npm gets one clear line (the MCP tests then fail,
    naming what is missing, rather than skip).
    """
    folder = ROOT / "tests" / "mcp_servers"
    lock = folder / "package-lock.json"
    stamp = folder / "node_modules" / ".litmus-installed"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return
    npm = shutil.which("npm")
    if npm is None:
        print("dev.py: npm not found: the MCP tests need Node.js 20+ and npm", flush=True)
        return
    print("dev.py: installing the npm MCP test servers (npm ci)", flush=True)
    quiet = ["--no-audit", "--no-fund", "--loglevel=error"]
    if _run(npm, "ci", "--prefix", folder, *quiet) != 0:
        sys.exit("dev.py: npm ci failed in tests/mcp_servers")
    stamp.write_text(digest)


def _ensure_browser() -> None:
    """Install Chromium and its driver, which the HTML report's browser tests drive.

    Only when ``chromium`` or ``chromedriver`` is missing, and only on Linux with apt-get
    (Debian's ``chromium`` and ``chromium-driver``; through sudo unless root). Elsewhere
    one clear line: the browser tests then fail, naming what is missing, rather than skip.
    """
    if shutil.which("chromium") and shutil.which("chromedriver"):
        return
    apt = shutil.which("apt-get")
    if not sys.platform.startswith("linux") or apt is None:
        print(
            "dev.py: chromium and chromedriver not found: the HTML report's browser tests "
            "need them (Debian: apt-get install chromium chromium-driver)",
            flush=True,
        )
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print("dev.py: installing chromium and chromium-driver (apt-get)", flush=True)
    for cmd in ([apt, "update", "-q"], [apt, "install", "-y", "-q", "chromium", "chromium-driver"]):
        if subprocess.call([*sudo, *cmd], cwd=ROOT, env=env, stdout=subprocess.DEVNULL) != 0:
            sys.exit("dev.py: apt-get install chromium chromium-driver failed")


def _ensure_redis() -> None:
    """Install ``redis-server``, which the Redis cache's tests start on loopback.

    Only when it is missing, and only on Linux with apt-get (Debian's ``redis-server``;
    through sudo unless root). Elsewhere one clear line: the Redis tests then fail,
    naming what is missing, rather than skip. The tests start their own servers; the
    package's service is not needed.
    """
    if shutil.which("redis-server"):
        return
    apt = shutil.which("apt-get")
    if not sys.platform.startswith("linux") or apt is None:
        print(
            "dev.py: redis-server not found: the Redis cache's tests need it "
            "(Debian: apt-get install redis-server)",
            flush=True,
        )
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print("dev.py: installing redis-server (apt-get)", flush=True)
    for cmd in ([apt, "update", "-q"], [apt, "install", "-y", "-q", "redis-server"]):
        if subprocess.call([*sudo, *cmd], cwd=ROOT, env=env, stdout=subprocess.DEVNULL) != 0:
            sys.exit("dev.py: apt-get install redis-server failed")


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py is what tells an old Python so
        sys.exit(f"dev.py: Python 3.11+ is required, this is {sys.version.split()[0]}")
    jobs = {"demo", "test", "incident"}
    if not argv or argv[0] not in jobs:
        print(__doc__)
        return 2
    _ensure_env()
    job, rest = argv[0], argv[1:]
    if job == "demo":
        code = _run(BIN / "litmus-sandbox", "demo", *rest)
        print(
            f"\ndev.py: the command is {BIN / 'litmus-sandbox'} "
            f"(or run `source {BIN / 'activate'}` to put litmus-sandbox on PATH)"
        )
        return code
    if job == "incident":
        return _run(BIN / "python", ROOT / "examples" / "reproduce_incident.py", *rest)
    _ensure_npm_servers()
    _ensure_browser()
    _ensure_redis()
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # mkdocs-material's banner, every build
    for step in (
        [BIN / "ruff", "check", "."],
        [BIN / "ruff", "format", "--check", "."],
        [BIN / "mypy"],
        [BIN / "lint-imports"],
        [BIN / "mkdocs", "build", "--strict", "--site-dir", ROOT / "build" / "site"],
    ):
        if (rc := _run(*step)) != 0:
            return rc
    # The wheel and its clean venvs for tests/installed (the registry is needed here only).
    if (rc := _run(BIN / "python", ROOT / "tests" / "installed" / "profiles.py")) != 0:
        return rc
    # One worker per core. (One more than the cores was faster, 401 s against 459 s, but
    # once in three runs an HTTP proxy test that waits on a stalled client timed out.)
    # One module per worker at a time (loadscope): a module's fixtures (the Inspect
    # evals, the demo folder) are built once, not once per worker.
    workers = str(os.cpu_count() or 1)
    parallel = (
        [] if any(a.startswith("-n") for a in rest) else ["-n", workers, "--dist", "loadscope"]
    )
    # The slowest tests named at the end: where the suite's time goes, run after run.
    durations = [] if any(a.startswith("--durations") for a in rest) else ["--durations=25"]
    return _run(BIN / "python", "-m", "pytest", *parallel, *durations, *rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
