"""The runner of the installed-package tests: commands from a profile's clean venv.

Every command runs what a user installed (``profiles.py``: the built wheel, never
editable, without the test extras) from a folder outside the source tree, with no
``PYTHONPATH``, and offline: the proxy variables point at a closed loopback port, so
anything that tries to reach the internet fails at once instead of succeeding on a
machine that happens to have a network.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

#: A loopback port where nothing listens: the proxies every profile command is given.
CLOSED = "http://127.0.0.1:9"


class Profile:
    """One installed profile: its venv's ``bin`` folder and a working folder to run in."""

    def __init__(self, name: str, bin_dir: Path, cwd: Path) -> None:
        self.name, self.bin, self.cwd = name, bin_dir, cwd
        self.python = bin_dir / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment: no PYTHONPATH or VIRTUAL_ENV of the dev venv, offline."""
        keep = ("HOME", "TMPDIR", "LANG", "TERM", "SYSTEMROOT")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(
            PATH=os.pathsep.join([str(self.bin), "/usr/local/bin", "/usr/bin", "/bin"]),
            HTTP_PROXY=CLOSED,
            HTTPS_PROXY=CLOSED,
            ALL_PROXY=CLOSED,
            NO_PROXY="localhost,127.0.0.1,::1",
            HF_HUB_OFFLINE="1",
            LITMUS_CACHE=str(self.cwd / "verdict-cache.sqlite"),
        )
        env.update(extra)
        return env

    def run(
        self,
        *args: str | Path,
        expect: int | Sequence[int] = 0,
        program: str = "litmus-sandbox",
        timeout: float = 120,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``program`` (a script of the venv) with ``args``; check its exit code and
        that ``litmus-sandbox`` printed no traceback (a client library may log its own)."""
        argv = [str(self.bin / program), *map(str, args)]
        done = subprocess.run(
            argv,
            cwd=self.cwd,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        wanted = {expect} if isinstance(expect, int) else set(expect)
        shown = f"{' '.join(argv)}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        assert done.returncode in wanted, f"exit {done.returncode}, wanted {wanted}: {shown}"
        if program == "litmus-sandbox":
            assert "Traceback" not in done.stderr, shown
        return done
