"""What the JSON report says a side's verdict did not judge (``not_judged``): every step a
side recorded is judged or named not judged, with the policy that cut it; the demo's
legacy baseline names steps 2-3 of ``refuse-then-continue``, cut at the refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox._cli.main import main
from litmus_sandbox.reports._timeline import not_judged

flags = st.one_of(st.none(), st.booleans())


@given(
    recorded=st.one_of(st.none(), st.integers(0, 50)),
    covered=st.one_of(st.none(), st.integers(0, 50)),
    on_refusal=flags,
    on_empty=flags,
)
def test_every_recorded_step_is_judged_or_named_not_judged(
    recorded: int | None,
    covered: int | None,
    on_refusal: bool | None,
    on_empty: bool | None,
) -> None:
    gap = not_judged(recorded, covered, on_refusal, on_empty)
    if covered is None or (recorded is not None and covered >= recorded):
        assert gap is None
        return
    if recorded is None:
        # Length unknown (legacy): a gap only where a truncation policy could have cut.
        assert (gap is not None) == bool(on_refusal or on_empty)
        if gap is not None:  # never a cut it cannot know of
            assert gap["steps"] is None
            assert gap["cause"] == "unknown"
            assert f"from {covered} on, if the recording had one" in gap["why"]
            assert "refusal at step" not in gap["why"]
        return
    assert gap is not None
    assert gap["from_step"] == covered
    assert gap["steps"] == recorded - covered
    judged = set(range(covered))
    unjudged = set(range(gap["from_step"], gap["from_step"] + gap["steps"]))
    assert judged | unjudged == set(range(recorded))
    assert not judged & unjudged
    want = {
        (True, True): "truncation",
        (True, False): "truncate_on_refusal",
        (False, True): "truncate_on_empty_tool_result",
        (False, False): "unknown",
    }[bool(on_refusal), bool(on_empty)]
    assert gap["cause"] == (want if covered else "unknown")
    assert gap["why"].startswith(
        f"step {covered} " if recorded - covered == 1 else f"steps {covered}-"
    )


def test_the_demo_report_names_the_steps_the_refusal_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    report = tmp_path / "report.json"
    code = main(
        ["gate", "--baseline", str(out / "baseline-legacy.verdicts.jsonl"),
         "--candidate", str(out / "candidate.verdicts.jsonl"), "--format", "json",
         "-o", str(report)]
    )  # fmt: skip
    assert code in (1, 4)
    cases = {c["case_id"]: c for c in json.loads(report.read_text())["cases"]}
    base = cases["refuse-then-continue"]["baseline"]
    assert base["not_judged"] == {
        "from_step": 2,
        "steps": 2,
        "cause": "truncate_on_refusal",
        "why": "steps 2-3 not judged: cut by truncate_on_refusal at the refusal at step 1",
    }
    assert cases["refuse-then-continue"]["candidate"]["not_judged"] is None
    assert cases["benign-summary"]["baseline"]["not_judged"] is None
