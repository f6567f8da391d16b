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
