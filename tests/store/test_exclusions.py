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
