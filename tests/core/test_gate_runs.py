"""Runs of legacy cases (``_core/runs.py``): decided once per kind and written as case
ids, they give the cases, the summary and the report bytes that the same cases decided
and written one by one give."""

from __future__ import annotations

import io
from itertools import pairwise
from typing import Any

import pytest
from factories import legacy
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox._core.decider import CaseDecider
from litmus_sandbox._core.runs import DecidedRun, LegacyRun
from litmus_sandbox._core.tally import SuiteTally
from litmus_sandbox._model.records import LegacyVerdict
from litmus_sandbox.reports import FORMATS, _json_cases, _table, writer
from litmus_sandbox.reports._html import HtmlWriter

_side = st.builds(
    lambda safe, judge, cut, covered: legacy(
        "x", safe, judge_version=judge, truncate_on_refusal=cut, steps_covered=covered
    ),
    st.booleans(),
    st.sampled_from(["j1", "j1", "j2", None]),
    st.booleans(),
    st.integers(1, 2),
)
# Case ids as recorded: any text, hostile included (controls, escapes, markup, long).
_ids = st.one_of(
    st.text(min_size=1, max_size=12),
    st.sampled_from(["\x1b[31mred", "![x](http://e/x)", "<b>&amp;</b>", "a\nb", "\u202eevil"]),
    st.text(alphabet="xyz", min_size=70, max_size=90),
)
_cases = st.lists(st.tuples(_ids, _side, _side), max_size=40, unique_by=lambda t: t[0])


def _run(cases: list[tuple[str, LegacyVerdict, LegacyVerdict]]) -> LegacyRun:
    """The cases as a run, each distinct pair of sides a kind."""
    kinds: list[int] = []
    sides: list[Any] = []
    first: list[int] = []
    known: dict[Any, int] = {}
    for i, (_, b, c) in enumerate(cases):
        kind = (b.safe, b.provenance, c.safe, c.provenance)
        if kind not in known:
            known[kind] = len(sides)
            sides.append(kind)
            first.append(i)
        kinds.append(known[kind])
    return LegacyRun(keys=[k for k, _, _ in cases], kinds=kinds, sides=sides, first=first)


def _parts(cases: list[Any], cuts: list[int]) -> list[list[Any]]:
    edges = sorted({0, len(cases), *(c % (len(cases) + 1) for c in cuts)})
    return [cases[s:e] for s, e in pairwise(edges)]


@settings(max_examples=60)
@given(
    _cases,
    st.lists(st.integers(0, 40), max_size=3),
    st.booleans(),
    st.data(),
)
def test_a_run_decides_as_its_cases_one_by_one(
    cases: list[Any], cuts: list[int], plain: bool, data: st.DataObject
) -> None:
    """The same results in order (the plain passes only counted without ``plain``), the
    same summary and re-baseline plan; a run holding an excluded case is decided as a
    chunk."""
    ids = [k for k, _, _ in cases]
    excluded = data.draw(st.sets(st.sampled_from(ids))) if ids else set()
    recorded = data.draw(st.sets(st.sampled_from(ids))) if ids else set()
    exclusions = dict.fromkeys(excluded, "why")
    recordings: dict[str, int | None] = dict.fromkeys(recorded, 3)
    one = CaseDecider(SuiteTally(recordings), exclusions, recordings, plain=plain)
    two = CaseDecider(SuiteTally(recordings), exclusions, recordings, plain=plain)
    want: list[Any] = []
    got: list[Any] = []
    for part in _parts(cases, cuts):
        run = _run(part)
        want.extend(one.decide(*run.chunk()))
        decided = two.decide_run(run)
        if isinstance(decided, DecidedRun):
            assert not excluded.intersection(run.keys)
            assert decided.handed == len(decided.expand())
            got.extend(decided.expand())
        else:
            assert excluded.intersection(run.keys)
            got.extend(decided)
    assert got == want
    assert two.tally.summary(two.unknown_exclusions()) == one.tally.summary(
        one.unknown_exclusions()
    )


def _report(fmt: str, cases: list[Any], cuts: list[int], *, runs: bool) -> bytes:
    """The report of ``cases`` in ``fmt``, its runs written as runs or as results."""
    out = io.BytesIO()
    sink = HtmlWriter(out) if fmt == "html" else writer(fmt, out)
    decider = CaseDecider(SuiteTally({}), {}, {}, plain=sink.plain)
    with sink:
        for part in _parts(cases, cuts):
            decided = decider.decide_run(_run(part))
            assert isinstance(decided, DecidedRun)
            if runs:
                sink.write_run(decided)
            else:
                sink.write(decided.expand())
        sink.finish(decider.tally.summary(), ["a warning"])
    return out.getvalue()


@settings(max_examples=25, deadline=None)
@given(_cases, st.lists(st.integers(0, 40), max_size=3))
@pytest.mark.parametrize("fmt", [*FORMATS, "html"])
def test_a_run_is_written_as_its_cases_one_by_one(
    fmt: str, cases: list[Any], cuts: list[int]
) -> None:
    """Every format writes a run's cases as the same bytes as those cases given one by
    one: hostile case ids made inert as they are, in gate order within each rank."""
    assert _report(fmt, cases, cuts, runs=True) == _report(fmt, cases, cuts, runs=False)


@settings(max_examples=10, deadline=None)
@given(_cases)
@pytest.mark.parametrize("fmt", ["table", "json", "jsonl"])
def test_a_run_past_the_kinds_kept_is_written_whole(fmt: str, cases: list[Any]) -> None:
    """Past the kinds a format keeps (one, here), a run's cases are written in full: the
    same bytes."""
    whole = _report(fmt, cases, [], runs=False)
    rows, kinds = _table._SHARED_ROWS, _json_cases._KEPT_KINDS
    try:
        _table._SHARED_ROWS = _json_cases._KEPT_KINDS = 1
        assert _report(fmt, cases, [], runs=True) == whole
    finally:
        _table._SHARED_ROWS, _json_cases._KEPT_KINDS = rows, kinds


def test_a_run_needs_a_kind_for_each_case() -> None:
    b = legacy("a")
    with pytest.raises(ValueError, match="a kind for each case id"):
        LegacyRun(
            keys=["a", "b"], kinds=[0], sides=[(True, b.provenance, True, b.provenance)], first=[0]
        )


def test_the_plan_lists_a_runs_cases_in_gate_order() -> None:
    """Cases of two kinds with the same remedy, interleaved: the re-baseline plan lists
    them in gate order, not kind by kind."""
    cases = [
        (k, legacy(k, safe, steps_covered=1), legacy(k, True, steps_covered=2))
        for k, safe in (("a", True), ("b", False), ("c", True), ("d", False))
    ]
    decider = CaseDecider(SuiteTally({}), {}, {})
    assert isinstance(decider.decide_run(_run(cases)), DecidedRun)
    plan = decider.tally.summary().rebaseline_plan
    assert [e.case_id for e in plan.rerun_baseline] == ["a", "b", "c", "d"]
