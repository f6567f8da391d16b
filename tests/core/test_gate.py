"""The validity gate: comparability checks, outcomes, reasons, epochs, suite statistics."""

from __future__ import annotations

import gc
import math
from fractions import Fraction
from typing import Any

import pytest
from factories import legacy, prov, replace, verdict
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import RecorderId, compare_case, gate, mcnemar_exact_p, step_diff
from litmus_sandbox._core.gate import Reason


def codes(reasons: tuple[Reason, ...]) -> set[str]:
    return {r.code for r in reasons}


@pytest.mark.parametrize(
    ("b_safe", "c_safe", "outcome"),
    [
        (True, True, "PASS"),
        (False, False, "PASS"),
        (True, False, "REGRESSION"),
        (False, True, "IMPROVEMENT"),
    ],
)
def test_comparable_pair_compares_verdicts(b_safe: bool, c_safe: bool, outcome: str) -> None:
    r = compare_case("c1", [verdict(safe=b_safe)], [verdict(safe=c_safe)])
    assert r.outcome == outcome
    assert r.reasons == ()


def test_gate_refuses_baseline_scored_with_refusal_cut() -> None:
    """The incident: baseline cut at the refusal (safe), candidate scored in full (unsafe)."""
    b = verdict(safe=True, truncate_on_refusal=True, steps_covered=2, steps_recorded=4)
    c = verdict(safe=False)
    r = compare_case("c1", [b], [c])
    assert r.outcome == "NEEDS_REBASELINE"
    (reason,) = r.reasons
    assert reason.code == "truncation_policy_mismatch"
    assert reason.remedy == "rescore_baseline"
    assert "truncate_on_refusal" in reason.detail


def test_truncated_baseline_recording_needs_a_rerun_not_a_rescore() -> None:
    b = verdict(safe=True, recording_truncated=True, truncate_on_refusal=True, steps_covered=2)
    r = compare_case("c1", [b], [verdict(safe=False)])
    assert r.outcome == "NEEDS_REBASELINE"
    by_code = {x.code: x for x in r.reasons}
    assert by_code["recording_truncated"].remedy == "rerun_baseline"
    assert by_code["truncation_policy_mismatch"].remedy == "rerun_baseline"


def test_every_failed_check_is_reported() -> None:
    b = verdict(
        judge="judgeB", truncate_on_empty_tool_result=True, steps_covered=3, fallback_judge=True
    )
    c = verdict(
        recorder=RecorderId(name="other", measurement_version="1"),
        tool_modes={"send_email": "stub"},
    )
    r = compare_case("c1", [b], [c])
    assert r.outcome == "NEEDS_REBASELINE"
    assert codes(r.reasons) == {
        "judge_mismatch",
        "truncation_policy_mismatch",
        "fallback_judge",
        "recorder_mismatch",
        "fidelity_mismatch",
    }


def test_candidate_problem_wins_over_baseline_problem() -> None:
    """Fix the candidate first: NEEDS_RERUN, with the baseline's reasons kept."""
    b = verdict(judge="judgeB")
    c = verdict(episode_complete=False)
    r = compare_case("c1", [b], [c])
    assert r.outcome == "NEEDS_RERUN"
    assert codes(r.reasons) == {"incomplete_episode", "judge_mismatch"}
    remedies = {x.code: x.remedy for x in r.reasons}
    assert remedies == {
        "incomplete_episode": "rerun_candidate",
        "judge_mismatch": "rescore_baseline",
    }


def test_truncated_candidate_recording_needs_rerun() -> None:
    r = compare_case("c1", [verdict()], [verdict(recording_truncated=True)])
    assert r.outcome == "NEEDS_RERUN"
    assert [(x.code, x.remedy) for x in r.reasons] == [("recording_truncated", "rerun_candidate")]


def test_missing_sides() -> None:
    r = compare_case("c1", [], [verdict()])
    assert (r.outcome, [(x.code, x.remedy) for x in r.reasons]) == (
        "NEEDS_REBASELINE",
        [("baseline_missing", "rerun_baseline")],
    )
    r = compare_case("c1", [], [verdict()], baseline_recorded=True)
    assert r.reasons[0].remedy == "rescore_baseline"
    r = compare_case("c1", [verdict()], [])
    assert (r.outcome, r.reasons[0].code) == ("NEEDS_RERUN", "candidate_missing")


def test_refuse_and_stop_is_an_improvement_despite_different_lengths() -> None:
    """Two complete recordings under one scoring provenance compare even when lengths differ."""
    b = verdict(safe=False, steps_recorded=6, steps_covered=6)
    c = verdict(safe=True, steps_recorded=2, steps_covered=2)
    r = compare_case("c1", [b], [c])
    assert r.outcome == "IMPROVEMENT"
    diff = step_diff(r)
    assert diff is not None
    assert diff.baseline_only_steps == (2, 3, 4, 5)
    assert diff.candidate_only_steps == ()


def test_refusal_detector_matters_only_when_a_refusal_cut_applies() -> None:
    assert compare_case("c", [verdict()], [verdict(refusal_detector="det2")]).outcome == "PASS"
    b = verdict(truncate_on_refusal=True, steps_covered=2)
    c = verdict(truncate_on_refusal=True, steps_covered=2, refusal_detector="det2")
    r = compare_case("c", [b], [c])
    assert r.outcome == "NEEDS_REBASELINE"
    assert codes(r.reasons) == {"refusal_detector_mismatch"}


def test_partial_coverage_without_a_cut_is_refused() -> None:
    """Coverage must mean all that the policy covers: no slack of even one step."""
    r = compare_case("c", [verdict(steps_covered=3, steps_recorded=4)], [verdict()])
    assert r.outcome == "NEEDS_REBASELINE"
    assert codes(r.reasons) == {"coverage_mismatch"}


def test_fidelity_compared_only_for_tools_called() -> None:
    b = verdict(tool_modes={"send_email": "real", "delete_all": "deny"})
    c = verdict(tool_modes={"send_email": "real", "delete_all": "real"})
    assert compare_case("c", [b], [c]).outcome == "PASS"
    c2 = verdict(tool_modes={"send_*": "stub"})
    r = compare_case("c", [b], [c2])
    assert codes(r.reasons) == {"fidelity_mismatch"}
    assert "send_email: real vs stub" in r.reasons[0].detail
    assert r.reasons[0].remedy == "rerun_baseline"


@pytest.mark.parametrize(
    ("b_modes", "c_modes"),
    [
        (None, None),
        ({}, {}),
        ({"other": "real"}, {"other": "real"}),
        (None, {"send_email": "real"}),
    ],
)
def test_a_tool_mode_nobody_recorded_fails_closed(
    b_modes: dict[str, str] | None, c_modes: dict[str, str] | None
) -> None:
    """Unknown is never equal to unknown: a called tool with no mode on a side is a mismatch."""
    r = compare_case("c", [verdict(tool_modes=b_modes)], [verdict(tool_modes=c_modes)])
    assert r.outcome == "NEEDS_REBASELINE"
    assert codes(r.reasons) == {"fidelity_mismatch"}
    assert "send_email: " in r.reasons[0].detail
    assert "unknown" in r.reasons[0].detail
    no_tools: dict[str, Any] = {"tool_modes": None, "tools_called": ()}
    assert compare_case("c", [verdict(**no_tools)], [verdict(**no_tools)]).outcome == "PASS"


def test_a_judge_label_that_differs_is_another_judge() -> None:
    """Scored verdicts never differ in label alone (the fingerprint covers it); an edited
    one that does is not compared. A label nobody wrote is not checked."""
    r = compare_case("c", [verdict(judge_label="rules-a")], [verdict(judge_label="rules-b")])
    assert r.outcome == "NEEDS_REBASELINE"
    assert codes(r.reasons) == {"judge_mismatch"}
    unlabelled = compare_case("c", [verdict(judge_label=None)], [verdict(judge_label=None)])
    assert unlabelled.outcome == "PASS"


def test_retries_on_one_side_only_and_an_unknown_refusal_detector_fail_closed() -> None:
    """Provenance says whether the judge was re-asked; a detector nobody recorded is
    never equal to another, cut or no cut."""
    r = compare_case("c", [verdict(judge_retries=0)], [verdict(judge_retries=2)])
    assert r.outcome == "NEEDS_REBASELINE"
    assert codes(r.reasons) == {"judge_mismatch"}
    assert "retries" in r.reasons[0].detail
    both = compare_case("c", [verdict(judge_retries=1)], [verdict(judge_retries=3)])
    assert both.outcome == "PASS"  # the retry path on both sides
    unknown = compare_case("c", [verdict(refusal_detector=None)], [verdict(refusal_detector=None)])
    assert unknown.outcome == "NEEDS_REBASELINE"
    assert codes(unknown.reasons) == {"refusal_detector_mismatch"}
    no_cut = compare_case("c", [verdict(refusal_detector="a")], [verdict(refusal_detector="b")])
    assert no_cut.outcome == "PASS"  # known, and no refusal cut: the detector decided nothing


def test_a_side_that_configured_nothing_is_not_held_to_a_tool_it_never_called() -> None:
    """Hand-written episodes (no tool_modes): the baseline sends mail and is unsafe; the
    candidate refuses and stops. Its mode for send_email never reached its trajectory:
    refuse-and-stop is an IMPROVEMENT, and the reverse a REGRESSION."""
    sent: dict[str, Any] = {
        "tool_modes": {"send_email": "observed:real"},
        "tools_called": ("send_email",),
    }
    refused: dict[str, Any] = {"tool_modes": {}, "tools_called": ()}
    b = verdict(safe=False, steps_covered=2, steps_recorded=2, **sent)
    c = verdict(safe=True, steps_covered=1, steps_recorded=1, **refused)
    assert compare_case("c", [b], [c]).outcome == "IMPROVEMENT"
    b2 = verdict(safe=True, steps_covered=1, steps_recorded=1, **refused)
    c2 = verdict(safe=False, steps_covered=2, steps_recorded=2, **sent)
    assert compare_case("c", [b2], [c2]).outcome == "REGRESSION"
    # A side that configured modes is held to them: one that leaves the tool out is unknown.
    configured: dict[str, Any] = {"tool_modes": {"search": "real"}, "tools_called": ()}
    r = compare_case("c", [b], [verdict(safe=True, **configured)])
    assert r.outcome == "NEEDS_REBASELINE"
    assert codes(r.reasons) == {"fidelity_mismatch"}


@pytest.mark.parametrize(
    "field",
    [
        "judge",
        "recording_truncated",
        "episode_complete",
        "truncate_on_refusal",
        "steps_covered",
        "fallback_judge",
    ],
)
def test_unknown_provenance_fails_closed(field: str) -> None:
    """A field nobody filled in never counts as equal, even when both sides lack it."""
    unknown: dict[str, Any] = {field: None}
    r = compare_case("c", [verdict(**unknown)], [verdict(**unknown)])
    assert r.outcome in ("NEEDS_REBASELINE", "NEEDS_RERUN")
    assert r.reasons


def test_a_verdict_need_not_say_its_recorder_or_the_tools_it_called() -> None:
    """Neither is among the provenance a verdict must carry (a hand-written verdict may lack
    both): absent on both sides they are not compared, but what is known still is."""
    hand: dict[str, Any] = {"recorder": None, "tools_called": None}
    assert compare_case("c", [verdict(**hand)], [verdict(**hand)]).outcome == "PASS"
    one_sided = compare_case("c", [verdict(recorder=None)], [verdict()])
    assert codes(one_sided.reasons) == {"recorder_mismatch"}
    stubbed = verdict(tools_called=None, tool_modes={"send_email": "stub"})
    r = compare_case("c", [verdict(tools_called=None)], [stubbed])
    assert codes(r.reasons) == {"fidelity_mismatch"}
    assert "send_email: real vs stub" in r.reasons[0].detail
    blind = verdict(tools_called=None, tool_modes=None)
    r = compare_case("c", [blind], [verdict()])
    assert codes(r.reasons) == {"fidelity_mismatch"}
    assert "unknown on the baseline" in r.reasons[0].detail


def test_unknown_provenance_keys_fail_closed() -> None:
    b = replace(verdict(), unknown_provenance={"sampler": "x"})
    r = compare_case("c", [b], [verdict()])
    assert r.outcome == "NEEDS_REBASELINE"
    assert codes(r.reasons) == {"unknown_provenance"}
    # Equal on both sides is no better: what the key means is unknown (issue: "an unknown
    # field is a mismatch").
    same = compare_case("c", [b], [replace(verdict(), unknown_provenance={"sampler": "x"})])
    assert same.outcome == "NEEDS_REBASELINE"
    assert codes(same.reasons) == {"unknown_provenance"}
    assert "sampler" in same.reasons[0].detail


# ---------------------------------------------------------------- legacy


def test_legacy_pair_keeps_the_reference_rule() -> None:
    assert compare_case("c", [legacy(safe=True)], [legacy(safe=False)]).outcome == "REGRESSION"
    r = compare_case("c", [legacy(steps_covered=5)], [legacy(steps_covered=6, safe=False)])
    assert (r.outcome, codes(r.reasons)) == ("NEEDS_REBASELINE", {"coverage_mismatch"})
    r = compare_case("c", [legacy(judge_version="j1")], [legacy(judge_version="j2")])
    assert codes(r.reasons) == {"judge_mismatch"}
    r = compare_case("c", [legacy(truncate_on_empty_tool_result=True)], [legacy()])
    assert codes(r.reasons) == {"truncation_policy_mismatch"}


def test_legacy_missing_fields_fail_closed() -> None:
    r = compare_case("c", [legacy(judge_version=None)], [legacy(judge_version=None)])
    assert codes(r.reasons) == {"judge_mismatch"}


def test_mixed_pair_treats_legacy_recording_as_possibly_truncated() -> None:
    r = compare_case("c", [legacy(judge_version="rules-a")], [verdict()])
    assert r.outcome == "NEEDS_REBASELINE"
    assert [(x.code, x.remedy) for x in r.reasons] == [("recording_truncated", "rerun_baseline")]
    r = compare_case("c", [verdict()], [legacy(judge_version="rules-a")])
    assert r.outcome == "NEEDS_RERUN"
    assert [(x.code, x.remedy) for x in r.reasons] == [("recording_truncated", "rerun_candidate")]


# ---------------------------------------------------------------- epochs, exclusions


def test_epochs_are_pass_hat_k_and_flaky_is_marked() -> None:
    b = [verdict(eid="b1"), verdict(eid="b2")]
    c = [verdict(eid="c1"), verdict(eid="c2", safe=False)]
    r = compare_case("c", b, c)
    assert r.outcome == "REGRESSION"
    assert codes(r.reasons) == {"flaky"}
    assert r.flaky
    steady = compare_case("c", b, [verdict(eid="c1", safe=False), verdict(eid="c2", safe=False)])
    assert steady.outcome == "REGRESSION"
    assert not steady.flaky
    # Each flaky side is told to run again (more epochs settle it).
    both = compare_case("c", [verdict(eid="b1"), verdict(eid="b2", safe=False)], c)
    assert {(x.code, x.remedy) for x in both.reasons} == {
        ("flaky", "rerun_baseline"),
        ("flaky", "rerun_candidate"),
    }


def test_annotations_stay_out_of_the_rebaseline_plan() -> None:
    """A case unresolved for its judge, whose candidate is also flaky, is re-scored, not
    re-run: ``flaky`` names a remedy but never makes a case unresolved."""
    b = [verdict(eid="b1", judge="old"), verdict(eid="b2", judge="old")]
    c = [verdict(eid="c1"), verdict(eid="c2", safe=False)]
    report = gate(b, c)
    (case,) = report.cases
    assert case.outcome == "NEEDS_REBASELINE"
    assert {x.code for x in case.reasons} == {"judge_mismatch", "flaky"}
    plan = report.rebaseline_plan
    assert [(e.case_id, e.reasons) for e in plan.rescore] == [("c1", ("judge_mismatch",))]
    assert plan.rerun_candidate == ()
    assert plan.rerun_baseline == ()


def test_epoch_counts_must_match() -> None:
    r = compare_case("c", [verdict(), verdict()], [verdict()])
    assert r.outcome == "NEEDS_RERUN"
    assert codes(r.reasons) == {"epoch_count_mismatch"}


def test_exclusion_applies_last_and_keeps_reasons() -> None:
    r = compare_case("c", [verdict(judge="x")], [verdict()], exclusion="known flaky tool")
    assert r.outcome == "EXCLUDED"
    assert [x.code for x in r.reasons] == ["judge_mismatch", "excluded"]
    assert r.reasons[-1].detail == "known flaky tool"
    assert r.reasons[-1].remedy == "exclude"


def test_oracle_contradiction_is_flagged_but_does_not_change_outcome() -> None:
    from litmus_sandbox import StepVerdict

    c = replace(verdict(), steps=(StepVerdict(index=0, safe=True, contradictions=("escape",)),))
    r = compare_case("c", [verdict()], [c])
    assert r.outcome == "PASS"
    assert codes(r.reasons) == {"oracle_contradicts_judge"}
    assert r.reasons[0].remedy == "rescore_baseline"
    report = gate([verdict()], [c])
    assert report.exit_code() == 0
    assert report.exit_code(strict_oracle=True) == 1


def test_suite_statistics_count_flaky_and_contradicted_cases() -> None:
    from litmus_sandbox import StepVerdict

    step = StepVerdict(index=0, safe=True, contradictions=("escape",))
    contradicted = replace(verdict("c2"), steps=(step,))
    b = [verdict("f", eid="b1"), verdict("f", eid="b2"), verdict("c2"), verdict("c3")]
    # "f": the candidate's epochs disagree, and both are contradicted; "c2" contradicted.
    c = [
        replace(verdict("f", eid="c1"), steps=(step,)),
        replace(verdict("f", eid="c2", safe=False), steps=(step,)),
        contradicted,
        verdict("c3"),
    ]
    report = gate(b, c)
    assert report.statistics.flaky == 1
    assert report.statistics.oracle_contradictions == 2
    assert report.reasons == {"oracle_contradicts_judge": 2, "flaky": 1}
    assert [x.flaky for x in report.cases] == [True, False, False]
    assert [x.contradicted for x in report.cases] == [True, True, False]


# ---------------------------------------------------------------- suite


def test_suite_counts_statistics_and_exit_codes() -> None:
    base = [verdict(f"c{i}", safe=True) for i in range(6)]
    cand = [
        verdict("c0", safe=False),
        verdict("c1", safe=True),
        verdict("c2", safe=True, judge="other"),
        verdict("c3", safe=True, episode_complete=False),
        verdict("c4", safe=True),
        verdict("c9", safe=True),
    ]
    report = gate(base, cand, exclusions={"c4": "flaky fixture", "nope": "x"})
    assert report.counts == {
        "REGRESSION": 1,
        "NEEDS_RERUN": 2,  # c3 incomplete, c5 missing from the candidate
        "NEEDS_REBASELINE": 2,  # c2 judged by another judge, c9 has no baseline
        "IMPROVEMENT": 0,
        "PASS": 1,
        "EXCLUDED": 1,
    }
    by_case = {c.case_id: c.outcome for c in report.cases}
    assert by_case == {
        "c0": "REGRESSION",
        "c1": "PASS",
        "c2": "NEEDS_REBASELINE",
        "c3": "NEEDS_RERUN",
        "c4": "EXCLUDED",
        "c5": "NEEDS_RERUN",
        "c9": "NEEDS_REBASELINE",
    }
    # Reasons grouped over the suite: each code once per case that carries it.
    expected: dict[str, int] = {}
    for case in report.cases:
        for code in {r.code for r in case.reasons}:
            expected[code] = expected.get(code, 0) + 1
    assert report.reasons == expected
    assert report.reasons["excluded"] == 1
    assert list(report.reasons.values()) == sorted(report.reasons.values(), reverse=True)
    assert report.unknown_exclusions == ("nope",)
    assert report.statistics.comparable == 2
    assert report.exit_code() == 1
    plan = report.rebaseline_plan
    assert [e.case_id for e in plan.rescore] == ["c2"]
    assert [e.case_id for e in plan.rerun_baseline] == ["c9"]
    assert {e.case_id for e in plan.rerun_candidate} == {"c3", "c5"}
    assert plan.judge_calls == 4
    assert not plan.judge_calls_exact


def test_unresolved_exits_4_unless_allowed() -> None:
    report = gate([verdict(judge="x")], [verdict()])
    assert report.exit_code() == 4
    assert report.decision() == "UNRESOLVED"
    assert report.exit_code(allow_unresolved=True) == 0


def test_plan_uses_exact_costs_when_given() -> None:
    report = gate([verdict(judge="x")], [verdict()], baseline_recordings={"c1": 1})
    assert report.rebaseline_plan.judge_calls == 1
    assert report.rebaseline_plan.judge_calls_exact


def test_gate_leaves_the_garbage_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library call has no process-wide side effect: the gate never switches the cyclic
    GC off, and what it keeps per case (results, plan entries) is not tracked by it."""

    def refuse() -> None:
        raise AssertionError("the gate switched the garbage collector off")

    monkeypatch.setattr(gc, "disable", refuse)
    base = [legacy(f"c{i}", judge_version="j0" if i % 2 else "j1") for i in range(50)]
    report = gate(base, [legacy(f"c{i}") for i in range(50)])
    assert report.counts["NEEDS_REBASELINE"] == 25
    assert gc.isenabled()
    plan = report.rebaseline_plan.rescore
    assert len(plan) == 25
    assert not any(gc.is_tracked(x) for x in (*report.cases, *plan))


def _mcnemar_brute(b: int, c: int) -> float:
    n = b + c
    k = min(b, c)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / float(2**n))


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 0), (5, 1), (10, 10), (30, 12), (200, 150)])
def test_mcnemar_exact_matches_binomial(b: int, c: int) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(_mcnemar_brute(b, c), rel=1e-9)


@given(b=st.integers(0, 300), c=st.integers(0, 300))
def test_mcnemar_is_the_exact_fraction_correctly_rounded(b: int, c: int) -> None:
    n, k = b + c, min(b, c)
    exact = min(Fraction(1), Fraction(2 * sum(math.comb(n, i) for i in range(k + 1)), 2**n))
    assert mcnemar_exact_p(b, c) == float(exact)


def test_mcnemar_far_past_exact_summing_still_agrees() -> None:
    """Past 2,000 discordant pairs the sum runs in log space: still the exact test."""
    for b, c in ((1500, 1400), (1100, 1000), (2500, 2500)):
        n, k = b + c, min(b, c)
        exact = min(Fraction(1), Fraction(2 * sum(math.comb(n, i) for i in range(k + 1)), 2**n))
        assert mcnemar_exact_p(b, c) == pytest.approx(float(exact), rel=1e-9)


def test_prov_factory_is_comparable_with_itself() -> None:
    assert compare_case("c", [verdict()], [verdict()]).outcome == "PASS"
    assert prov() == prov()


def test_reports_carry_any_case_id() -> None:
    """JUnit stays well-formed XML and Markdown keeps one table row per case, whatever
    characters a case id holds."""
    import xml.etree.ElementTree as ET

    from litmus_sandbox import reports

    odd = "case\x01|with\nbreak`tick"
    report = gate([verdict(odd)], [verdict(odd, safe=False)])
    root = ET.fromstring(reports.render_junit(report))
    (testcase,) = root.iter("testcase")
    assert testcase.get("name") == "case\\x01|with\nbreak`tick"
    assert testcase.find("failure") is not None
    rows = [ln for ln in reports.render_markdown(report).splitlines() if "| REGRESSION |" in ln]
    assert len(rows) == 2  # the count table's row, and the case's
    # A code span longer than the backtick inside; the controls shown as escapes.
    assert rows[1].startswith("| ``case\\x01\\|with\\nbreak`tick`` | REGRESSION |")


def test_a_missing_baseline_never_hides_an_aborted_candidate() -> None:
    """Both sides fail a check: NEEDS_RERUN (fix the candidate first), every reason listed."""
    r = compare_case("c1", [], [verdict(episode_complete=False)])
    assert r.outcome == "NEEDS_RERUN"
    assert [(x.code, x.remedy) for x in r.reasons] == [
        ("baseline_missing", "rerun_baseline"),
        ("incomplete_episode", "rerun_candidate"),
    ]
    r = compare_case("c1", [], [verdict(recording_truncated=True)], baseline_recorded=True)
    assert r.outcome == "NEEDS_RERUN"
    assert [(x.code, x.remedy) for x in r.reasons] == [
        ("baseline_missing", "rescore_baseline"),
        ("recording_truncated", "rerun_candidate"),
    ]


def test_a_missing_candidate_lists_the_baselines_own_problems() -> None:
    r = compare_case("c1", [verdict(episode_complete=False)], [])
    assert r.outcome == "NEEDS_RERUN"
    assert [(x.code, x.remedy) for x in r.reasons] == [
        ("candidate_missing", "rerun_candidate"),
        ("incomplete_episode", "rerun_baseline"),
    ]


def test_one_side_missing_reports_each_epochs_problem_once() -> None:
    aborted = verdict(episode_complete=False)
    r = compare_case("c1", [], [aborted, aborted])
    assert [x.code for x in r.reasons] == ["baseline_missing", "incomplete_episode"]


def test_a_legacy_side_alone_adds_nothing_it_cannot_know() -> None:
    r = compare_case("c1", [], [legacy()])
    assert [x.code for x in r.reasons] == ["baseline_missing"]


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_unknown_provenance_keys_are_reported_on_a_lone_side(side: str) -> None:
    """Every failure is reported: a case one side lacks still names the other side's
    unknown provenance keys (native and legacy), once however many epochs carry them."""
    from litmus_sandbox._model.codec import decode_verdict_record
    from litmus_sandbox._model.records import AnyVerdict, PolicyRecord

    native = decode_verdict_record(
        b'{"kind":"verdict","v":1,"case_id":"c1","episode_id":"e1","safe":true,'
        b'"provenance":{"mystery":null}}'
    )
    old = decode_verdict_record(
        b'{"run_id":"c1","safe":true,"provenance":{"judge_version":"j","later":1}}'
    )
    assert not isinstance(native, PolicyRecord)
    assert not isinstance(old, PolicyRecord)
    for lone, key in ((native, "mystery"), (old, "later")):
        sides: tuple[list[AnyVerdict], list[AnyVerdict]] = (
            ([lone, lone], []) if side == "baseline" else ([], [lone, lone])
        )
        result = compare_case("c1", *sides)
        unknown = [r for r in result.reasons if r.code == "unknown_provenance"]
        assert len(unknown) == 1
        assert key in unknown[0].detail
        assert f"on the {side} side" in unknown[0].detail
        assert result.outcome in ("NEEDS_REBASELINE", "NEEDS_RERUN")
