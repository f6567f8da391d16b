"""The gate's join engine (DuckDB): the cases, in gate order, and the summary that the
in-memory join gives; its spill folder private and removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

from factories import legacy, verdict
from gate_sides import Kept, _case_by_case, _plain, _same_case, _side
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox._core.runs import LegacyRun
from litmus_sandbox._core.suite import gate_lined_up, stream_gate
from litmus_sandbox._model.codec import decode_verdict_record
from litmus_sandbox._store import engine_pages, engine_sql
from litmus_sandbox._store.engine import DEFAULT_MEMORY_BUDGET, DuckJoin


def _engine(b: list[Any], c: list[Any], sink: Kept, exclusions: dict[str, str]) -> Any:
    """The engine's gate; any legacy cases in a row make a run (these suites are small)."""
    with (
        mock.patch.object(engine_pages, "MIN_RUN", 1),
        DuckJoin(memory_budget=1 << 26, exclusions=exclusions) as join,
    ):
        join.add_verdicts(0, b)
        join.add_verdicts(1, c)
        return gate_lined_up(join, sink, exclusions=exclusions)


def _check(b: list[Any], c: list[Any], exclusions: dict[str, str]) -> None:
    expected = _case_by_case(b, c, exclusions)
    reference = stream_gate(b, c, Kept(), exclusions=exclusions)
    kept = Kept()
    assert _engine(b, c, kept, exclusions) == reference
    assert kept.cases == expected
    quiet = Kept(plain=False)
    assert _engine(b, c, quiet, exclusions) == reference
    assert quiet.cases == [r for r in expected if r.outcome != "PASS" or r.reasons or not _plain(r)]


@settings(max_examples=60, deadline=None)
@given(_side, _side, st.sets(st.sampled_from(["a", "c", "zz"])))
def test_the_engine_decides_as_compare_case(b: list[Any], c: list[Any], excluded: set[str]) -> None:
    """Epochs, cases on one side only, exclusions: as compare_case decides case by case,
    in gate order, with and without the plain passes."""
    _check(b, c, dict.fromkeys(excluded, "why"))


@settings(max_examples=60, deadline=None)
@given(_side, st.data())
def test_the_engine_over_the_same_cases_shuffled(b: list[Any], data: st.DataObject) -> None:
    c = data.draw(st.permutations([data.draw(_same_case(v)) for v in b]))
    _check(b, c, {})


@settings(max_examples=25, deadline=None)
@given(_side, _side, st.sets(st.sampled_from(["a", "c", "zz"])), st.integers(2, 4))
def test_the_engine_in_parts_decides_as_compare_case(
    b: list[Any], c: list[Any], excluded: set[str], parts: int
) -> None:
    """The group-by on the case id in parts (as past DuckDB's memory): the same cases,
    each once, in gate order."""
    with mock.patch.object(engine_sql, "parts", return_value=parts):
        _check(b, c, dict.fromkeys(excluded, "why"))


@given(st.integers(0, 10**9), st.integers(64 << 20, 1 << 34), st.booleans())
def test_the_group_by_runs_whole_while_it_fits_and_in_parts_past_that(
    rows: int, limit: int, every_case: bool
) -> None:
    cost = engine_sql.ROW_BYTES_EVERY_CASE if every_case else engine_sql.ROW_BYTES
    parts = engine_sql.parts(rows, limit, every_case=every_case)
    assert parts >= 1
    assert (parts == 1) == (rows * cost <= limit)
    assert rows * cost <= parts * limit  # each part fits, on the whole
    assert engine_sql.parts(rows * 2, limit, every_case=every_case) >= parts
    assert engine_sql.parts(rows, limit, every_case=True) >= engine_sql.parts(rows, limit)


def test_ten_million_pairs_group_in_four_or_six_parts_at_the_default_budget() -> None:
    """The measured cases (see ``ROW_BYTES``): 20M verdicts, a 512 MiB limit."""
    limit = DEFAULT_MEMORY_BUDGET // 2
    assert engine_sql.parts(20_000_000, limit) == 4
    assert engine_sql.parts(20_000_000, limit, every_case=True) == 6
    assert engine_sql.parts(2_000_000, limit, every_case=True) == 1


def test_legacy_cases_come_as_runs_and_the_others_as_chunks_between() -> None:
    """Cases of one legacy verdict a side come as runs (decided once per kind), when
    there are enough of them in a row; a case with epochs, one kept whole, an excluded
    one and a run too short come as chunks, in gate order."""
    b: list[Any] = [legacy(f"k{i}", i % 3 != 0) for i in range(13)]
    b += [legacy("k4"), verdict("n1")]
    c: list[Any] = [legacy(f"k{i}", i % 2 != 0, judge_version="j2") for i in range(13)]
    c.append(verdict("n1"))
    with (
        mock.patch.object(engine_pages, "MIN_RUN", 2),
        DuckJoin(memory_budget=1 << 26, exclusions={"k7": "why", "k9": "why"}) as join,
    ):
        join.add_verdicts(0, b)
        join.add_verdicts(1, c)
        got = list(join.chunks(plain=True))
    parts = [(type(p).__name__, p.keys if isinstance(p, LegacyRun) else p[0]) for p in got]
    assert parts == [
        ("LegacyRun", ["k0", "k1", "k2", "k3"]),
        ("tuple", ["k4"]),  # two baseline verdicts: epochs
        ("LegacyRun", ["k5", "k6"]),
        ("tuple", ["k7", "k8", "k9"]),  # excluded, a run too short, excluded
        ("LegacyRun", ["k10", "k11", "k12"]),
        ("tuple", ["n1"]),  # kept whole
    ]
    for run in (p for p in got if isinstance(p, LegacyRun)):  # each case's kind its sides
        for i, key in enumerate(run.keys):
            bv, cv = b[int(key[1:])], c[int(key[1:])]
            assert run.sides[run.kinds[i]] == (bv.safe, bv.provenance, cv.safe, cv.provenance)
            assert run.kinds[run.first[run.kinds[i]]] == run.kinds[i]
            assert run.first[run.kinds[i]] <= i


def test_verdicts_it_cannot_make_again_come_back_whole() -> None:
    """A legacy verdict with a provenance key this version does not know (read into a
    subclass), native verdicts, a mixed pair: kept whole, decided as in memory."""
    odd = decode_verdict_record(
        b'{"run_id": "case-99", "safe": true, "provenance": {"truncate_on_refusal": false, '
        b'"truncate_on_empty_tool_result": false, "steps_covered": 3, '
        b'"judge_version": "j", "new_key": 1}}'
    )
    same: list[Any] = [legacy(f"case-{i:02d}") for i in range(40)]
    b: list[Any] = [*same, odd, verdict("n1"), legacy("m1")]
    c: list[Any] = [*same[::-1], legacy("case-99"), verdict("n1", safe=False), verdict("m1")]
    kept = Kept()
    summary = _engine(b, c, kept, {})
    assert summary == stream_gate(b, c, Kept())
    assert kept.cases == _case_by_case(b, c, {})
    assert summary.reasons.get("unknown_provenance") == 1


def test_the_spill_folder_is_private_and_removed(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with DuckJoin(memory_budget=1) as join:
        (folder,) = os.listdir(tmp_path)
        assert oct((tmp_path / folder).stat().st_mode & 0o777) == "0o700"
        join.add_verdicts(0, [legacy("a")])
    assert os.listdir(tmp_path) == []


_SETTING = """
from litmus_sandbox._model.records import LegacyVerdict
from litmus_sandbox._store.engine import DEFAULT_MEMORY_BUDGET, DuckJoin
with DuckJoin(memory_budget=1 << 26) as join:
    join.add_verdicts(0, [LegacyVerdict(run_id="a", safe=True)])
    print(join._db.execute("SELECT current_setting('enable_progress_bar')").fetchall())
"""


def test_duckdb_never_draws_its_progress_bar_where_the_report_goes() -> None:
    """DuckDB draws a bar on standard output for a query past two seconds (a gate at
    ten million pairs has several): the report goes there too. (In a process of its own:
    DuckDB leaves the bar off by default under pytest.)"""
    done = subprocess.run(
        [sys.executable, "-c", _SETTING], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == "[(False,)]\n"
