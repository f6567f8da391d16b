"""Every report says which step was unsafe and why (the rule id or the judge's reason, and
the kind of evidence), not only ``safe -> unsafe``; ``gate -o`` says where it wrote."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from factories import legacy, replace, verdict

from litmus_sandbox._cli.main import main
from litmus_sandbox._core.suite import gate
from litmus_sandbox._model.records import AnyVerdict, StepVerdict
from litmus_sandbox._store.streams import write_verdicts
from litmus_sandbox.reports import render, to_dict
from litmus_sandbox.reports._shared import plural


def _regressed() -> tuple[list[AnyVerdict], list[AnyVerdict]]:
    """One REGRESSION (a rule that fired on a request), one IMPROVEMENT (a judge's reason
    on a claim), one unsafe legacy pair (no step verdicts to say which step)."""
    steps = [StepVerdict(index=i, safe=True) for i in range(4)]
    sent = StepVerdict(index=2, safe=False, rules=("exfiltration",), evidence="requested")
    said = StepVerdict(
        index=1, safe=False, reason="explains how to cut the alarm", evidence="claimed"
    )
    cand_a = replace(
        verdict("a", safe=False), steps=(*steps[:2], sent, steps[3]), first_unsafe_step=2
    )
    base_b = replace(
        verdict("b", safe=False), steps=(steps[0], said, *steps[2:]), first_unsafe_step=1
    )
    base: list[AnyVerdict] = [verdict("a"), base_b, legacy("c", safe=True)]
    cand: list[AnyVerdict] = [cand_a, verdict("b"), legacy("c", safe=False)]
    return base, cand


def test_json_report_names_each_unsafe_step_and_why() -> None:
    base, cand = _regressed()
    cases = {c["case_id"]: c for c in to_dict(gate(base, cand))["cases"]}
    assert cases["a"]["outcome"] == "REGRESSION"
    assert cases["a"]["candidate"]["unsafe_steps"] == [
        {
            "index": 2,
            "episode_id": "ep-a",
            "rules": ["exfiltration"],
            "reason": None,
            "evidence": "requested",
        }
    ]
    assert cases["a"]["baseline"]["unsafe_steps"] == []
    assert cases["b"]["baseline"]["unsafe_steps"][0]["reason"] == "explains how to cut the alarm"
    assert cases["c"]["candidate"]["unsafe_steps"] == []  # legacy: no step verdicts


def test_text_reports_say_which_step_was_unsafe_and_why() -> None:
    base, cand = _regressed()
    report = gate(base, cand)
    table = render(report, "table")
    assert "unsafe: candidate step 2: rule exfiltration (requested)" in table
    assert "unsafe: baseline step 1: explains how to cut the alarm (claimed)" in table
    assert "unsafe: candidate: no step verdicts to say which step (a legacy verdict)" in table
    md = render(report, "markdown")
    assert "unsafe: candidate step 2: rule exfiltration (requested)" in md
    suite = ET.fromstring(render(report, "junit"))
    failure = suite.find("testcase[@name='a']/failure")
    assert failure is not None
    assert (
        failure.get("message")
        == "REGRESSION: unsafe: candidate step 2: rule exfiltration (requested)"
    )
    assert failure.text is not None
    assert failure.text.startswith("safe -> unsafe\nunsafe: candidate step 2")


def test_many_unsafe_steps_are_cut_short() -> None:
    bad = tuple(StepVerdict(index=i, safe=False, rules=("r",)) for i in range(5))
    report = gate(
        [verdict("a")], [replace(verdict("a", safe=False), steps=bad, first_unsafe_step=0)]
    )
    table = render(report, "table")
    assert table.count("unsafe: candidate step") == 3
    assert "unsafe: candidate: 2 more unsafe steps" in table


def test_gate_output_file_is_named_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_verdicts(b, None, [verdict("a")])
    write_verdicts(c, None, [verdict("a")])
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    args = ["gate", "--baseline", str(b), "--candidate", str(c), "--format", "json"]
    assert main([*args, "-o", str(out), "--html", str(page)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"litmus-sandbox: json report written to {out}",
        f"litmus-sandbox: HTML report written to {page}",
    ]
    assert json.loads(out.read_text())["decision"] == "PASS"
    assert main(args) == 0
    assert capsys.readouterr().err == "", "nothing to say when the report is on stdout"


def test_counts_are_said_in_the_right_number() -> None:
    assert plural(1, "judge call") == "1 judge call"
    assert plural(0, "judge call") == "0 judge calls"
    assert plural(2, "baseline") == "2 baselines"
    report = gate([verdict("a", judge="old")], [verdict("a")], baseline_recordings={"a": 1})
    assert "re-score 1 baseline (1 judge call), re-run 0 baselines" in render(report, "table")
