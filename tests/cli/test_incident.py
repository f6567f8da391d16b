"""The reference incident, reproduced on synthetic suites away from the reference's counts.

Every expected figure is computed from the suite's parameters, so these tests check the
mechanism (the naive gate confuses truncation artifacts with regressions; this gate
refuses to compare; a rebaseline leaves only the genuine changes), not one table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import incident_suite as suite
import msgspec
import pytest
import reproduce_incident
from factories import ROOT

from litmus_sandbox import MessageStep, RefusalDetector, ToolCallStep, Verdict, VerdictCache

SCRIPT = ROOT / "examples" / "reproduce_incident.py"

SETTINGS = (
    suite.SuiteParams(
        runs=300, refusal_artifacts=40, empty_artifacts=5, regressions=3, improvements=7, seed=11
    ),
    suite.SuiteParams(
        runs=150, refusal_artifacts=0, empty_artifacts=12, regressions=1, improvements=0, seed=5
    ),
)


@dataclass(frozen=True)
class Run:
    params: suite.SuiteParams
    incident: suite.Incident
    cache: VerdictCache

    def cases_of(self, *kinds: suite.CaseKind) -> set[str]:
        return {c for c, k in self.incident.kinds.items() if k in kinds}


@pytest.fixture(scope="module", params=SETTINGS, ids=lambda p: f"{p.runs}-runs")
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    params: suite.SuiteParams = request.param
    with VerdictCache() as cache:
        incident = suite.run_incident(params, tmp_path_factory.mktemp("incident"), cache)
        yield Run(params, incident, cache)


def test_naive_gate_flags_every_artifact_and_every_regression(run: Run) -> None:
    p, naive = run.params, run.incident.naive
    assert naive.counts["REGRESSION"] == p.artifacts + p.regressions
    assert naive.counts["PASS"] == p.runs - p.artifacts - p.regressions
    assert set(naive.cases("REGRESSION")) == run.cases_of(
        "refusal_artifact", "empty_tool_artifact", "regression"
    )
    assert (naive.genuine, naive.false) == (p.regressions, p.artifacts)
    # The improvements hide as "no change".
    assert naive.improvements == 0
    assert run.cases_of("improvement") <= set(naive.cases("PASS"))
    assert naive.flagged_share == pytest.approx((p.artifacts + p.regressions) / p.runs)


def test_this_gate_refuses_to_compare_across_truncation_policies(run: Run) -> None:
    report = run.incident.gate_report
    assert report.counts["NEEDS_REBASELINE"] == run.params.runs
    assert report.counts["REGRESSION"] == 0
    assert report.exit_code() == 4
    flags = {"truncate_on_refusal", "truncate_on_empty_tool_result"}
    for case in report.cases:
        assert case.outcome == "NEEDS_REBASELINE", case.case_id
        assert case.reasons, case.case_id
        assert {(r.code, r.remedy) for r in case.reasons} == {
            ("truncation_policy_mismatch", "rescore_baseline")
        }
        assert {r.detail.split()[0] for r in case.reasons} == flags
        (b,), (c,) = case.baseline, case.candidate
        assert isinstance(b, Verdict)
        assert isinstance(c, Verdict)
        assert b.provenance.truncate_on_refusal
        assert b.provenance.truncate_on_empty_tool_result
        assert not c.provenance.truncate_on_refusal
        assert not c.provenance.truncate_on_empty_tool_result
        assert b.provenance.recording_truncated is False
        assert b.provenance.episode_complete is True


def test_after_rebaseline_only_genuine_changes_remain(run: Run) -> None:
    p, after = run.params, run.incident.rebaselined
    expected = dict.fromkeys(suite.OUTCOMES, 0)
    expected |= {
        "REGRESSION": p.regressions,
        "IMPROVEMENT": p.improvements,
        "PASS": p.runs - p.regressions - p.improvements,
    }
    assert after.counts == expected
    assert set(after.cases("REGRESSION")) == run.cases_of("regression")
    assert set(after.cases("IMPROVEMENT")) == run.cases_of("improvement")
    assert (after.genuine, after.false, after.improvements) == (p.regressions, 0, p.improvements)
    assert run.incident.rebaselined_report.exit_code() == (1 if p.regressions else 0)


def test_the_old_policy_cut_every_changed_case_before_its_harm(run: Run) -> None:
    """The artifacts exist because the cut falls before the first unsafe step."""
    baseline = {v.case_id: v for v in suite.read_stream(run.incident.paths.baseline_verdicts)}
    rescored = {v.case_id: v for v in suite.read_stream(run.incident.paths.rebaselined_verdicts)}
    candidate = {v.case_id: v for v in suite.read_stream(run.incident.paths.candidate_verdicts)}
    for case_id in run.cases_of("refusal_artifact", "empty_tool_artifact", "improvement"):
        old, new = baseline[case_id], rescored[case_id]
        assert isinstance(old, Verdict)
        assert isinstance(new, Verdict)
        assert old.safe
        assert not new.safe
        assert old.provenance.steps_covered is not None
        assert new.first_unsafe_step is not None
        assert new.first_unsafe_step >= old.provenance.steps_covered
    for case_id in run.cases_of("refusal_artifact", "empty_tool_artifact", "regression"):
        assert not candidate[case_id].safe
    for case_id in run.cases_of("plain", "improvement"):
        assert candidate[case_id].safe


def test_rebaseline_pays_only_for_steps_the_old_policy_never_covered(run: Run) -> None:
    incident = run.incident
    old, again = incident.scores.baseline, incident.rebaseline
    recorded = sum(
        v.provenance.steps_recorded or 0
        for v in suite.read_stream(incident.paths.baseline_verdicts)
        if isinstance(v, Verdict)
    )
    assert again.episodes == run.params.runs
    assert again.judge_calls + again.cache_hits == again.steps_covered == recorded
    # Everything the old policy judged is served from the cache, under the same judge.
    assert again.cache_hits >= old.steps_covered
    assert again.judge_calls <= recorded - old.steps_covered
    assert again.judge_calls > 0  # both settings have cuts with steps after them
    assert incident.gate_report.rebaseline_plan.judge_calls == recorded


def test_a_second_rebaseline_is_served_entirely_from_the_cache(run: Run) -> None:
    paths = run.incident.paths
    assert run.incident.repeat.judge_calls == 0
    _, stats = suite.rebaseline(
        paths.baseline_episodes, paths.candidate_verdicts, paths.rebaselined_verdicts, run.cache
    )
    assert stats.judge_calls == 0
    assert stats.cache_hits == stats.steps_covered == run.incident.rebaseline.steps_covered


def test_refusals_reach_the_detector_both_ways() -> None:
    """Most refusals are recognised from their text; some only by the harness's label."""
    detector = RefusalDetector()
    by_text = by_label = 0
    for case in suite.generate_suite(SETTINGS[0]):
        for record in (*case.baseline, *case.candidate):
            if not isinstance(record, MessageStep) or not detector.is_refusal(record):
                continue
            if record.refusal is None:
                by_text += 1
            else:
                assert not detector.is_refusal(msgspec.structs.replace(record, refusal=None))
                by_label += 1
    assert by_text > 0
    assert by_label > 0


def test_empty_results_are_empty_not_errors() -> None:
    """The empty-tool cut needs results that are really empty: no content, or blank text."""
    empties = [
        record
        for case in suite.generate_suite(SETTINGS[1])
        if case.kind == "empty_tool_artifact"
        for record in case.baseline
        if isinstance(record, ToolCallStep) and record.shown.is_empty()
    ]
    assert len(empties) >= SETTINGS[1].empty_artifacts
    assert not any(r.shown.is_error for r in empties)
    assert {len(r.shown.content) for r in empties} == {0, 1}


def test_the_suite_is_deterministic_in_its_seed(tmp_path: Path) -> None:
    params = SETTINGS[1]
    assert suite.generate_suite(params) == suite.generate_suite(params)
    other = suite.generate_suite(suite.SuiteParams(**{**params.__dict__, "seed": params.seed + 1}))
    assert other != suite.generate_suite(params)
    # Writing twice into one directory replaces the streams instead of appending to them.
    suite.write_suite(params, tmp_path)
    first = suite.SuitePaths(tmp_path).baseline_episodes.read_bytes()
    suite.write_suite(params, tmp_path)
    assert suite.SuitePaths(tmp_path).baseline_episodes.read_bytes() == first


@pytest.mark.parametrize(
    "overrides",
    [
        {"runs": 10, "refusal_artifacts": 11},
        {"runs": 10, "refusal_artifacts": 4, "empty_artifacts": 4, "improvements": 3},
        {"regressions": -1},
    ],
)
def test_params_that_cannot_make_a_suite_are_refused(overrides: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"do not fit|0 or more"):
        suite.SuiteParams(**overrides)


def test_the_script_prints_the_three_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = SETTINGS[1]
    argv = [
        f"--runs={p.runs}",
        f"--refusal-artifacts={p.refusal_artifacts}",
        f"--empty-artifacts={p.empty_artifacts}",
        f"--regressions={p.regressions}",
        f"--improvements={p.improvements}",
        f"--seed={p.seed}",
        f"--out={tmp_path}",
    ]
    assert reproduce_incident.main(argv) == 0
    out = capsys.readouterr().out
    label = "flagged REGRESSION (share of suite)"
    flagged = next(line for line in out.splitlines() if line.startswith(label))
    naive = p.artifacts + p.regressions
    assert flagged.removeprefix(label).split() == [
        str(naive),
        f"({suite.percent(naive / p.runs)})",
        "0",
        "(0.0%)",
        str(p.regressions),
        f"({suite.percent(p.regressions / p.runs)})",
    ]
    assert str(tmp_path) in out
    assert (tmp_path / "baseline" / "verdicts.rebaselined.jsonl").is_file()


def test_the_script_refuses_counts_that_do_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        reproduce_incident.main(["--runs=5", "--refusal-artifacts=6"])
    assert exc.value.code == 2
    assert "do not fit" in capsys.readouterr().err


def test_the_script_reproduces_the_reference_table(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT.relative_to(ROOT)), "--json", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    naive, gated, after = (data["columns"][k] for k in ("naive", "gate", "rebaselined"))
    assert data["runs"] == 1200
    assert (naive["flagged"], naive["flagged_percent"]) == (214, "17.8%")
    assert (naive["genuine"], naive["false"]) == (2, 212)
    assert (gated["flagged"], gated["counts"]["NEEDS_REBASELINE"]) == (0, 1200)
    assert (after["flagged"], after["flagged_percent"], after["genuine"]) == (2, "0.17%", 2)
    assert data["scoring"]["rebaseline_repeat"]["judge_calls"] == 0
    assert Path(data["files"]["rebaselined_verdicts"]).is_file()
