"""Reports written as the gate decides: the same bytes as the whole report rendered at
once, whatever the chunks and however little of a rank stays in memory."""

from __future__ import annotations

import io
from typing import Any

import msgspec
from factories import legacy, verdict
from hypothesis import given
from hypothesis import strategies as st
from msgspec.structs import replace

from litmus_sandbox import StepVerdict, gate, reports
from litmus_sandbox._core.suite import stream_gate
from litmus_sandbox.reports import _json
from litmus_sandbox.reports._json_cases import case_json

_contradicted = (StepVerdict(index=0, safe=True, contradictions=("escape",)),)
_one = st.one_of(
    st.builds(
        lambda k, safe, judge: legacy(k, safe, judge_version=judge),
        st.sampled_from("abcdef"),
        st.booleans(),
        st.sampled_from(["j1", "j1", None]),
    ),
    st.builds(
        lambda k, safe, judge, odd: (
            replace(verdict(k, safe, judge=judge), steps=_contradicted)
            if odd
            else verdict(k, safe, judge=judge)
        ),
        st.sampled_from("abcdef"),
        st.booleans(),
        st.sampled_from(["judgeA", "judgeA", "judgeB"]),
        st.booleans(),
    ),
)
_sides = st.lists(_one, max_size=10)
_flags = st.fixed_dictionaries({"allow_unresolved": st.booleans(), "strict_oracle": st.booleans()})


@given(_sides, _sides)
def test_a_case_encodes_as_its_dict(b: list[Any], c: list[Any]) -> None:
    for case in gate(b, c, exclusions={"a": "why"}).cases:
        assert case_json(case) == msgspec.json.encode(reports.case_to_dict(case))


@given(_sides, _sides, _flags)
def test_the_json_report_is_the_whole_object_encoded_at_once(
    b: list[Any], c: list[Any], flags: dict[str, bool]
) -> None:
    report = gate(b, c, exclusions={"a": "why"})
    whole = reports.to_dict(
        report,
        warnings=["w"],
        allow_unresolved=flags["allow_unresolved"],
        strict_oracle=flags["strict_oracle"],
    )
    expected = msgspec.json.format(msgspec.json.encode(whole), indent=2).decode()
    assert reports.render_json(report, warnings=["w"], **flags) == expected


@given(_sides, _sides, _flags, st.sampled_from(sorted(reports.FORMATS)))
def test_a_report_streamed_in_chunks_is_the_report_rendered_whole(
    b: list[Any], c: list[Any], flags: dict[str, bool], fmt: str
) -> None:
    """Cases fed one at a time, ranks spilled to files past 16 bytes: the same bytes."""
    report = gate(b, c)
    expected = reports.render(report, fmt, warnings=["w"], **flags) + "\n"
    out = io.BytesIO()
    with reports.writer(fmt, out, spool_memory=16, **flags) as w:
        for case in report.cases:
            w.write([case])
        w.finish(report.summary(), ["w"])
    if fmt == "jsonl":  # gate order, not report order: the same lines
        assert sorted(out.getvalue().decode().splitlines()) == sorted(expected.splitlines())
    else:
        assert out.getvalue().decode() == expected


@given(_sides, _sides, st.sampled_from(sorted(reports.FORMATS)))
def test_the_gate_feeds_a_writer_the_report_it_renders(
    b: list[Any], c: list[Any], fmt: str
) -> None:
    """stream_gate into a writer (plain passes only counted where a format does not list
    them) writes what render writes for gate's report."""
    out = io.BytesIO()
    with reports.writer(fmt, out) as w:
        summary = stream_gate(b, c, w)
        w.finish(summary)
    assert out.getvalue().decode() == reports.render(gate(b, c), fmt) + "\n"


@given(_sides, _sides, st.integers(1, 3))
def test_the_plan_written_a_part_at_a_time_is_the_plan(
    b: list[Any], c: list[Any], part: int
) -> None:
    """The re-baseline plan's lists (as long as the suite at worst) go out a part at a
    time, in the JSON report and the JSON Lines summary: the same bytes."""
    report = gate(b, c)
    whole = reports.to_dict(report)
    expected = msgspec.json.format(msgspec.json.encode(whole), indent=2).decode()
    summary_line = msgspec.json.encode(
        {"kind": "summary", **{k: v for k, v in whole.items() if k != "cases"}}
    )
    old = _json._PART
    _json._PART = part
    try:
        assert reports.render_json(report) == expected
        assert reports.render_jsonl(report).splitlines()[-1] == summary_line.decode()
    finally:
        _json._PART = old


_odd_ids = st.text(
    alphabet=st.sampled_from(["a", "é", '"', "\\", "\n", "\x00", "😀", "/", " "]), max_size=6
)


@given(
    st.lists(st.tuples(_odd_ids, st.booleans(), st.sampled_from(["j1", None])), max_size=12),
    st.lists(st.tuples(_odd_ids, st.booleans(), st.sampled_from(["j1", "j2"])), max_size=12),
    _flags,
)
def test_legacy_cases_encode_by_their_kept_rest_as_whole(
    b: list[tuple[str, bool, str | None]],
    c: list[tuple[str, bool, str]],
    flags: dict[str, bool],
) -> None:
    """Cases of one legacy verdict a side are written as their case id and the rest of
    their object kept per kind: the same bytes, whatever the case id holds."""
    report = gate(
        [legacy(k, s, judge_version=j) for k, s, j in b],
        [legacy(k, s, judge_version=j) for k, s, j in c],
    )
    whole = reports.to_dict(
        report,
        warnings=["w"],
        allow_unresolved=flags["allow_unresolved"],
        strict_oracle=flags["strict_oracle"],
    )
    expected = msgspec.json.format(msgspec.json.encode(whole), indent=2).decode()
    for _ in range(2):  # the second time, from what was kept
        assert reports.render_json(report, warnings=["w"], **flags) == expected
        lines = reports.render_jsonl(report, warnings=["w"], **flags).splitlines()
        cases = [msgspec.json.decode(line) for line in lines[:-1]]
        assert [{k: v for k, v in x.items() if k != "kind"} for x in cases] == [
            reports.case_to_dict(case) for case in report.cases
        ]
        assert lines[:-1] == [
            '{"kind":"case",' + case_json(case).decode()[1:] for case in report.cases
        ]


@given(
    st.lists(st.tuples(_odd_ids, st.booleans(), st.sampled_from(["j1", None])), max_size=12),
    st.lists(st.tuples(_odd_ids, st.booleans(), st.sampled_from(["j1", "j2"])), max_size=12),
)
def test_legacy_rows_of_the_table_are_the_rows_rendered_one_by_one(
    b: list[tuple[str, bool, str | None]], c: list[tuple[str, bool, str]]
) -> None:
    """The rest of a legacy case's row, kept per kind, is the row rendered for it."""
    from litmus_sandbox.reports import _table

    report = gate(
        [legacy(k, s, judge_version=j) for k, s, j in b],
        [legacy(k, s, judge_version=j) for k, s, j in c],
    )
    kept = reports.render(report, "table")
    again = reports.render(report, "table")  # every row from what was kept
    kind, most = _table._legacy_kind, _table._SHARED_ROWS
    try:
        _table._legacy_kind = lambda case: None  # none kept
        assert kept == again == reports.render(report, "table")
        _table._legacy_kind, _table._SHARED_ROWS = kind, 1  # one kept, the rest in full
        assert reports.render(report, "table") == kept
    finally:
        _table._legacy_kind, _table._SHARED_ROWS = kind, most


def test_every_text_format_names_the_exclusions_that_named_no_case() -> None:
    import xml.etree.ElementTree as ET

    report = gate([verdict("c1")], [verdict("c1")], exclusions={"ghost": "gone", "c1": "why"})
    assert report.unknown_exclusions == ("ghost",)
    want = "exclusions naming no case: ghost"
    assert want in reports.render_table(report)
    assert want in reports.render_markdown(report)
    err = ET.fromstring(reports.render_junit(report)).find("system-err")
    assert err is not None
    assert want in (err.text or "")
