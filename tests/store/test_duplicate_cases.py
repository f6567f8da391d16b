"""Cases recorded twice in a suite's shards: reported, naming both files, never merged;
several episodes of a case in two files are epochs only when their headers say so."""

from __future__ import annotations

from pathlib import Path

from factories import end, header, msg

from litmus_sandbox._model.codec import encode
from litmus_sandbox._store.duplicates import SHOWN, CaseLedger, declared_epoch
from litmus_sandbox._store.streams import ReadWarning, read_episodes


def episode_bytes(eid: str, case: str, **meta: object) -> bytes:
    records = (header(eid, case, meta=dict(meta)), msg(0, "user", "hi", eid=eid), end(eid, 1))
    return b"".join(encode(r) for r in records)


def test_a_case_in_two_shards_is_a_warning_naming_both(tmp_path: Path) -> None:
    a, b = tmp_path / "a.episodes.jsonl", tmp_path / "b.episodes.jsonl"
    a.write_bytes(episode_bytes("e1", "c1") + episode_bytes("e2", "c2"))
    b.write_bytes(episode_bytes("e3", "c2"))
    warnings: list[ReadWarning] = []
    episodes = read_episodes([a, b], warnings)
    assert len(episodes) == 3  # nothing dropped, nothing merged
    (w,) = warnings
    assert (w.path, w.line) == (str(b), 1)
    assert f"case 'c2' also recorded in {a}:4" in w.message
    assert "meta.epoch" in w.message
    assert read_episodes([a, b], [], suite=False) == episodes  # a cassette: no check


def test_declared_epochs_across_shards_are_epochs_and_an_epoch_twice_is_reported(
    tmp_path: Path,
) -> None:
    a, b, c = (tmp_path / f"{n}.episodes.jsonl" for n in "abc")
    a.write_bytes(episode_bytes("e1", "c1", epoch=1))
    b.write_bytes(episode_bytes("e2", "c1", epoch=2) + episode_bytes("e4", "c1", epoch=3))
    c.write_bytes(episode_bytes("e3", "c1", inspect={"epoch": 2}))
    warnings: list[ReadWarning] = []
    assert len(read_episodes([a, b], warnings)) == 3
    assert warnings == []
    read_episodes([a, b, c], warnings)
    (w,) = warnings
    assert w.path == str(c)
    assert w.message == f"epoch 2 of case 'c1' recorded twice (also {b}:1)"


def test_one_recorder_may_record_a_case_several_times_in_its_file(tmp_path: Path) -> None:
    a = tmp_path / "a.episodes.jsonl"
    a.write_bytes(episode_bytes("e1", "c1") + episode_bytes("e2", "c1"))
    warnings: list[ReadWarning] = []
    assert len(read_episodes([a], warnings)) == 2
    assert warnings == []


def test_past_the_first_cases_recorded_twice_the_rest_are_counted() -> None:
    ledger = CaseLedger()
    said = []
    for i in range(SHOWN + 5):
        assert ledger.see(header(f"a{i}", f"c{i}"), "a", i + 1) is None
        said.append(ledger.see(header(f"b{i}", f"c{i}"), "b", i + 1))
    assert sum(x is not None for x in said) == SHOWN
    assert ledger.summary() == (
        f"5 more episodes of cases recorded twice (the first {SHOWN} cases are named above)"
    )


def test_the_declared_epoch_is_an_integer_in_the_header() -> None:
    assert declared_epoch(header(meta={"epoch": 3})) == 3
    assert declared_epoch(header(meta={"inspect": {"epoch": 2}})) == 2
    assert declared_epoch(header(meta={"epoch": True})) is None
    assert declared_epoch(header(meta={"epoch": "1"})) is None
    assert declared_epoch(header()) is None
