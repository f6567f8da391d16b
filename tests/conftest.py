"""Shared test set-up: hypothesis profiles and the examples folder on sys.path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

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
    """Each test gets its own TMPDIR and HOME.

    The filesystem oracle watches the temp dir as a tripwire: with the system one, a file
    another process makes there during a test would land in that test's effects. Subprocesses
    the test starts inherit both variables.
    """
    import tempfile

    base = tmp_path_factory.mktemp("own")
    tmp, home = base / "tmp", base / "home"
    tmp.mkdir()
    home.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
