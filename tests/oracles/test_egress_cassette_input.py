"""Egress cassettes are read like every other input: bounded, versioned."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from litmus_sandbox import NewerVersionError, RecordDecodeError
from litmus_sandbox.oracles.egress import HttpCassette

_OK = '{"kind":"http","v":1,"method":"GET","url":"https://api.example/x","body":"hi"}\n'


def test_a_fifo_or_a_directory_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for bad in (fifo, tmp_path):
        with pytest.raises(RecordDecodeError, match="not a regular file"):
            HttpCassette.from_files([bad])


def test_a_line_over_the_cap_names_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(_OK + _OK.replace('"hi"', '"' + "x" * 5000 + '"'))
    monkeypatch.setenv("LITMUS_MAX_LINE_BYTES", "4K")
    with pytest.raises(RecordDecodeError, match=r"c\.jsonl:2: line longer than 4 KiB"):
        HttpCassette.from_files([p])


@pytest.mark.parametrize(("v", "error"), [(9, NewerVersionError), (0, RecordDecodeError)])
def test_a_version_it_cannot_read_is_refused(
    tmp_path: Path, v: int, error: type[RecordDecodeError]
) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(_OK + _OK.replace('"v":1', f'"v":{v}'))
    with pytest.raises(error, match=rf"c\.jsonl:2: http record has v={v}"):
        HttpCassette.from_files([p])
    p.write_text(_OK)
    assert HttpCassette.from_files([p]).warnings == []


@pytest.mark.parametrize("key", ["status", "url"])
def test_a_duplicate_key_is_refused_naming_its_line(tmp_path: Path, key: str) -> None:
    """``"status": 200, "status": 500`` would serve whichever came last: it is an error."""
    dup = {
        "status": '"status":200,"status":500,',
        "url": '"url":"https://api.example/y",',
    }[key]
    p = tmp_path / "c.jsonl"
    p.write_text(_OK + _OK.replace('"method"', dup + '"method"'))
    with pytest.raises(RecordDecodeError, match=rf"c\.jsonl:2: duplicate key '{key}'"):
        HttpCassette.from_files([p])
