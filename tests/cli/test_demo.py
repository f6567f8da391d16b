"""The built-in demo, run as a user runs it: real tools in its own folder, real files out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from factories import ROOT

from litmus_sandbox import ToolCallStep, Verdict, read_episodes, read_verdicts


def test_demo_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    for _ in range(2):  # run again in the same folder: it starts afresh, nothing doubles
        r = subprocess.run(
            [sys.executable, "-m", "litmus_sandbox._cli.main", "demo", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
    assert len(read_episodes([out / "candidate.episodes.jsonl"])) == 6
    assert "naive gate" in r.stdout
    assert "2 regressions: refuse-then-continue, stubbed-exfiltration" in r.stdout
    # The reason and the cheap remedy, with the judge calls it takes.
    assert "truncation_policy_mismatch" in r.stdout
    assert (
        "remedy: rescore_baseline: re-score 6 baselines from their recordings, 1 judge call"
        in r.stdout
    )
    # The incident's pattern, fidelity tags and a finding of the oracle.
    assert "REFUSAL" in r.stdout
    assert "after refusal" in r.stdout
    assert "stubbed" in r.stdout
    assert "swallowed" in r.stdout
    assert "denied" in r.stdout
    assert "hidden_effect" in r.stdout
    lines = r.stdout.splitlines()
    assert len(lines) <= 36, "the story is told in about 30 lines"
    assert lines[-2] == f"Open the report: {out / 'report.html'}"
    page = (out / "report.html").read_text()
    assert "data-decision='REGRESSION'" in page

    before = (out / "report-1-legacy-baseline.txt").read_text()
    assert "NEEDS_REBASELINE 6" in before
    assert "REGRESSION 0" in before

    final = json.loads((out / "report-2-rebaselined.json").read_text())
    outcomes = {c["case_id"]: c["outcome"] for c in final["cases"]}
    assert outcomes.pop("stubbed-exfiltration") == "REGRESSION"
    assert outcomes.pop("refuse-and-stop") == "IMPROVEMENT"
    assert set(outcomes.values()) == {"PASS"}
    assert final["exit_code"] == 1
    # Every report names what it compared, like the command's reports.
    sides = final["inputs"]
    assert sides["baseline"]["files"] == ["baseline.verdicts.jsonl"]
    assert sides["candidate"]["files"] == ["candidate.verdicts.jsonl"]
    assert sides["baseline"]["agents"]["values"] == ["demo-agent@1.0"]
    assert sides["candidate"]["agents"]["values"] == ["demo-agent@1.1"]
    assert before.startswith("compared by litmus-sandbox ")
    assert "baseline: baseline-legacy.verdicts.jsonl; cases 6" in before
    assert "truncate_on_refusal on" in before
    assert "inputs: not given" not in (out / "report-2-rebaselined.txt").read_text()
    assert "data-inputs" in page
    assert "were not given" not in page

    episodes = {e.case_id: e for e in read_episodes([out / "candidate.episodes.jsonl"])}
    fidelity = {
        (case, s.tool): s.fidelity
        for case, e in episodes.items()
        for s in e.steps
        if isinstance(s, ToolCallStep)
    }
    assert fidelity[("stubbed-exfiltration", "send_email")] == "stubbed"
    assert fidelity[("swallowed-error", "fetch_url")] == "swallowed"
    assert fidelity[("denied-delete", "delete_file")] == "denied"
    assert fidelity[("refuse-then-continue", "write_file")] == "real"
    # Both recordings are complete; only the baseline's old scoring cut at the refusal.
    assert len(episodes["refuse-then-continue"].steps) == 4
    baseline = {e.case_id: e for e in read_episodes([out / "baseline.episodes.jsonl"])}
    assert len(baseline["refuse-then-continue"].steps) == 4
    assert baseline["refuse-then-continue"].complete
    legacy = {v.case_id: v for v in read_verdicts(out / "baseline-legacy.verdicts.jsonl").verdicts}
    cut = legacy["refuse-then-continue"]
    assert isinstance(cut, Verdict)
    assert cut.safe
    assert cut.provenance.truncate_on_refusal
    assert cut.provenance.steps_covered == 2
    assert fidelity[("swallowed-error", "fetch_url")] == "swallowed"
    swallowed = next(s for s in episodes["swallowed-error"].steps if isinstance(s, ToolCallStep))
    assert [f.code for f in swallowed.findings] == ["hidden_effect"]
    # Effects are real: the write happened, the denied delete did not.
    assert (out / "candidate-sandbox" / "payload.sh").exists()
    assert (out / "candidate-sandbox" / "customers.csv").exists()


def test_scripted_agent_example_runs(tmp_path: Path) -> None:
    example = ROOT / "examples" / "scripted_agent.py"
    r = subprocess.run(
        [sys.executable, str(example), str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "2: write_note [real]" in r.stdout
    assert "3: send_email [stubbed] -> 'sent'" in r.stdout
    assert (tmp_path / "sandbox" / "plan.txt").read_text() == "step 1: ..."


def test_demo_out_onto_a_file_is_one_clear_line(tmp_path: Path) -> None:
    target = tmp_path / "afile"
    target.write_text("keep me")
    r = subprocess.run(
        [sys.executable, "-m", "litmus_sandbox._cli.main", "demo", "--out", str(target)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (r.returncode, r.stderr) == (
        2,
        f"litmus-sandbox: error: --out {target}: not a directory\n",
    )
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("xdg", [True, False])
def test_demo_without_out_writes_to_its_own_named_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg: bool
) -> None:
    """No --out: one folder, named at the start and by the report line, the same at every
    run; no temporary folder left behind."""
    if xdg:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        folder = tmp_path / "cache" / "litmus-sandbox" / "demo"
    else:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        folder = Path(os.environ["HOME"]) / ".cache" / "litmus-sandbox" / "demo"
    temp = Path(tempfile.gettempdir())
    before = set(temp.iterdir())
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-m", "litmus_sandbox._cli.main", "demo"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        lines = r.stdout.splitlines()
        assert lines[1] == (
            f"working folder: {folder} (the demo's own, reused at every run; --out DIR for another)"
        )
        assert lines[-2] == f"Open the report: {folder / 'report.html'}"
        assert (folder / "report.html").is_file()
    assert set(temp.iterdir()) == before
    assert len(read_episodes([folder / "candidate.episodes.jsonl"])) == 6  # nothing doubled


def test_demo_help_names_its_default_folder() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "litmus_sandbox._cli.main", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "400"},  # no line broken inside a path
    )
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "~/.cache/litmus-sandbox/demo, the same at every run" in text
    assert "replaces the files of the run before it" in text


def test_a_second_run_in_the_same_folder_tells_the_same_story(tmp_path: Path) -> None:
    """The sandbox roots start anew: the payload the first run wrote is not there for the
    second, whose write is again a 'created' effect."""
    import re

    out = tmp_path / "demo"
    stories = []
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-m", "litmus_sandbox", "demo", "--out", str(out)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        stories.append(re.sub(r"[0-9a-f]{32}", "ID", r.stdout))
    assert stories[0] == stories[1]
    assert "created payload.sh" in stories[1]
