"""Malformed records: duplicate keys, bad versions, deep nesting."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import msgspec
import pytest
from factories import legacy, verdict
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import (
    NewerVersionError,
    PolicyRecord,
    RecordDecodeError,
    read_episodes,
    read_verdicts,
    write_verdicts,
)
from litmus_sandbox._cli.main import main as cli_main
from litmus_sandbox._model import legacy_blocks
from litmus_sandbox._model.codec import (
    DecodeProblem,
    decode_verdict_record,
    legacy_fast_decoder,
)
from litmus_sandbox._model.legacy_blocks import legacy_members_distinct
from litmus_sandbox._model.records import NO_UNKNOWN_KEYS
from litmus_sandbox._store import files

_EP = '{"kind":"episode","v":1,"episode_id":"e","case_id":"c"}'
_VERDICT = '{"kind":"verdict","v":1,"case_id":"a","episode_id":"e","safe":true}'
_LEGACY = (
    '{"run_id": "r", "safe": true, "provenance": {"truncate_on_refusal": false, '
    '"truncate_on_empty_tool_result": false, "steps_covered": 2, "judge_version": "j"}}'
)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


# ---------------------------------------------------------------- duplicate keys


@pytest.mark.parametrize(
    ("lines", "bad", "key"),
    [
        ([_VERDICT.replace('"safe":true', '"safe":true,"safe":false')], 1, "safe"),
        ([_LEGACY, _LEGACY.replace('"safe": true', '"safe": true, "safe": false')], 2, "safe"),
        (
            [_LEGACY.replace('"steps_covered": 2', '"steps_covered": 2, "steps_covered": 9')],
            1,
            "steps_covered",
        ),
        (
            [_VERDICT.replace('"safe":true', '"safe":true,"provenance":{"judge":"a","judge":"b"}')],
            1,
            "judge",
        ),
    ],
)
def test_a_verdict_with_a_duplicate_key_is_refused(
    tmp_path: Path, lines: list[str], bad: int, key: str
) -> None:
    """msgspec keeps the last value ("safe": true, "safe": false reads as unsafe)."""
    p = _write(tmp_path / "v.jsonl", lines)
    with pytest.raises(RecordDecodeError, match=rf"v\.jsonl:{bad}: duplicate key '{key}'"):
        read_verdicts(p)


def test_a_duplicate_deep_inside_a_large_well_formed_file_is_found(tmp_path: Path) -> None:
    """The fast path decodes blocks whole: the second look must still name the line."""
    p = tmp_path / "v.jsonl"
    pol = PolicyRecord(v=1, policy={"scoring": {}}, judge="j", refusal_detector="d")
    write_verdicts(p, pol, [verdict(f"c{i}") for i in range(3000)])
    lines = p.read_bytes().split(b"\n")
    lines[2500] = lines[2500].replace(b'"safe":true', b'"safe":true,"safe":false', 1)
    p.write_bytes(b"\n".join(lines))
    with pytest.raises(RecordDecodeError, match=r"v\.jsonl:2501: duplicate key 'safe'"):
        read_verdicts(p)
    # The same file without the duplicate reads whole, every record kept.
    lines[2500] = lines[2500].replace(b'"safe":true,"safe":false', b'"safe":true', 1)
    p.write_bytes(b"\n".join(lines))
    assert len(read_verdicts(p).verdicts) == 3000


def test_a_legacy_file_as_json_dumps_writes_it_reads_fast_and_whole(tmp_path: Path) -> None:
    lines = [json.dumps(msgspec.to_builtins(legacy(f"r{i}"))) for i in range(50)]
    stream = read_verdicts(_write(tmp_path / "v.jsonl", lines))
    assert [v.case_id for v in stream.verdicts] == [f"r{i}" for i in range(50)]


@pytest.mark.parametrize("blank", [None, "", "   ", "\r", "\t "])
@pytest.mark.parametrize("native", [False, True])
def test_two_records_on_one_line_are_refused_however_the_block_reads(
    tmp_path: Path, native: bool, blank: str | None
) -> None:
    """The block decoder reads two objects on one line as two records; the line-by-line
    reader does not: a line is one record, whichever reader looks at it, also when a
    blank line in the same block (no record) makes up the count."""
    one = _VERDICT if native else _LEGACY
    lines = [one.replace('"a"' if native else '"r"', f'"c{i}"') for i in range(2000)]
    lines[1200] += lines[1201]  # one writer's line without its newline
    del lines[1201]
    if blank is not None:
        lines.insert(1500, blank)
    with pytest.raises(RecordDecodeError, match=r"v\.jsonl:1201: not valid JSON"):
        read_verdicts(_write(tmp_path / "v.jsonl", lines))
    # Blank lines between records are no records, and lose none.
    lines[1200:1201] = ["", "   "]
    if blank is not None:
        del lines[1501]
    got = read_verdicts(_write(tmp_path / "w.jsonl", lines)).verdicts
    assert [v.case_id for v in got] == [f"c{i}" for i in range(2000) if i not in (1200, 1201)]


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("next_starts", ["{", "}", '"'])
@pytest.mark.parametrize("gap", [1, 5, -3])
def test_a_record_over_two_lines_never_makes_up_for_two_on_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], native: bool, next_starts: str, gap: int
) -> None:
    """``decode_lines`` reads a record spread over two lines as one: with two records on
    one line in the same block, the counts agree. The reader, and the gate's own reading,
    still name the first bad line, whichever comes first and wherever the record is cut
    (the next line starting with ``{``, ``}`` or a key)."""
    one = _LEGACY if not native else _VERDICT.replace('"safe":true', '"safe":true,"m":{"x":1}')
    lines = [one.replace('"a"' if native else '"r"', f'"c{i}"') for i in range(2000)]
    whole = lines[1000]
    at = {"{": whole.rindex("{"), "}": len(whole) - 1, '"': whole.index('"safe"')}[next_starts]
    lines[1000:1001] = [whole[:at], whole[at:]]  # one record over two lines
    assert lines[1001].startswith(next_starts)
    two = 1001 + gap if gap > 0 else 1000 + gap
    lines[two] += lines[two + 1]  # two records on one line
    del lines[two + 1]
    first_bad = min(1001, two + 1)
    path = _write(tmp_path / "v.jsonl", lines)
    with pytest.raises(RecordDecodeError, match=rf"v\.jsonl:{first_bad}: not valid JSON"):
        read_verdicts(path)
    baseline = _write(tmp_path / "b.jsonl", [one])
    code = cli_main(["gate", "--baseline", str(baseline), "--candidate", str(path)])
    assert code == 2
    assert f"v.jsonl:{first_bad}: not valid JSON" in capsys.readouterr().err


_any_lines = msgspec.json.Decoder()


@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from("abc"), st.integers(0, 9) | st.just({}), max_size=3),
            st.sampled_from(["", "\n", " ", "\n\n"]),  # what follows the record
            st.integers(0, 40),  # where a newline is put into it, if anywhere
            st.booleans(),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_one_object_a_line_and_the_count_mean_one_record_a_line(
    records: list[tuple[dict[str, object], str, int, bool]],
) -> None:
    """Whatever the lines (records run together, cut across lines at any byte, blank
    lines between), when each line starts with ``{`` and ends with ``}`` and
    ``decode_lines`` finds as many objects as lines, each line is one object, in order."""
    text = ""
    for record, after, cut_at, cut in records:
        encoded = json.dumps(record)
        if cut:
            at = cut_at % (len(encoded) + 1)
            encoded = encoded[:at] + "\n" + encoded[at:]
        text += encoded + after
    block = (text if text.endswith("\n") else text + "\n").encode()
    lines = block.split(b"\n")
    newlines = len(lines) - 1
    try:
        decoded = _any_lines.decode_lines(block)
    except msgspec.DecodeError:
        return
    if not (files.one_object_a_line(block, newlines) and len(decoded) == newlines):
        return
    assert [msgspec.json.decode(line) for line in lines[:newlines]] == decoded


@pytest.mark.parametrize(
    ("record", "key"),
    [
        (_EP.replace('"case_id":"c"', '"case_id":"c","case_id":"d"'), "case_id"),
        (
            '{"kind":"step","v":1,"episode_id":"e","index":0,"index":1,"type":"message",'
            '"role":"user","text":"a"}',
            "index",
        ),
        (
            '{"kind":"step","v":1,"episode_id":"e","index":0,"type":"tool_call","call_id":"x",'
            '"tool":"t","args":{"to":"a","to":"b"},"fidelity":"real","shown":{"content":[]}}',
            "to",
        ),
    ],
)
def test_an_episode_record_with_a_duplicate_key_is_refused(
    tmp_path: Path, record: str, key: str
) -> None:
    lines = [_EP, record] if not record.startswith('{"kind":"episode"') else [record]
    p = _write(tmp_path / "e.jsonl", lines)
    with pytest.raises(RecordDecodeError, match=rf":{len(lines)}: duplicate key '{key}'"):
        read_episodes(p)


def test_hand_written_records_without_duplicates_still_read(tmp_path: Path) -> None:
    """Spaces, other key orders and defaults left out get the second look, and pass."""
    p = _write(
        tmp_path / "e.jsonl",
        [
            '{"case_id": "c", "episode_id": "e", "v": 1, "kind": "episode"}',
            '{"kind": "step", "v": 1, "episode_id": "e", "index": 0, "type": "message", '
            '"role": "user", "text": "a \\"quoted\\": b"}',
            '{"kind":"end","v":1,"episode_id":"e","status":"complete"}',
        ],
    )
    (ep,) = read_episodes(p)
    assert ep.complete


# ---------------------------------------------------------------- versions


@pytest.mark.parametrize("v", ["-1", "0", "1.0", '"1"', "true", "null"])
def test_a_version_that_is_not_a_positive_integer_is_refused(tmp_path: Path, v: str) -> None:
    ep = _write(tmp_path / "e.jsonl", [_EP.replace('"v":1', f'"v":{v}')])
    with pytest.raises(RecordDecodeError, match=r"e\.jsonl:1: episode record has .*'v'"):
        read_episodes(ep)
    vs = _write(tmp_path / "v.jsonl", [_VERDICT, _VERDICT.replace('"v":1', f'"v":{v}')])
    with pytest.raises(RecordDecodeError, match=r"v\.jsonl:2: verdict record has .*'v'"):
        read_verdicts(vs)


@pytest.mark.parametrize("line", [1, 2, 3])
def test_a_newer_record_in_a_legacy_file_is_refused_on_any_line(tmp_path: Path, line: int) -> None:
    """Validation does not depend on line order: a record of unknown kind with v: 99 is the
    same newer-version error on line 1 as on line 2, legacy-shaped or not."""
    for newer in (
        '{"kind":"hologram","v":99}',
        _LEGACY[:-1] + ', "kind": "hologram", "v": 99}',
    ):
        lines = [_LEGACY, _LEGACY, _LEGACY]
        lines[line - 1] = newer
        p = _write(tmp_path / "v.jsonl", lines)
        with pytest.raises(NewerVersionError, match=rf"v\.jsonl:{line}: unknown record kind"):
            read_verdicts(p)


# ---------------------------------------------------------------- deep nesting


def test_json_nested_100k_deep_is_an_error_naming_its_line(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    ep = _write(tmp_path / "e.jsonl", [_EP, _EP.replace('"case_id":"c"', f'"meta":{deep}')])
    with pytest.raises(RecordDecodeError, match=r"e\.jsonl:2: JSON nested too deeply"):
        read_episodes(ep)
    for lines in (
        [_VERDICT, _VERDICT.replace('"safe":true', f'"safe":true,"x":{deep}')],
        [_LEGACY, _LEGACY[:-1] + f', "x": {deep}}}'],
    ):
        p = _write(tmp_path / "v.jsonl", lines)
        with pytest.raises(RecordDecodeError, match=r"v\.jsonl:2: JSON nested too deeply"):
            read_verdicts(p)


# ---------------------------------------------------------------- the colon count


_LEGACY_KEYS = ("truncate_on_refusal", "truncate_on_empty_tool_result", "steps_covered")
_values = st.one_of(st.booleans(), st.none(), st.integers(0, 9))


@st.composite
def _legacy_line(draw: st.DrawFn) -> tuple[str, bool]:
    """A legacy verdict line as some writer might write it: any spacing, colons in
    strings, explicit nulls, an unknown key; with a duplicate key or not."""
    run_id = draw(st.sampled_from(["r", "suite:case", "a b", "x::y"]))
    members = [("run_id", json.dumps(run_id)), ("safe", json.dumps(draw(st.booleans())))]
    prov: list[tuple[str, str]] = []
    for key in draw(st.lists(st.sampled_from(_LEGACY_KEYS), unique=True)):
        drawn = draw(_values if key == "steps_covered" else st.one_of(st.booleans(), st.none()))
        prov.append((key, json.dumps(drawn)))
    if draw(st.booleans()):
        prov.append(("judge_version", json.dumps(draw(st.sampled_from(["j", "j:2", None])))))
    if draw(st.booleans()) or prov:
        members.append(("provenance", "{" + ", ".join(f'"{k}": {v}' for k, v in prov) + "}"))
    if draw(st.booleans()):
        members.append(("note", json.dumps(draw(st.sampled_from(["n", "a:b"])))))
    duplicated = draw(st.booleans())
    if duplicated:
        where = draw(st.sampled_from(["top", "provenance"] if prov else ["top"]))
        if where == "top":
            twice = draw(st.sampled_from(members[:2]))
            members.insert(draw(st.integers(0, len(members))), twice)
        else:
            twice = draw(st.sampled_from(prov))
            prov.insert(draw(st.integers(0, len(prov))), twice)
            members = [m for m in members if m[0] != "provenance"]
            members.append(("provenance", "{" + ", ".join(f'"{k}": {v}' for k, v in prov) + "}"))
    colon = draw(st.sampled_from([":", ": ", " : ", "\t:"]))
    comma = draw(st.sampled_from([",", ", ", " ,"]))
    return "{" + comma.join(f'"{k}"{colon}{v}' for k, v in members) + "}", duplicated


@given(st.lists(_legacy_line(), min_size=1, max_size=6))
def test_the_colon_count_never_passes_a_duplicate_key(lines: list[tuple[str, bool]]) -> None:
    """Counting colons tells a block has no duplicate key only when it has none; and the
    reader refuses a block with one, whichever check finds it."""
    block = "".join(line + "\n" for line, _ in lines).encode()
    try:
        records = legacy_fast_decoder.decode_lines(block)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return  # the fast decoder refuses it; the per-line reader names the line
    duplicated = any(dup for _, dup in lines)
    if legacy_members_distinct(records, block):
        assert not duplicated
    if duplicated:
        with pytest.raises(DecodeProblem, match="duplicate key"):
            _decode_each(line for line, _ in lines)


def _decode_each(lines: Iterable[str]) -> None:
    for line in lines:
        decode_verdict_record(line.encode())


def test_the_colon_count_takes_a_file_as_json_dumps_writes_it() -> None:
    lines = [json.dumps(msgspec.to_builtins(legacy(f"r{i}"))) for i in range(50)]
    block = "".join(line + "\n" for line in lines).encode()
    assert legacy_members_distinct(legacy_fast_decoder.decode_lines(block), block)


def test_verdicts_share_one_read_only_empty_unknown_provenance() -> None:
    """Decoding allocates no dict per verdict (see NO_UNKNOWN_KEYS), and the one they
    share cannot be changed through any of them."""
    records = legacy_fast_decoder.decode_lines((_LEGACY + "\n").encode() * 3)
    assert records[0].unknown_provenance is records[2].unknown_provenance is NO_UNKNOWN_KEYS
    assert records[0].unknown_provenance == {}
    with pytest.raises(TypeError, match="read-only"):
        records[0].unknown_provenance["x"] = 1
    with pytest.raises(TypeError, match="read-only"):
        records[0].unknown_provenance.update(x=1)
    assert NO_UNKNOWN_KEYS == {}
    assert msgspec.json.decode(msgspec.json.encode(records[0]))["unknown_provenance"] == {}


@pytest.mark.parametrize("kept", [4096, 2])
def test_a_streams_verdicts_share_one_provenance_object_a_kind(
    tmp_path: Path, kept: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Equal provenance decodes to one shared object (memory, and the gate's cache):
    nothing else changes, whatever the kinds' member counts, past the kinds kept too."""
    monkeypatch.setattr(legacy_blocks, "KEPT", kept)
    judges = ["j1", "j2", None]  # None: a field left out, one member fewer
    lines = []
    for i in range(12_000):  # two read blocks
        prov: dict[str, object] = {"truncate_on_refusal": i % 2 == 0, "steps_covered": i % 4}
        if (judge := judges[i % 3]) is not None:
            prov["judge_version"] = judge
        lines.append(json.dumps({"run_id": f"r{i}", "safe": i % 5 != 0, "provenance": prov}))
    got = read_verdicts(_write(tmp_path / "v.jsonl", lines)).verdicts
    assert [msgspec.json.encode(v.provenance) for v in got] == [
        msgspec.json.encode(legacy_fast_decoder.decode(line.encode()).provenance) for line in lines
    ]
    assert [(v.case_id, v.safe) for v in got] == [(f"r{i}", i % 5 != 0) for i in range(12_000)]
    distinct = {id(v.provenance) for v in got}
    if kept > 12:
        assert len(distinct) == 12  # 2 x 4 x 3 kinds, one object each
    else:
        assert 12 < len(distinct) < 12_000  # shared within what was kept
    # A duplicate key is still found, whichever count the kinds imply.
    lines[7000] = lines[7000].replace('"safe": ', '"safe": true, "safe": ', 1)
    with pytest.raises(RecordDecodeError, match=r"w\.jsonl:7001: duplicate key 'safe'"):
        read_verdicts(_write(tmp_path / "w.jsonl", lines))
