"""Outputs replaced whole (``_store.files.replaced``): every command's written files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from litmus_sandbox._store.files import replaced


def test_the_file_is_replaced_only_once_written_whole(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"old\n")
    with replaced(out) as f:
        f.write(b"new\n")
        assert out.read_bytes() == b"old\n"  # a reader never sees half of it
    assert out.read_bytes() == b"new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_a_failure_leaves_the_old_file_and_no_partial_one(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"old\n")

    def write_half() -> None:
        with replaced(out) as f:
            f.write(b"half")
            raise RuntimeError("the input went bad")

    with pytest.raises(RuntimeError):
        write_half()
    assert out.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_through_a_link_the_file_it_points_to_is_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_bytes(b"old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    with replaced(link, fsync=True) as f:
        f.write(b"new\n")
    assert link.is_symlink()
    assert real.read_bytes() == b"new\n"


def test_what_is_not_a_regular_file_is_written_to_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with replaced(fifo) as f:
        f.write(b"through the pipe\n")
    reader.join(10)
    assert got == [b"through the pipe\n"]
    assert fifo.is_fifo()


def test_missing_folders_are_made_only_when_asked(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "out.jsonl"
    with pytest.raises(OSError, match=r"out\.jsonl"), replaced(out):
        pass
    with replaced(out, parents=True) as f:
        f.write(b"x")
    assert out.read_bytes() == b"x"
