"""Fixtures of the installed-package tests (``runner.py`` runs the commands)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from installed import profiles
from installed.runner import Profile


@pytest.fixture(scope="session")
def profile_bins() -> Callable[[str], Path]:
    """``profiles.ensure``, once per profile and session."""
    made: dict[str, Path] = {}

    def bin_of(name: str) -> Path:
        if name not in made:
            made[name] = profiles.ensure(name)
        return made[name]

    return bin_of


@pytest.fixture
def installed(profile_bins: Callable[[str], Path], tmp_path: Path) -> Callable[[str], Profile]:
    """A profile to run commands from, in a working folder of this test's own."""

    def make(name: str) -> Profile:
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        return Profile(name, profile_bins(name), work)

    return make
