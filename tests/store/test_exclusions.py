"""Exclusion files: every accepted form reads, and a case without a reason is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from litmus_sandbox import RecordDecodeError
from litmus_sandbox._store.exclusions import load_exclusions


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("x.txt", "# known issues\nc1  tool flaky (#12)\nsuite:c2\tjudge under review\n"),
        ("x.txt", "c1: tool flaky (#12)\nsuite:c2 judge under review\n"),
        ("x.txt", "c1,tool flaky (#12)\nsuite:c2, judge under review\n"),
        ("x.csv", "case_id,reason\nc1,tool flaky (#12)\nsuite:c2,judge under review\n"),
        (
            "x.jsonl",
            '{"case_id":"c1","reason":"tool flaky (#12)"}\n{"case_id":"suite:c2","reason":"judge under review"}\n',
        ),
        ("x.json", '{"c1": "tool flaky (#12)", "suite:c2": "judge under review"}'),
        ("x.toml", '[exclude]\nc1 = "tool flaky (#12)"\n"suite:c2" = "judge under review"\n'),
    ],
)
def test_every_form_reads_the_same(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_exclusions(path) == {"c1": "tool flaky (#12)", "suite:c2": "judge under review"}


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("x.txt", "c1 ok\nc2\n", ":2:"),
        ("x.csv", "c1,ok\nc2,\n", ":2:"),
        ("x.jsonl", '{"case_id":"c1"}\n', ":1:"),
        ("x.json", "[1]", "object"),
        ("x.toml", "[skip]\n", "unknown keys"),
    ],
)
def test_a_case_without_a_reason_is_an_error(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RecordDecodeError, match=where):
        load_exclusions(path)


_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("x.jsonl", '{"case_id": null, "reason": "r"}\n', ":1: case_id must be a string, not null"),
        ("x.jsonl", 'c\n{"case_id": [1], "reason": "r"}\n', ":1: not valid JSON"),
        ("x.jsonl", '{"case_id": [1], "reason": "r"}\n', ":1: case_id must be a string, not list"),
        ("x.jsonl", '{"case_id": {}, "reason": "r"}\n', ":1: case_id must be a string, not dict"),
        ("x.jsonl", '{"case_id": true, "reason": "r"}\n', ":1: case_id must be a string, not bool"),
        ("x.jsonl", '{"case_id": "", "reason": "r"}\n', ":1: case_id is empty"),
        (
            "x.jsonl",
            '{"case_id": "a", "reason": "r"}\n{"case_id": ' + "9" * 5000 + ', "reason": "r"}\n',
            ":2: case_id is a 5000-digit integer",
        ),
        (
            "x.jsonl",
            '{"case_id": "a", "reason": "r", "reason": "s"}\n',
            ":1: duplicate key 'reason'",
        ),
        ("x.jsonl", '{"case_id": "a", "reason": ' + _DEEP + "}\n", ":1: nested too deeply"),
        ("x.json", '{"a": "r",\n "b": ' + _DEEP + "}", ":2: nested too deeply"),
        ("x.json", '{"a": "r",\n "a": "s"}', ":2: duplicate key 'a'"),
        ("x.toml", "[exclude]\na = " + _DEEP + "\n", ":2: nested too deeply"),
        ("x.csv", "a,ok\nb," + "x" * 200_000 + "\n", ":2: not valid CSV: field larger"),
        ("x.txt", "a ok\nb \xff\n", ":2: not UTF-8 text"),
    ],
)
def test_a_hostile_exclusion_file_is_one_clear_error(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    """Never a traceback, never a case named "None"."""
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8", "surrogateescape").replace(b"\xc3\xbf", b"\xff"))
    with pytest.raises(RecordDecodeError) as info:
        load_exclusions(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_an_integer_case_id_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"case_id": 17, "reason": "numbered cases"}\n')
    assert load_exclusions(path) == {"17": "numbered cases"}
