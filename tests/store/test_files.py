"""Bounded reading: regular files only, a cap on one line, deep documents named by line."""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from factories import header, msg, verdict
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import ConfigError, RecordDecodeError, read_episodes, read_verdicts
from litmus_sandbox._model.codec import encode
from litmus_sandbox._store import files
from litmus_sandbox._store.exclusions import load_exclusions
from litmus_sandbox._store.files import (
    MAX_LINE_ENV,
    iter_blocks,
    iter_lines,
    max_line_bytes,
    open_input,
    read_bounded_text,
    read_toml,
)


def _readers(path: Path) -> list[RecordDecodeError]:
    """Call every reader on ``path``; each must raise."""
    calls: list[Callable[[], object]] = [
        lambda: read_episodes(path),
        lambda: read_verdicts(path),
        lambda: load_exclusions(path),
        lambda: read_toml(path),
    ]
    out = []
    for call in calls:
        with pytest.raises(RecordDecodeError) as info:
            call()
        out.append(info.value)
    return out


def test_a_fifo_is_refused_at_once_by_every_reader(tmp_path: Path) -> None:
    """Nobody writes to it: opening it for reading would block forever."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for err in _readers(fifo):
        assert str(err) == f"{fifo}: not a regular file (a FIFO)"


def test_a_directory_a_device_and_a_socket_are_refused(tmp_path: Path) -> None:
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        for path, kind in (
            (tmp_path, "a directory"),
            (Path("/dev/zero"), "a character device"),
            (sock_path, "a socket"),
        ):
            for err in _readers(path):
                assert str(err) == f"{path}: not a regular file ({kind})"


def test_a_missing_file_still_says_it_cannot_be_opened(tmp_path: Path) -> None:
    with pytest.raises(RecordDecodeError, match=r"nope\.jsonl: cannot open: No such file"):
        open_input(tmp_path / "nope.jsonl")


def test_standard_input_only_where_a_reader_asks_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecordDecodeError, match="cannot be read from standard input"):
        open_input("-")  # no file named "-" either
    with open_input("-", allow_stdin=True) as f:
        assert f.fileno() != 0  # a duplicate: closing it leaves stdin open
    (tmp_path / "-").write_bytes(b"a file named -\n")
    with open_input("-") as f:
        assert f.read() == b"a file named -\n"


def test_a_line_over_the_cap_names_its_line_in_every_line_reader(tmp_path: Path) -> None:
    long = "x" * 400
    episodes = tmp_path / "e.jsonl"
    episodes.write_bytes(encode(header()) + f'{{"kind":"step","text":"{long}"}}\n'.encode())
    with pytest.raises(RecordDecodeError, match=r"e\.jsonl:2: line longer than 300 bytes"):
        read_episodes(episodes, max_line=300)
    verdicts = tmp_path / "v.jsonl"
    short = len(encode(verdict("a")))
    verdicts.write_bytes(encode(verdict("a")) + encode(verdict("b" * 300)))
    with pytest.raises(RecordDecodeError, match=r"v\.jsonl:2: line longer than"):
        read_verdicts(verdicts, max_line=short + 10)
    assert len(read_verdicts(verdicts, max_line=short * 3).verdicts) == 2
    text = tmp_path / "x.txt"
    text.write_text(f"c1 ok\nc2 {long}\n")
    with pytest.raises(RecordDecodeError, match=r"x\.txt:2: line longer than"):
        load_exclusions(text, max_line=300)


def test_the_cap_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "e.jsonl"
    p.write_bytes(encode(header()) + encode(msg(0, "user", "y" * 5000)))
    monkeypatch.setenv(MAX_LINE_ENV, "4K")
    assert max_line_bytes() == 4096
    with pytest.raises(RecordDecodeError, match=r":2: line longer than 4 KiB .*LITMUS_MAX"):
        read_episodes(p)
    monkeypatch.setenv(MAX_LINE_ENV, "8KiB")
    assert len(read_episodes(p)[0].steps) == 1
    monkeypatch.setenv(MAX_LINE_ENV, "lots")
    with pytest.raises(ConfigError, match="LITMUS_MAX_LINE_BYTES='lots'"):
        read_episodes(p)
    monkeypatch.delenv(MAX_LINE_ENV)
    assert max_line_bytes() == files.DEFAULT_MAX_LINE_BYTES == 16 * 1024 * 1024


def test_a_huge_line_costs_at_most_the_cap(tmp_path: Path) -> None:
    """A sparse 1 GiB file of one line: refused after reading the cap, not the file."""
    p = tmp_path / "huge.jsonl"
    with open(p, "wb") as f:
        f.truncate(1 << 30)
    with pytest.raises(RecordDecodeError, match=r"huge\.jsonl:1: line longer than 1 MiB"):
        read_verdicts(p, max_line=1 << 20)
    with pytest.raises(RecordDecodeError, match=r"huge\.jsonl:1: line longer than 1 MiB"):
        read_episodes(p, max_line=1 << 20)
    with pytest.raises(RecordDecodeError, match=r"huge\.jsonl: larger than 1 MiB"):
        read_bounded_text(p, 1 << 20)


@given(
    st.lists(st.integers(0, 12), max_size=12),
    st.integers(1, 16),
    st.integers(1, 20),
    st.booleans(),
)
def test_blocks_hold_every_line_and_find_every_line_over_the_cap(
    lengths: list[int], block: int, limit: int, ended: bool
) -> None:
    data = b"".join(b"x" * n + b"\n" for n in lengths)
    if not ended and data:
        data = data[:-1]
    too_long = [i for i, n in enumerate(lengths, 1) if n > limit]
    try:
        got = list(iter_blocks(io.BytesIO(data), "f", limit, block))
    except RecordDecodeError as exc:
        assert too_long
        assert exc.line == too_long[0]  # noqa: PT017 - raising is one of two outcomes
        return
    assert not too_long
    assert b"".join(b for _, b, _ in got) == data
    offset = 0
    for i, (first, b, split) in enumerate(got):
        assert first == data[:offset].count(b"\n") + 1
        assert split == b.split(b"\n")
        assert b.endswith(b"\n") or i == len(got) - 1
        offset += len(b)
    lines = list(iter_lines(io.BytesIO(data), "f", limit))
    assert [raw for _, raw, _ in lines] == data.splitlines(keepends=True)


def test_deep_toml_is_an_error_naming_its_line(tmp_path: Path) -> None:
    """tomllib recurses once per level (and is quadratic in a dotted key's length)."""
    cases = {
        "arrays": "[judge]\nkind = 'rules'\nx = " + "[" * 100_000 + "]" * 100_000 + "\n",
        "inline": '# a comment with [[[ brackets\n[judge]\ns = "[[["\nx = '
        + "{a=" * 100_000
        + "1"
        + "}" * 100_000,
        "dotted": "[judge]\n\nx." + ".".join(["a"] * 100_000) + " = 1\n",
        "header": "[" + ".".join(["a"] * 100_000) + "]\n",
    }
    lines = {"arrays": 3, "inline": 4, "dotted": 3, "header": 1}
    for name, text in cases.items():
        p = tmp_path / f"{name}.toml"
        p.write_text(text)
        with pytest.raises(RecordDecodeError, match="nested too deeply") as info:
            read_toml(p)
        assert info.value.line == lines[name], name
    shallow = tmp_path / "ok.toml"
    shallow.write_text("[judge]\nx = " + "[" * 20 + "]" * 20 + "\ny.z = 1\n")
    assert read_toml(shallow)["judge"]["y"] == {"z": 1}


def test_not_utf8_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_bytes(b"[judge]\nx = '\xe9'\n")
    with pytest.raises(RecordDecodeError, match=r"p\.toml:2: not UTF-8 text"):
        read_toml(p)
