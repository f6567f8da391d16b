"""A call's evidence names the paths its audit events give, their folders resolved."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from litmus_sandbox.oracles._evidence import Evidence


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path.resolve()


def test_every_spelling_of_a_path_resolves_to_the_same_real_path(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (base / "real").mkdir()
    os.symlink(base / "real", base / "via")
    monkeypatch.chdir(base)
    ev = Evidence("1")
    want = f"{base}/real/f.txt"
    assert ev.resolve(f"{base}/via/f.txt") == want
    assert ev.resolve(os.fsencode(f"{base}/via/f.txt")) == want
    assert ev.resolve(base / "via" / "f.txt") == want
    assert ev.resolve("via/f.txt") == want  # relative: against the working directory
    assert ev.resolve(f"{base}/via//f.txt") == want
    assert ev.resolve("/top-level-name") == "/top-level-name"
    assert ev.resolve("/proc/self/status") is None  # not a file a tool leaves behind
    assert ev.resolve("/dev/shm/x") == "/dev/shm/x"


def test_a_folder_the_root_snapshot_lists_is_taken_as_it_is(base: Path) -> None:
    """``known_dir`` says a folder is a real one of the root's snapshot: no system call
    resolves it, so a link made there since is left to the end of the call."""
    (base / "real").mkdir()
    os.symlink(base / "real", base / "listed")
    ev = Evidence("1", known_dir=f"{base}/listed".__eq__)
    assert ev.resolve(f"{base}/listed/f.txt") == f"{base}/listed/f.txt"
    other = Evidence("2")
    assert other.resolve(f"{base}/listed/f.txt") == f"{base}/real/f.txt"


def test_a_write_in_a_covered_path_keeps_no_state_before_and_elsewhere_does(base: Path) -> None:
    (base / "root").mkdir()
    (base / "out.txt").write_bytes(b"before")
    (base / "root" / "in.txt").write_bytes(b"before")
    ev = Evidence("1", covered=lambda p: p.startswith(f"{base}/root/"))
    inside = ev.touch(f"{base}/root/in.txt", "written", follow=True)
    outside = ev.touch(f"{base}/out.txt", "written", follow=True)
    assert inside is not None
    assert outside is not None
    assert (inside.known, inside.follow, inside.before) == (False, True, None)
    assert outside.known
    assert outside.before is not None
    assert outside.sha256 == hashlib.sha256(b"before").hexdigest()
