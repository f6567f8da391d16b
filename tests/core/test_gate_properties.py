"""Gate invariants, checked with hypothesis against the reference report's own rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from factories import legacy, verdict
from gate_sides import Kept, _case_by_case, _plain, _same_case, _side
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import RecorderId, compare_case, gate
from litmus_sandbox._core.suite import stream_gate

COMPARED = {"PASS", "IMPROVEMENT", "REGRESSION"}


# The reference's gate, as published in the incident report: the oracle for legacy pairs.
class _Mismatch(RuntimeError):
    pass


@dataclass(frozen=True)
class _Prov:
    truncate_on_refusal: bool
    truncate_on_empty_tool_result: bool
    steps_covered: int
    judge_version: str


def _reference_gate(b_safe: bool, b: _Prov, c_safe: bool, c: _Prov) -> str:
    try:
        if b.judge_version != c.judge_version:
            raise _Mismatch
        if b.truncate_on_refusal != c.truncate_on_refusal:
            raise _Mismatch
        if b.truncate_on_empty_tool_result != c.truncate_on_empty_tool_result:
            raise _Mismatch
        if b.steps_covered != c.steps_covered:
            raise _Mismatch
    except _Mismatch:
        return "NEEDS_REBASELINE"
    return "REGRESSION" if b_safe and not c_safe else "PASS"


legacy_prov = st.builds(
    _Prov,
    truncate_on_refusal=st.booleans(),
    truncate_on_empty_tool_result=st.booleans(),
    steps_covered=st.integers(0, 4),
    judge_version=st.sampled_from(["j1", "j2"]),
)


@given(legacy_prov, legacy_prov, st.booleans(), st.booleans(), st.booleans())
def test_legacy_pairs_agree_with_reference(
    b: _Prov, c: _Prov, b_safe: bool, c_safe: bool, same: bool
) -> None:
    """Equal provenance: the reference's answer, except unsafe->safe is IMPROVEMENT."""
    if same:
        c = b
    ours = compare_case(
        "case", [legacy(safe=b_safe, **vars(b))], [legacy(safe=c_safe, **vars(c))]
    ).outcome
    ref = _reference_gate(b_safe, b, c_safe, c)
    if ref == "PASS" and not b_safe and c_safe:
        assert ours == "IMPROVEMENT"
    else:
        assert ours == ref


# Mutations that make a native pair's provenance differ (each must be refused).
MUTATIONS: dict[str, dict[str, Any]] = {
    "judge": {"judge": "judgeB"},
    "refusal_flag": {"truncate_on_refusal": True, "steps_covered": 2},
    "empty_flag": {"truncate_on_empty_tool_result": True, "steps_covered": 2},
    "recorder": {"recorder": RecorderId(name="litmus-sandbox", measurement_version="2")},
    "recording_truncated": {"recording_truncated": True},
    "incomplete": {"episode_complete": False},
    "fallback": {"fallback_judge": True},
    "tool_mode": {"tool_modes": {"send_email": "stub"}},
    "coverage_slack": {"steps_covered": 3},
    "unknown_judge": {"judge": None},
}


@given(
    st.sets(st.sampled_from(sorted(MUTATIONS)), min_size=1),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_never_compares_across_differing_provenance(
    mutations: set[str], on_candidate: bool, b_safe: bool, c_safe: bool
) -> None:
    changes: dict[str, Any] = {}
    for m in sorted(mutations):
        changes.update(MUTATIONS[m])
    b = verdict(safe=b_safe, **({} if on_candidate else changes))
    c = verdict(safe=c_safe, **(changes if on_candidate else {}))
    result = compare_case("case", [b], [c])
    assert result.outcome not in COMPARED
    assert result.reasons
    assert all(r.remedy is not None for r in result.reasons)


@given(st.booleans(), st.booleans(), st.integers(1, 8), st.integers(1, 8))
def test_equal_scoring_provenance_compares_whatever_the_lengths(
    b_safe: bool, c_safe: bool, b_len: int, c_len: int
) -> None:
    b = verdict(safe=b_safe, steps_recorded=b_len, steps_covered=b_len)
    c = verdict(safe=c_safe, steps_recorded=c_len, steps_covered=c_len)
    expected = "PASS" if b_safe == c_safe else ("REGRESSION" if b_safe else "IMPROVEMENT")
    assert compare_case("case", [b], [c]).outcome == expected


@given(_side, _side, st.sets(st.sampled_from(["a", "c", "zz"])))
def test_suite_gate_equals_case_by_case_compare(
    b: list[Any], c: list[Any], excluded: set[str]
) -> None:
    """The suite gate's fast paths decide every case exactly as compare_case does."""
    exclusions = dict.fromkeys(excluded, "why")
    report = gate(b, c, exclusions=exclusions)

    def key(v: Any) -> str:
        return str(v.case_id)

    order = list(dict.fromkeys([key(v) for v in b] + [key(v) for v in c]))
    expected = [
        compare_case(
            k,
            [v for v in b if key(v) == k],
            [v for v in c if key(v) == k],
            exclusion=exclusions.get(k),
        )
        for k in order
    ]
    assert list(report.cases) == expected
    assert sum(report.counts.values()) == len(order)


@given(_side, st.data(), st.sets(st.sampled_from(["a", "c", "zz"])))
def test_suite_gate_over_the_same_cases_in_any_order(
    b: list[Any], data: st.DataObject, excluded: set[str]
) -> None:
    """A candidate over the baseline's cases, in the same order (no join) or another one,
    gates as compare_case decides case by case, duplicates (epochs) included."""
    c = [data.draw(_same_case(v)) for v in b]
    if data.draw(st.booleans(), label="permuted"):
        c = data.draw(st.permutations(c))
    exclusions = dict.fromkeys(excluded, "why")
    report = gate(b, c, exclusions=exclusions)
    assert list(report.cases) == _case_by_case(b, c, exclusions)
    assert report.unknown_exclusions == tuple(
        sorted(k for k in excluded if k not in {v.case_id for v in b})
    )


# ---------------------------------------------------------------- streaming paths


def _check_every_path(b: list[Any], c: list[Any], exclusions: dict[str, str]) -> None:
    expected = _case_by_case(b, c, exclusions)
    report = gate(b, c, exclusions=exclusions)
    assert list(report.cases) == expected
    still = [r for r in expected if r.outcome == "PASS" and not all(v.safe for v in r.candidate)]
    assert report.statistics.still_unsafe == len(still)
    assert all(not all(v.safe for v in r.baseline) for r in still)
    kept = Kept()
    summary = stream_gate(b, c, kept, exclusions=exclusions)
    assert kept.cases == expected
    assert summary == report.summary()
    quiet = Kept(plain=False)
    assert stream_gate(b, c, quiet, exclusions=exclusions) == summary
    assert quiet.cases == [r for r in expected if r.outcome != "PASS" or r.reasons or not _plain(r)]


@given(_side, _side, st.sets(st.sampled_from(["a", "c", "zz"])))
def test_every_streaming_path_decides_as_compare_case(
    b: list[Any], c: list[Any], excluded: set[str]
) -> None:
    """The streaming gate gives the cases, in order, and the summary that compare_case
    and gate give, epochs included, with and without the plain passes."""
    _check_every_path(b, c, dict.fromkeys(excluded, "why"))


@given(_side, st.data(), st.sets(st.sampled_from(["a", "c", "zz"])))
def test_every_streaming_path_over_the_same_cases(
    b: list[Any], data: st.DataObject, excluded: set[str]
) -> None:
    """The same cases on both sides, in the same order, sorted (cases missing on one
    side included) or shuffled."""
    c = [data.draw(_same_case(v)) for v in b]
    how = data.draw(st.sampled_from(["same", "sorted", "permuted", "sorted, some dropped"]))
    if how == "sorted":
        b, c = sorted(b, key=_key), sorted(c, key=_key)
    elif how == "permuted":
        c = data.draw(st.permutations(c))
    elif how == "sorted, some dropped":
        b = sorted(b, key=_key)
        c = sorted((v for v in c if data.draw(st.booleans())), key=_key)
    _check_every_path(b, c, dict.fromkeys(excluded, "why"))


def _key(v: Any) -> str:
    return str(v.case_id)


_legacy_pair_side = st.builds(
    lambda safe, judge, cut, covered, unknown: msgspec.structs.replace(
        legacy("x", safe, judge_version=judge, truncate_on_refusal=cut, steps_covered=covered),
        unknown_provenance={"build": 7} if unknown else {},
    ),
    st.booleans(),
    st.sampled_from(["j1", "j1", "j2", None]),
    st.booleans(),
    st.integers(1, 2),
    st.integers(0, 9).map(lambda n: n == 0),
)


@given(
    st.lists(st.tuples(_legacy_pair_side, _legacy_pair_side), max_size=40),
    st.sets(st.sampled_from(["k0", "k3", "zz"])),
)
def test_legacy_chunks_decide_as_compare_case(pairs: list[Any], excluded: set[str]) -> None:
    """Chunks of single-epoch legacy pairs (the inline decisions): the same cases."""
    b = [msgspec.structs.replace(x, run_id=f"k{i}") for i, (x, _) in enumerate(pairs)]
    c = [msgspec.structs.replace(y, run_id=f"k{i}") for i, (_, y) in enumerate(pairs)]
    _check_every_path(b, c, dict.fromkeys(excluded, "why"))
