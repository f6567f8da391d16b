"""A write that fails (a full disk) never damages what was written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from factories import end, header, msg

from litmus_sandbox import JsonlWriter, ReadWarning, read_episodes
from litmus_sandbox._model.codec import encode


def test_a_full_disk_leaves_only_whole_records(small_fs: Path) -> None:
    """Each failed write is undone back to the last whole record, and raises; once space
    is freed, writing goes on and the file reads whole."""
    filler = small_fs / "filler"
    filler.write_bytes(b"\0" * (1024 * 1024 - 64 * 1024))
    p = small_fs / "e.jsonl"
    failures = 0
    with JsonlWriter(p) as w:
        w.write(header("a", "ca"))
        for i in range(200):
            try:
                w.write(msg(i, "user", "x" * 997, eid="a"))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC  # noqa: PT017 - many writes, most fail
                failures += 1
                data = p.read_bytes()
                assert data.endswith(b"\n")  # no torn record left behind
        assert failures > 100
        written = p.read_bytes().count(b"\n")
        filler.unlink()
        w.write(end("a", written - 1))
    warnings: list[ReadWarning] = []
    (ep,) = read_episodes(p, warnings)
    assert warnings == []
    assert len(ep.steps) == written - 1
    assert ep.complete


class _FailingAfter:
    """``os.write`` that writes ``budget`` bytes in all, then fails with ENOSPC."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.real = os.write

    def __call__(self, fd: int, data: bytes) -> int:
        if self.budget <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = self.real(fd, bytes(data[: self.budget]))
        self.budget -= n
        return n


@pytest.mark.parametrize("budget", [0, 1, 30, 100])
def test_a_write_cut_short_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    p = tmp_path / "e.jsonl"
    with JsonlWriter(p) as w:
        w.write(header("a", "ca"))
        before = p.read_bytes()
        monkeypatch.setattr(os, "write", _FailingAfter(budget))
        with pytest.raises(OSError, match="No space"):
            w.write(msg(0, "user", "y" * 200, eid="a"))
        assert p.read_bytes() == before
        monkeypatch.undo()
        w.write(msg(0, "user", "ok", eid="a"))
        w.write(end("a", 1))
    assert read_episodes(p)[0].complete


def test_write_many_keeps_the_records_written_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "e.jsonl"
    recs = [header("a", "ca"), msg(0, "user", "one", eid="a"), msg(1, "user", "two", eid="a")]
    first_two = len(encode(recs[0])) + len(encode(recs[1]))
    with JsonlWriter(p) as w:
        monkeypatch.setattr(os, "write", _FailingAfter(first_two + 5))
        with pytest.raises(OSError, match="No space"):
            w.write_many(recs)
    assert p.read_bytes() == encode(recs[0]) + encode(recs[1])


def test_when_the_tear_cannot_be_undone_the_next_record_starts_a_fresh_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appended after the torn record (or truncating failed): the tear
    stays, and the next record starts on a fresh line, so the file reads with a warning."""
    p = tmp_path / "e.jsonl"

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    with JsonlWriter(p) as w:
        w.write(header("a", "ca"))
        w.write(header("b", "cb"))
        monkeypatch.setattr(os, "write", _FailingAfter(60))  # names "a"
        monkeypatch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(OSError, match="No space"):
            w.write(msg(0, "user", "lost", eid="a"))
        monkeypatch.undo()
        w.write(msg(0, "user", "kept", eid="b"))
        w.write(end("b", 1))
    warnings: list[ReadWarning] = []
    eps = {e.episode_id: e for e in read_episodes(p, warnings)}
    assert [w.line for w in warnings] == [3]
    assert eps["b"].complete
    assert not eps["a"].complete
