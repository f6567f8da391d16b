"""A record torn by a crash, then appended after, is a warning wherever the tear falls."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from factories import call, end, header, msg, verdict
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox import JsonlWriter, ReadWarning, read_episodes, read_verdicts
from litmus_sandbox._model.codec import encode
from litmus_sandbox._model.errors import RecordDecodeError


def _episodes_with_numbers() -> bytes:
    """A file of two finished episodes whose records hold numbers of every shape."""
    recs: list[msgspec.Struct] = []
    for eid in ("a", "b"):
        recs += [
            header(eid, f"case-{eid}", meta={"t": -1712345678.125, "n": -7}),
            msg(0, "user", "héllo ✓", eid=eid, at=1.5e-07),
            call(1, "calc", eid=eid, args={"x": -12.5, "y": 3e20, "z": [-1, 0.25, -0.0]}),
            end(eid, 2),
        ]
    return b"".join(encode(r) for r in recs)


def _check_tear(tmp_path: Path, blob: bytes, cut: int) -> None:
    p = tmp_path / "e.jsonl"
    p.write_bytes(blob[:cut])
    with JsonlWriter(p) as w:  # a later recorder appends after the crash
        w.write(header("later", "case-later"))
        w.write(msg(0, "user", "again", eid="later"))
        w.write(end("later", 1))
    warnings: list[ReadWarning] = []
    eps = {e.episode_id: e for e in read_episodes(p, warnings)}
    whole = blob[:cut].count(b"\n")
    kept = sum(1 + len(e.steps) + (e.end is not None) for e in eps.values()) - 3
    torn = cut > 0 and not blob[:cut].endswith(b"\n")
    assert eps["later"].complete
    if torn and blob[cut] != ord("\n"):
        assert kept == whole, cut
        assert [("torn record" in w.message) for w in warnings] == [True], cut
    else:  # nothing torn, or the cut left a whole record with no newline
        assert kept == whole + torn, cut
        assert warnings == [], cut


def test_a_tear_at_every_offset_leaves_the_file_readable(tmp_path: Path) -> None:
    """A tear right after a number's ``.`` or ``-`` once made the whole file unreadable."""
    blob = _episodes_with_numbers()
    for cut in range(len(blob) + 1):
        _check_tear(tmp_path, blob, cut)


numbers = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**63), 2**63)


@settings(max_examples=60)
@given(st.lists(numbers, min_size=1, max_size=6), st.data())
def test_a_tear_anywhere_in_records_of_numbers_is_a_torn_record(
    tmp_path_factory: pytest.TempPathFactory, values: list[float | int], data: st.DataObject
) -> None:
    recs: list[msgspec.Struct] = [header("a", "ca")]
    recs += [call(i, "t", eid="a", args={"n": v}) for i, v in enumerate(values)]
    recs.append(end("a", len(values)))
    blob = b"".join(encode(r) for r in recs)
    _check_tear(tmp_path_factory.mktemp("tear"), blob, data.draw(st.integers(0, len(blob))))


def test_a_last_line_cut_short_is_torn_at_every_offset(tmp_path: Path) -> None:
    """Every proper prefix of a last record, with no newline after it, is a torn last line
    (a warning, the whole lines kept), in an episode file and in a verdict file."""
    body = b"".join(encode(r) for r in (header("a", "case-a"), msg(0, "user", "hi", eid="a")))
    last = encode(end("a", 1)).rstrip(b"\n")
    v_body, v_last = encode(verdict("c1")), encode(verdict("c2", safe=False)).rstrip(b"\n")
    for cut in range(1, len(last)):
        p = tmp_path / "e.jsonl"
        p.write_bytes(body + last[:cut])
        warnings: list[ReadWarning] = []
        read_episodes(p, warnings)
        assert [w.line for w in warnings] == [3], cut
    for cut in range(1, len(v_last)):
        p = tmp_path / "v.jsonl"
        p.write_bytes(v_body + v_last[:cut])
        stream = read_verdicts(p)
        assert [v.case_id for v in stream.verdicts] == ["c1"], cut
        assert [w.line for w in stream.warnings] == [2], cut


@pytest.mark.parametrize(
    "last",
    [
        b'{"run_id": "b", "safe": "false"}',  # a wrong type
        b'{"run_id": "b", "run_id": "c", "safe": true}',  # a key twice
        b'{"run_id": "b", "safe": true} x',  # something after the record
    ],
)
def test_a_whole_last_record_that_is_wrong_is_an_error_without_its_newline(
    tmp_path: Path, last: bytes
) -> None:
    """Only a record cut short is torn: a whole one that is wrong is named ``file:line``,
    its newline or not."""
    p = tmp_path / "v.jsonl"
    for ending in (b"", b"\n"):
        p.write_bytes(b'{"run_id": "a", "safe": true}\n' + last + ending)
        with pytest.raises(RecordDecodeError) as caught:
            read_verdicts(p)
        assert f"{p}:2:" in str(caught.value)
