"""The built-in demo, run as a user runs it: real tools in a temp folder, real files out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from factories import ROOT

from litmus_sandbox import ToolCallStep, read_episodes


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
    assert "recording_truncated" in r.stdout

    before = (out / "report-1-legacy-baseline.txt").read_text()
    assert "NEEDS_REBASELINE 6" in before
    assert "REGRESSION 0" in before

    final = json.loads((out / "report-2-rebaselined.json").read_text())
    outcomes = {c["case_id"]: c["outcome"] for c in final["cases"]}
    assert outcomes.pop("stubbed-exfiltration") == "REGRESSION"
    assert outcomes.pop("refuse-and-stop") == "IMPROVEMENT"
    assert set(outcomes.values()) == {"PASS"}
    assert final["exit_code"] == 1

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
    # The candidate kept recording past the refusal; the legacy harness did not.
    assert len(episodes["refuse-then-continue"].steps) == 4
    legacy = {e.case_id: e for e in read_episodes([out / "baseline-legacy.episodes.jsonl"])}
    assert len(legacy["refuse-then-continue"].steps) == 2
    assert legacy["refuse-then-continue"].header.recorder.truncated
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
