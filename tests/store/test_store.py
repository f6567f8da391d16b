"""Episode and verdict streams: round-trips, torn lines, clear errors, never a dropped line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from factories import V, call, end, header, legacy, msg, verdict
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox import (
    Actual,
    Effects,
    EgressEvent,
    Finding,
    FsEffect,
    JsonlWriter,
    NewerVersionError,
    PolicyRecord,
    ReadWarning,
    RecordDecodeError,
    ReplaySource,
    read_episodes,
    read_verdicts,
    write_verdicts,
)
from litmus_sandbox._model.codec import decode_episode_record, encode


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_hand_written_minimal_episode_reads(tmp_path: Path) -> None:
    """Only identifying fields are required, so other harnesses can write episodes."""
    p = write_lines(
        tmp_path / "e.jsonl",
        [
            '{"kind":"episode","v":1,"episode_id":"e1","case_id":"c1"}',
            '{"kind":"step","v":1,"episode_id":"e1","index":0,"type":"message","role":"user","text":"hi"}',
            '{"kind":"step","v":1,"episode_id":"e1","index":1,"type":"tool_call","call_id":"a","tool":"t","args":{},"fidelity":"real","shown":{"content":[]}}',
            '{"kind":"end","v":1,"episode_id":"e1","status":"complete"}',
        ],
    )
    (ep,) = read_episodes([p])
    assert ep.case_id == "c1"
    assert len(ep.steps) == 2
    assert ep.complete
    assert ep.header.recorder.name == "unknown"


def test_interleaved_episodes_group_and_steps_sort(tmp_path: Path) -> None:
    recs: list[msgspec.Struct] = [
        header("a", "ca"),
        header("b", "cb"),
        msg(1, "assistant", "two", eid="a"),
        msg(0, "user", "b0", eid="b"),
        msg(0, "user", "one", eid="a"),
        end("b", 1),
    ]
    p = tmp_path / "e.jsonl"
    with JsonlWriter(p) as w:
        for r in recs:
            w.write(r)
    eps = {e.episode_id: e for e in read_episodes([p])}
    assert [s.index for s in eps["a"].steps] == [0, 1]
    assert eps["b"].complete
    assert not eps["a"].complete  # no end record
    assert eps["a"].end is None


def test_torn_last_line_is_a_warning_and_marks_the_episode_incomplete(tmp_path: Path) -> None:
    p = tmp_path / "e.jsonl"
    good = [encode(header()), encode(msg(0, "user", "hi"))]
    p.write_bytes(b"".join(good) + encode(msg(1, "assistant", "partial"))[:25])
    warnings: list[Any] = []
    (ep,) = read_episodes([p], warnings)
    assert len(ep.steps) == 1
    assert ep.torn
    assert not ep.complete
    assert len(warnings) == 1
    assert f"{p}:3" in str(warnings[0])


def test_bad_line_in_the_middle_names_file_and_line(tmp_path: Path) -> None:
    p = write_lines(
        tmp_path / "e.jsonl",
        [
            '{"kind":"episode","v":1,"episode_id":"e1","case_id":"c1"}',
            '{"kind":"step","v":1,"episode_id":"e1","index":0,"type":"message","role":"user"}',
            '{"kind":"end","v":1,"episode_id":"e1","status":"complete"}',
        ],
    )
    with pytest.raises(RecordDecodeError) as info:
        read_episodes([p])
    assert info.value.line == 2
    assert str(info.value).startswith(f"{p}:2: ")
    assert "text" in str(info.value)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('{"kind":"episode","v":3,"episode_id":"e","case_id":"c"}', "newer version"),
        ('{"kind":"hologram","v":1,"episode_id":"e"}', "newer version"),
        ('{"kind":"step","v":1,"episode_id":"e","index":0,"type":"thought"}', "newer version"),
    ],
)
def test_newer_records_get_a_clear_error(tmp_path: Path, line: str, fragment: str) -> None:
    p = write_lines(
        tmp_path / "e.jsonl", ['{"kind":"episode","v":1,"episode_id":"e","case_id":"c"}', line]
    )
    with pytest.raises(NewerVersionError, match=fragment):
        read_episodes([p])


_VERDICT = '{"kind":"verdict","v":1,"case_id":"a","episode_id":"e","safe":true}'
_POLICY = '{"kind":"policy","v":1,"policy":{},"judge":"j","refusal_detector":"r"}'


@pytest.mark.parametrize(
    ("lines", "bad_line", "what"),
    [
        ([_POLICY, _VERDICT, _VERDICT.replace('"v":1', '"v":3')], 3, "verdict record has v=3"),
        ([_POLICY.replace('"v":1', '"v":7'), _VERDICT], 1, "policy record has v=7"),
        ([_VERDICT.replace('"v":1', '"v":99')], 1, "verdict record has v=99"),
    ],
)
def test_newer_verdict_records_get_a_clear_error(
    tmp_path: Path, lines: list[str], bad_line: int, what: str
) -> None:
    """Well-formed files are decoded whole; a newer record must still be refused, by line."""
    p = write_lines(tmp_path / "v.jsonl", lines)
    with pytest.raises(NewerVersionError, match=what) as info:
        read_verdicts(p)
    assert str(info.value).startswith(f"{p}:{bad_line}: ")
    assert "newer version" in str(info.value)


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        (
            [
                '{"kind":"step","v":1,"episode_id":"x","index":0,"type":"message","role":"user","text":"a"}'
            ],
            "before its header",
        ),
        (['{"kind":"episode","v":1,"episode_id":"x","case_id":"c"}'] * 2, "second header"),
        (['{"kind":"episode","episode_id":"x","case_id":"c"}'], "no 'v'"),
        (["[1, 2]"], "not a JSON object"),
        (["{nope"], "not valid JSON"),
        (['{"kind":"verdict","v":1}'], "verdict file"),
        (['{"kind":"http","v":1,"method":"GET","url":"u"}'], "egress cassette"),
    ],
)
def test_structural_problems_are_errors(tmp_path: Path, lines: list[str], fragment: str) -> None:
    p = write_lines(tmp_path / "e.jsonl", lines)
    with pytest.raises(RecordDecodeError, match=fragment):
        read_episodes([p])


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RecordDecodeError, match="cannot open"):
        read_episodes([tmp_path / "nope.jsonl"])


def test_writer_starts_a_fresh_line_after_a_torn_tail(tmp_path: Path) -> None:
    p = tmp_path / "e.jsonl"
    p.write_bytes(encode(header("a", "ca"))[:-10])
    with JsonlWriter(p) as w:
        w.write(header("b", "cb"))
    lines = p.read_bytes().split(b"\n")
    assert json.loads(lines[1])["episode_id"] == "b"


def test_a_file_appended_to_after_a_crash_reads_whole(tmp_path: Path) -> None:
    """A crash cuts episode a's step short; a new writer appends episode b. Both read: a
    incomplete (its torn record reported), b complete; a garbage line is still an error."""
    p = tmp_path / "e.jsonl"
    p.write_bytes(
        encode(header("a", "ca"))
        + encode(msg(0, "user", "hi", eid="a"))
        + encode(msg(1, "assistant", "working on it", eid="a"))[:-12]
    )
    with JsonlWriter(p) as w:
        w.write(header("b", "cb"))
        w.write(msg(0, "user", "hello", eid="b"))
        w.write(end("b", 1))
    warnings: list[ReadWarning] = []
    a, b = sorted(read_episodes(p, warnings), key=lambda e: e.episode_id)
    assert [(w.line, "torn record" in w.message) for w in warnings] == [(3, True)]
    assert not a.complete
    assert a.torn
    assert [s.index for s in a.steps] == [0]
    assert b.complete
    p.write_bytes(p.read_bytes() + b"not json at all\n")
    with pytest.raises(RecordDecodeError, match=":7: "):
        read_episodes(p)


def test_a_damaged_line_inside_an_episode_is_an_error_not_a_tear(tmp_path: Path) -> None:
    """A line cut short but followed by more of its own episode was not torn by a crash
    (a crash ends the writing): it is damage, reported at its line."""
    p = tmp_path / "e.jsonl"
    p.write_bytes(
        encode(header("a", "ca"))
        + encode(msg(0, "user", "hi", eid="a"))[:-3]
        + b"\n"
        + encode(msg(1, "assistant", "ok", eid="a"))
        + encode(end("a", 2))
    )
    with pytest.raises(RecordDecodeError, match=r":2: not valid JSON"):
        read_episodes(p)


def test_full_tool_call_round_trips() -> None:
    step = call(
        3,
        "send_email",
        shown="",
        fidelity="swallowed",
        args={"to": "a@b.c", "nested": {"x": [1, 2]}},
        actual=Actual(outcome="raised", error_type="TimeoutError", error_message="slow"),
        effects=Effects(
            fs=(FsEffect(op="created", path="out.txt", after_sha256="ab", after_size=3),),
            egress=(EgressEvent(method="POST", host="api.example", port=443, decision="deny"),),
        ),
        findings=(Finding(code="hidden_effect", detail="x", path="out.txt"),),
        source=ReplaySource(episode_id="old", step=3),
        started_at=1.5,
        ended_at=2.5,
    )
    assert decode_episode_record(encode(step)) == step


# ---------------------------------------------------------------- properties

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def episode_records(draw: st.DrawFn) -> list[msgspec.Struct]:
    n_eps = draw(st.integers(1, 3))
    streams: list[list[msgspec.Struct]] = []
    for e in range(n_eps):
        eid = f"ep{e}"
        recs: list[msgspec.Struct] = [header(eid, f"case{e}")]
        n = draw(st.integers(0, 5))
        for i in range(n):
            if draw(st.booleans()):
                role = draw(st.sampled_from(["user", "assistant", "system"]))
                recs.append(
                    msg(i, role, draw(texts), eid=eid, refusal=draw(st.none() | st.booleans()))
                )
            else:
                recs.append(
                    call(
                        i,
                        draw(st.sampled_from(["send_email", "read_file"])),
                        shown=draw(st.none() | texts),
                        eid=eid,
                        fidelity=draw(
                            st.sampled_from(["real", "stubbed", "replayed", "swallowed", "denied"])
                        ),
                        args=draw(st.dictionaries(texts, json_values, max_size=3)),
                    )
                )
        if draw(st.booleans()):
            recs.append(end(eid, n))
        streams.append(recs)
    # Interleave the episodes' records, keeping each episode's own order.
    out: list[msgspec.Struct] = []
    while any(streams):
        live = [s for s in streams if s]
        out.append(draw(st.sampled_from(live)).pop(0))
    return out


@given(episode_records())
def test_episode_records_round_trip(records: list[msgspec.Struct]) -> None:
    for r in records:
        assert decode_episode_record(encode(r)) == r


@settings(max_examples=60)
@given(episode_records(), st.data())
def test_truncating_a_file_anywhere_loses_only_the_torn_line(
    tmp_path_factory: pytest.TempPathFactory, records: list[msgspec.Struct], data: st.DataObject
) -> None:
    blob = b"".join(encode(r) for r in records)
    cut = data.draw(st.integers(0, len(blob)))
    p = tmp_path_factory.mktemp("cut") / "e.jsonl"
    p.write_bytes(blob[:cut])
    whole = blob[:cut].count(b"\n")
    warnings: list[Any] = []
    eps = read_episodes([p], warnings)
    kept = sum(1 + len(e.steps) + (e.end is not None) for e in eps)
    torn_tail = cut > 0 and not blob[:cut].endswith(b"\n")
    # Every whole line is kept; a torn tail is either a warning or (if it happens to be
    # valid JSON of a whole record, e.g. cut just before the newline) kept too.
    assert kept in (whole, whole + 1)
    assert kept == whole + 1 or not torn_tail or len(warnings) == 1
    if not torn_tail:
        assert warnings == []
        assert kept == whole


# ---------------------------------------------------------------- verdict streams


def test_verdict_stream_round_trip_with_policy(tmp_path: Path) -> None:
    p = tmp_path / "v.jsonl"
    pol = PolicyRecord(v=V, policy={"scoring": {}}, judge="j", refusal_detector="d")
    vs = [verdict("a"), verdict("b", safe=False)]
    write_verdicts(p, pol, vs)
    stream = read_verdicts(p)
    assert stream.policies == [pol]
    assert [v.case_id for v in stream.verdicts] == ["a", "b"]
    assert stream.verdicts == vs


def test_legacy_and_native_verdicts_mix(tmp_path: Path) -> None:
    lines = [
        json.dumps(msgspec.to_builtins(legacy("r1"))),
        encode(verdict("c2")).decode().strip(),
    ]
    stream = read_verdicts(write_lines(tmp_path / "v.jsonl", lines))
    assert [type(v).__name__ for v in stream.verdicts] == ["LegacyVerdict", "Verdict"]


def test_reference_shaped_legacy_file_reads(tmp_path: Path) -> None:
    line = '{"run_id": "r1", "safe": true, "provenance": {"truncate_on_refusal": true, "truncate_on_empty_tool_result": false, "steps_covered": 3, "judge_version": "j-2026"}}'
    (v,) = read_verdicts(write_lines(tmp_path / "v.jsonl", [line])).verdicts
    assert v.case_id == "r1"
    assert v.provenance.steps_covered == 3


def test_unknown_provenance_keys_are_kept_aside(tmp_path: Path) -> None:
    raw = msgspec.to_builtins(verdict("c"))
    raw["provenance"]["temperature"] = 0.7
    (v,) = read_verdicts(write_lines(tmp_path / "v.jsonl", [json.dumps(raw)])).verdicts
    assert v.unknown_provenance == {"temperature": 0.7}
    # A key unknown inside a known table is unknown too, named by its dotted path.
    raw = msgspec.to_builtins(verdict("c"))
    raw["provenance"]["recorder"]["build"] = "x"
    (v,) = read_verdicts(write_lines(tmp_path / "w.jsonl", [json.dumps(raw)])).verdicts
    assert v.unknown_provenance == {"recorder.build": "x"}
    assert v.provenance == verdict("c").provenance


def test_bad_verdict_line_names_its_line(tmp_path: Path) -> None:
    lines = [encode(verdict("a")).decode().strip(), '{"kind":"verdict","v":1,"case_id":"x"}']
    with pytest.raises(RecordDecodeError, match=r"v\.jsonl:2: invalid verdict record"):
        read_verdicts(write_lines(tmp_path / "v.jsonl", lines))


def test_torn_verdict_tail_is_a_warning(tmp_path: Path) -> None:
    p = tmp_path / "v.jsonl"
    p.write_bytes(encode(verdict("a")) + encode(verdict("b"))[:40])
    stream = read_verdicts(p)
    assert [v.case_id for v in stream.verdicts] == ["a"]
    assert len(stream.warnings) == 1


def test_a_gap_in_step_numbers_is_a_lost_record(tmp_path: Path) -> None:
    """Steps are numbered from 0 as they happen: 0 then 3 means records were lost, so the
    episode is not complete even though it ended (and says nothing of its count)."""
    p = write_lines(
        tmp_path / "e.jsonl",
        [
            '{"kind":"episode","v":1,"episode_id":"e","case_id":"c"}',
            '{"kind":"step","v":1,"episode_id":"e","index":0,"type":"message","role":"user","text":"a"}',
            '{"kind":"step","v":1,"episode_id":"e","index":3,"type":"message","role":"user","text":"b"}',
            '{"kind":"end","v":1,"episode_id":"e","status":"complete"}',
        ],
    )
    (ep,) = read_episodes(p)
    assert [s.index for s in ep.steps] == [0, 3]
    assert not ep.complete
    whole = write_lines(
        tmp_path / "w.jsonl",
        [
            '{"kind":"episode","v":1,"episode_id":"e","case_id":"c"}',
            '{"kind":"step","v":1,"episode_id":"e","index":1,"type":"message","role":"user","text":"b"}',
            '{"kind":"step","v":1,"episode_id":"e","index":0,"type":"message","role":"user","text":"a"}',
            '{"kind":"end","v":1,"episode_id":"e","status":"complete"}',
        ],
    )
    assert read_episodes(whole)[0].complete  # written out of order, none missing
