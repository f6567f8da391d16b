"""A full disk under an output: one line naming the output, exit 2, the old file intact,
no partial file left; and the partial files a killed run left are cleaned up.

The full disk is real: the small tmpfs of ``tests/conftest.py`` (root only; elsewhere the
test says why it cannot run), filled.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from factories import call, episode, msg

from litmus_sandbox import JsonlWriter
from litmus_sandbox._store.files import replaced


@pytest.fixture
def full_disk(small_fs: Path) -> Path:
    """A folder on a filesystem with no space left (an old output already in it)."""
    (small_fs / "out.jsonl").write_bytes(b"old\n")
    with open(small_fs / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError:
            pass
    return small_fs


@pytest.fixture
def episodes(tmp_path: Path) -> Path:
    path = tmp_path / "eps.jsonl"
    steps = [msg(0, "user", "hello " * 500), call(1, "search", "x" * 5000)]
    with JsonlWriter(path) as out:
        ep = episode(steps)
        out.write(ep.header)
        out.write_many(ep.steps)
        assert ep.end is not None
        out.write(ep.end)
    (tmp_path / "policy.toml").write_text('[judge]\nkind = "rules"\n')
    return path


def cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "litmus_sandbox", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [
        ["score", "eps.jsonl", "--policy", "policy.toml", "--no-cache", "-o"],
        ["show", "eps.jsonl"],  # stdout only: it writes nothing, and must not fail here
    ],
)
def test_a_full_disk_is_one_line_naming_the_output(
    full_disk: Path, episodes: Path, tmp_path: Path, command: list[str]
) -> None:
    target = full_disk / "out.jsonl"
    r = cli(*command, *([target] if command[-1] == "-o" else []), cwd=tmp_path)
    if command[0] == "show":
        assert r.returncode == 0
        return
    assert r.returncode == 2
    assert r.stderr == f"litmus-sandbox: error: {target}: cannot write: No space left on device\n"
    assert target.read_bytes() == b"old\n"  # the older output intact
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "out.jsonl"]


def test_a_full_disk_under_the_html_report(full_disk: Path, tmp_path: Path) -> None:
    from factories import verdict

    for side in ("b", "c"):
        with JsonlWriter(tmp_path / f"{side}.jsonl") as out:
            out.write(verdict("c1", safe=side == "b"))
    report = full_disk / "report.html"
    r = cli("gate", "--baseline", "b.jsonl", "--candidate", "c.jsonl", "--html", report,
            cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.startswith(f"litmus-sandbox: error: {report}: cannot write: ")
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "out.jsonl"]


def test_partial_files_of_a_killed_run_are_removed_on_the_next_write(tmp_path: Path) -> None:
    out = tmp_path / "v.jsonl"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = tmp_path / f".v.jsonl.{int(dead.stdout)}.tmp"
    stale.write_bytes(b"half a run")
    live = tmp_path / ".v.jsonl.1.tmp"  # pid 1 runs: a writer that may still be at work
    live.write_bytes(b"in progress")
    other = tmp_path / f".w.jsonl.{int(dead.stdout)}.tmp"  # another output's: not ours
    other.write_bytes(b"x")
    with replaced(out) as f:
        f.write(b"new\n")
    assert out.read_bytes() == b"new\n"
    assert not stale.exists()
    assert live.exists()
    assert other.exists()
