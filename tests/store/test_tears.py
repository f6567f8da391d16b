"""A record torn by a crash, then appended after, is a warning wherever the tear falls."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from factories import call, end, header, msg
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox import JsonlWriter, ReadWarning, read_episodes
from litmus_sandbox._model.codec import encode


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
