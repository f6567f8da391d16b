"""Shared test set-up: hypothesis profiles and the examples folder on sys.path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, settings
from s3_server import S3Bucket, S3Server
from s3_server import s3_server as running_s3_server

# A fast default profile, and a deep one for occasional long runs:
#   HYPOTHESIS_PROFILE=deep python3 dev.py test
settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "deep", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


import pytest  # noqa: E402 - kept beside the fixture it serves


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Async tests run on both asyncio and trio."""
    return str(request.param)


@pytest.fixture(autouse=True)
def own_temp_and_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test gets its own TMPDIR and HOME, no inherited terminal size, and its own stand-ins for the shared
    directories the filesystem oracle watches by default (``/dev/shm``, ``/var/tmp``).

    The filesystem oracle watches those as tripwires: with the system ones, a file another
    process makes there during a test would be seen by that test (as an unattributed
    effect). Subprocesses the test starts inherit both variables.
    """
    import tempfile

    from litmus_sandbox.oracles.fs import _tripwires

    base = tmp_path_factory.mktemp("own")
    tmp, home, shm, var_tmp = base / "tmp", base / "home", base / "shm", base / "var-tmp"
    for folder in (tmp, home, shm, var_tmp):
        folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("HOME", str(home))
    # pytest-xdist's workers set the terminal's size; a test sets its own where it matters.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(_tripwires, "SHARED_TRIPWIRES", (str(shm), str(var_tmp)))


@pytest.fixture(params=["watched", "relay"])
def oracles(request: pytest.FixtureRequest) -> list[str]:
    """The MCP proxy's options in its tests: the oracles on (each call runs in a task of
    its own, between the probes) or off (a plain real call is run inline, with no task:
    the relay's hot path)."""
    return [] if request.param == "watched" else ["--no-watch-fs", "--no-egress"]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, mounted for the test and unmounted after."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 server (SeaweedFS) on loopback, one per test process, stopped at the end."""
    with running_s3_server(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A place of its own on the S3 server (a prefix of its bucket), and the standard
    ``AWS_*`` variables that reach it set for the test (and the commands it runs)."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server.place()
