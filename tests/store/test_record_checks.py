"""Malformed records: duplicate keys, bad versions, deep nesting."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from factories import legacy, verdict

from litmus_sandbox import (
    NewerVersionError,
    PolicyRecord,
    RecordDecodeError,
    read_episodes,
    read_verdicts,
    write_verdicts,
)

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
