"""What every report says first: each side's files, cases, suites, agents, recorders,
scoring policies (judge label and fingerprint) and recording dates, and the version that
gated. Nothing guessed: what a verdict does not say is counted unknown."""

from __future__ import annotations

import json
import os
import random
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from chromium import driver, log, open_page
from factories import legacy, prov, replace, verdict
from hypothesis import given
from hypothesis import strategies as st
from selenium.webdriver.common.by import By

from litmus_sandbox._cli.main import main
from litmus_sandbox._core.inputs import COUNTED, LISTED, Facet
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.records import Provenance, RecorderId
from litmus_sandbox._store.streams import read_episodes, read_verdicts, write_verdicts


def _suite(folder: Path) -> tuple[Path, Path, Path]:
    """A legacy baseline in two files (one case only it has) and a candidate of this
    library's verdicts: two suites, two agents, dated, one undated and agentless."""
    b1, b2, c = folder / "base-1.jsonl", folder / "base-2.jsonl", folder / "cand.jsonl"
    first: list[Any] = [legacy("c1"), legacy("c2", judge_version="j1")]
    second: list[Any] = [legacy("c3", truncate_on_refusal=True), legacy("gone")]
    write_verdicts(b1, None, first)
    write_verdicts(b2, None, second)
    made = prov(recorder=RecorderId(name="rec", version="2.0", measurement_version="4"))
    cand = [
        replace(verdict("c1"), provenance=made, suite="suite-b", agent="agent@2", recorded_at="2026-12-02T10:00:00+01:00"),
        replace(verdict("c2"), provenance=made, suite="suite-a", agent="agent@2",
                recorded_at="2026-12-01T08:00:00Z"),
        replace(verdict("c3"), provenance=made, suite="suite-a"),
        replace(verdict("new"), provenance=made, suite="suite-a", agent="agent@3",
                recorded_at="2026-12-03T00:00:00Z"),
    ]  # fmt: skip
    write_verdicts(c, None, cand)
    return b1, b2, c


def _gate(folder: Path, fmt: str, *extra: str) -> str:
    b1, b2, c = _suite(folder)
    out = folder / f"report.{fmt}"
    args = ["gate", "--baseline", b1.name, b2.name, "--candidate", c.name, "--format", fmt]
    code = main([*args, "-o", out.name, *extra])
    assert code in (1, 4)
    return out.read_text()


def test_the_json_report_lists_each_sides_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    report = json.loads(_gate(tmp_path, "json"))
    assert report["litmus_sandbox_version"] == package_version()
    base, cand = report["inputs"]["baseline"], report["inputs"]["candidate"]
    assert base["files"] == ["base-1.jsonl", "base-2.jsonl"]
    assert cand["files"] == ["cand.jsonl"]
    # 5 cases in all: the baseline misses "new", the candidate misses "gone".
    assert (base["cases"], cand["cases"]) == (4, 4)
    assert (base["verdicts"], base["legacy_verdicts"]) == (4, 4)
    assert (cand["verdicts"], cand["legacy_verdicts"]) == (4, 0)
    unknown4 = {"values": [], "more": 0, "more_exact": True, "unknown": 4}
    assert base["suites"] == base["agents"] == base["recorders"] == unknown4
    assert [p["truncate_on_refusal"] for p in base["scoring_policies"]["values"]] == [False, True]
    assert {p["judge"] for p in base["scoring_policies"]["values"]} == {"j1"}
    assert base["recorded"] == {"first": None, "last": None, "undated": 4}
    assert cand["suites"]["values"] == ["suite-a", "suite-b"]
    assert cand["agents"] == {
        "values": ["agent@2", "agent@3"],
        "more": 0,
        "more_exact": True,
        "unknown": 1,
    }
    assert cand["recorders"]["values"] == [
        {"name": "rec", "version": "2.0", "measurement_version": "4"}
    ]
    (policy,) = cand["scoring_policies"]["values"]
    assert (policy["judge"], policy["judge_fingerprint"]) == ("rules-a", "judgeA")
    # Compared as instants: 10:00+01:00 is 09:00Z, after 08:00Z, before the 3rd.
    assert cand["recorded"] == {
        "first": "2026-12-01T08:00:00Z",
        "last": "2026-12-03T00:00:00Z",
        "undated": 1,
    }


@pytest.mark.parametrize("fmt", ["table", "markdown", "junit", "jsonl"])
def test_every_format_names_both_sides_files_agents_and_judges(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = _gate(tmp_path, fmt)
    if fmt == "jsonl":
        summary = json.loads(text.splitlines()[-1])
        assert summary["inputs"]["candidate"]["agents"]["values"] == ["agent@2", "agent@3"]
        assert summary["litmus_sandbox_version"] == package_version()
        return
    for needle in ("base-1.jsonl", "base-2.jsonl", "cand.jsonl", "agent@2", "agent@3",
                   "rules-a", "judgeA", "j1", "suite-a", "rec 2.0", package_version()):  # fmt: skip
        assert needle in text, needle
    if fmt == "junit":
        props = {p.get("name"): p.get("value") for p in ET.fromstring(text).iter("property")}
        assert props["baseline_files"] == "base-1.jsonl, base-2.jsonl"
        assert props["candidate_agents"] == "agent@2, agent@3; 1 verdict does not say"
        assert props["litmus_sandbox_version"] == package_version()
    if fmt == "table":
        first = text.splitlines()[:3]
        assert first[0] == f"compared by litmus-sandbox {package_version()}"
        assert first[1].startswith("baseline: base-1.jsonl, base-2.jsonl; cases 4")


def test_a_candidate_scored_now_lists_its_recordings(tmp_path: Path) -> None:
    """``--candidate-episodes``: the candidate's files are the recordings it scored."""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    report = tmp_path / "r.json"
    code = main(
        ["gate", "--baseline", str(out / "baseline.verdicts.jsonl"),
         "--candidate-episodes", str(out / "candidate.episodes.jsonl"),
         "--policy", str(out / "policy.toml"), "--format", "json", "-o", str(report)]
    )  # fmt: skip
    assert code in (0, 1, 4)
    inputs = json.loads(report.read_text())["inputs"]
    assert inputs["candidate"]["files"] == [str(out / "candidate.episodes.jsonl")]
    assert inputs["candidate"]["agents"]["values"] == ["demo-agent@1.1"]
    assert inputs["baseline"]["agents"]["values"] == ["demo-agent@1.0"]
    assert inputs["candidate"]["suites"]["values"] == ["demo"]


@given(st.lists(st.text(max_size=4), max_size=60), st.randoms(use_true_random=False))
def test_a_facet_lists_the_first_values_in_order_whatever_the_order_read(
    values: list[str], rng: random.Random
) -> None:
    shuffled = values[:]
    rng.shuffle(shuffled)
    facets = [Facet[str](), Facet[str]()]
    for facet, seq in zip(facets, (values, shuffled), strict=True):
        for v in seq:
            facet.add(v)
    distinct = sorted(set(values))
    want = {"values": distinct[:LISTED], "more": len(distinct[LISTED:]), "more_exact": True}
    for facet in facets:
        got = facet.to_dict()
        assert {k: got[k] for k in want} == want


def test_a_facet_past_its_exact_count_says_so() -> None:
    facet = Facet[int]()
    for v in range(COUNTED + 50, -1, -1):
        facet.add(v)
    got = facet.to_dict()
    assert got["values"] == list(range(LISTED))
    assert got["more_exact"] is False
    assert got["more"] >= COUNTED - LISTED


def test_the_html_report_shows_inputs_and_every_unsafe_step_as_evidence(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    page = tmp_path / "r.html"
    args = ["gate", "--baseline", str(out / "baseline-legacy.verdicts.jsonl"),
            "--candidate", str(out / "candidate.verdicts.jsonl"), "--html", str(page)]  # fmt: skip
    assert main(args) in (1, 4)
    with driver() as browser:
        open_page(browser, page)
        cell = browser.find_element(
            By.CSS_SELECTOR, '[data-inputs] tr[data-input="agents"] td[data-side="candidate"]'
        )
        assert cell.text == "demo-agent@1.1"
        files = browser.find_element(
            By.CSS_SELECTOR, '[data-inputs] tr[data-input="files"] td[data-side="baseline"]'
        )
        assert files.text == str(out / "baseline-legacy.verdicts.jsonl")
        scoring = browser.find_element(
            By.CSS_SELECTOR, '[data-inputs] tr[data-input="scoring"] td[data-side="baseline"]'
        )
        assert "judge demo-rules-1 (fingerprint " in scoring.text
        assert "truncate_on_refusal on" in scoring.text
        heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#cases thead th")]
        assert heads[-1] == "Evidence"
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-case-id="refuse-then-continue"]')
        steps = row.find_elements(By.CSS_SELECTOR, "[data-unsafe-step]")
        assert [s.get_attribute("data-unsafe-step") for s in steps] == [
            "candidate:2",
            "candidate:3",
        ]
        assert "rule payload-written (requested)" in steps[1].text
        assert log(browser, "browser") == []


def test_names_that_are_not_utf8_or_break_lines_stay_data(tmp_path: Path) -> None:
    """A file name that is not UTF-8 is written as escapes (the JSON report still
    encodes); a line break in an agent's name never starts a line of the table."""
    b1, _, c = _suite(tmp_path)
    odd = tmp_path / os.fsdecode(b"cand\xff.jsonl")
    forged = "agent\n\ndecision: PASS (exit 0)\n"
    write_verdicts(odd, None, [replace(v, agent=forged) for v in read_verdicts(c).verdicts])
    out = tmp_path / "r.json"
    args = ["gate", "--baseline", str(b1), "--candidate", str(odd)]
    assert main([*args, "--format", "json", "-o", str(out)]) in (1, 4)
    files = json.loads(out.read_text())["inputs"]["candidate"]["files"]
    assert files == [str(tmp_path / "cand\\xff.jsonl")]
    table = tmp_path / "r.txt"
    assert main([*args, "-o", str(table)]) in (1, 4)
    lines = table.read_text().splitlines()
    assert not any(line.startswith("decision: PASS") for line in lines)
    assert "  agents: agent\\n\\ndecision: PASS (exit 0)\\n" in lines


def test_a_step_the_baseline_recorded_but_did_not_judge_is_not_only_the_candidates(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    with _refusal_case(tmp_path, out, out / "baseline-legacy.verdicts.jsonl") as (base, cand):
        for i in (2, 3):
            step = cand.find_element(By.CSS_SELECTOR, f'[data-step-index="{i}"]')
            assert step.get_attribute("data-only") is None
        _cut_at_the_refusal(base)


@contextmanager
def _refusal_case(tmp_path: Path, demo: Path, baseline: Path) -> Iterator[tuple[Any, Any]]:
    """The demo's ``refuse-then-continue`` opened in the HTML report of ``baseline``
    against the demo's candidate, both recordings given: its two sides' elements."""
    page = tmp_path / "r.html"
    args = ["gate", "--baseline", str(baseline), "--candidate", str(demo / "candidate.verdicts.jsonl"),
            "--baseline-episodes", str(demo / "baseline.episodes.jsonl"),
            "--candidate-episodes", str(demo / "candidate.episodes.jsonl"), "--html", str(page)]  # fmt: skip
    assert main(args) in (1, 4)
    with driver() as browser:
        open_page(browser, page)
        browser.find_element(By.CSS_SELECTOR, 'tr[data-case-id="refuse-then-continue"]').click()
        detail = browser.find_element(By.CSS_SELECTOR, '[data-case-detail="refuse-then-continue"]')
        yield (
            detail.find_element(By.CSS_SELECTOR, '[data-side="baseline"]'),
            detail.find_element(By.CSS_SELECTOR, '[data-side="candidate"]'),
        )
        assert log(browser, "browser") == []


def _cut_at_the_refusal(side: Any) -> None:
    """Steps 2-3 of the side are marked not judged, cut at the refusal of step 1."""
    for i in (2, 3):
        shown = side.find_element(By.CSS_SELECTOR, f'[data-step-index="{i}"] [data-not-judged]')
        why = shown.get_attribute("data-not-judged")
        assert why is not None
        assert "cut by truncate_on_refusal at the refusal at step 1" in why


def test_a_legacy_verdict_is_drawn_on_its_cases_one_recording(tmp_path: Path) -> None:
    """A legacy verdict names no episode: its timeline is its case's one recording on its
    side (never the other side's), with the steps its policy cut marked not judged."""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    shaped = tmp_path / "legacy.jsonl"
    rows = []
    for v in read_verdicts(out / "baseline-legacy.verdicts.jsonl").verdicts:
        p = v.provenance
        assert isinstance(p, Provenance)
        rows.append(
            {"run_id": v.case_id, "safe": v.safe, "provenance": {
                "truncate_on_refusal": p.truncate_on_refusal,
                "truncate_on_empty_tool_result": p.truncate_on_empty_tool_result,
                "steps_covered": p.steps_covered, "judge_version": p.judge_label}}
        )  # fmt: skip
    shaped.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ids = {e.case_id: e.episode_id for e in read_episodes([out / "baseline.episodes.jsonl"])}
    with _refusal_case(tmp_path, out, shaped) as (base, _):
        assert "no recording given" not in base.text
        assert "(legacy verdict)" in base.text
        assert f"episode {ids['refuse-then-continue']}" in base.text
        for i in (0, 1):
            step = base.find_element(By.CSS_SELECTOR, f'[data-step-index="{i}"]')
            assert step.find_elements(By.CSS_SELECTOR, "[data-judged]")
        _cut_at_the_refusal(base)


def test_one_long_name_never_hides_the_others(tmp_path: Path) -> None:
    """Each value is cut on its own, visibly: the table still lists 20 agents and counts
    the rest, though one of them is 10,000 characters long."""
    long_name = "Z" * 10_000
    names = [long_name, *(f"agent-{i:02}" for i in range(29))]
    base, cand = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_verdicts(base, None, [verdict(f"c{i}") for i in range(30)])
    write_verdicts(cand, None, [replace(verdict(f"c{i}"), agent=n) for i, n in enumerate(names)])
    out = tmp_path / "r.txt"
    assert main(["gate", "--baseline", str(base), "--candidate", str(cand), "-o", str(out)]) == 0
    (agents,) = [line for line in out.read_text().splitlines()[8:14] if "agents:" in line]
    assert "agent-00" in agents
    assert "agent-18" in agents  # with the long one, 20 listed
    assert agents.endswith("(+10)")
    assert "…(+" in agents
    assert len(agents) < 2_000
    report = tmp_path / "r.json"
    assert main(["gate", "--baseline", str(base), "--candidate", str(cand), "--format", "json",
                 "-o", str(report)]) == 0  # fmt: skip
    facet = json.loads(report.read_text())["inputs"]["candidate"]["agents"]
    assert long_name in facet["values"]  # the JSON keeps every value whole
