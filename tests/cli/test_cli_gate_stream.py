"""``gate`` over files: nothing compared (exit 5), the engine's report as the in-memory
join's under any budget, JSON Lines, and no half report left behind."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from gate_suites import MemoryJoin

from litmus_sandbox._cli import main as cli
from litmus_sandbox._store import files, verdict_columns


def _legacy(case: str, safe: bool = True, judge: str = "j1") -> str:
    prov = {
        "truncate_on_refusal": False,
        "truncate_on_empty_tool_result": False,
        "steps_covered": 3,
        "judge_version": judge,
    }
    return json.dumps({"run_id": case, "safe": safe, "provenance": prov}) + "\n"


def _files(tmp_path: Path, n: int = 400, *, order: str = "same") -> tuple[Path, Path]:
    rng = random.Random(5)
    b_lines = [_legacy(f"c{i:04d}", rng.random() < 0.8) for i in range(n)]
    c_lines = [
        _legacy(f"c{i:04d}", rng.random() < 0.8, judge="j2" if i % 17 == 0 else "j1")
        for i in range(n + 30)
        if i % 23
    ]
    b_lines += [_legacy("c0003", False)]  # an epoch, away from the case's first verdict
    if order == "shuffled":
        rng.shuffle(c_lines)
    elif order == "sorted":
        b_lines.sort()  # the epoch beside its case
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    b.write_text("".join(b_lines))
    c.write_text("".join(c_lines))
    return b, c


def _gate(tmp_path: Path, *args: str, out: str = "report") -> tuple[int, str]:
    code = cli.main(["gate", *args, "-o", str(tmp_path / out)])
    return code, (tmp_path / out).read_text()


@pytest.mark.parametrize("fmt", ["table", "json", "jsonl", "junit", "markdown"])
def test_nothing_compared_exits_5_unless_allowed(tmp_path: Path, fmt: str) -> None:
    """Two empty inputs (a CI step that wrote nothing) never pass silently: each is an
    error (exit 2) unless accepted, and then nothing was compared (exit 5)."""
    (tmp_path / "b.jsonl").write_text("")
    (tmp_path / "c.jsonl").write_text("")
    args = ["--baseline", "b.jsonl", "--candidate", "c.jsonl", "--format", fmt]
    args = [str(tmp_path / a) if a.endswith(".jsonl") else a for a in args]
    assert cli.main(["gate", *args]) == 2
    assert cli.main(["gate", *args, "--allow-empty"]) == 2
    args.append("--allow-empty-input")
    code, text = _gate(tmp_path, *args)
    assert code == 5
    assert "EMPTY" in text
    code, text = _gate(tmp_path, *args, "--allow-empty")
    assert code == 0
    assert "EMPTY" not in text
    if fmt == "json":
        assert json.loads(text)["decision"] == "PASS"
    if fmt == "junit":
        props = {p.get("name"): p.get("value") for p in ET.fromstring(text).iter("property")}
        assert {k: props[k] for k in ("decision", "exit_code", "still_unsafe")} == {
            "decision": "PASS",
            "exit_code": "0",
            "still_unsafe": "0",
        }
        assert props["baseline_cases"] == props["candidate_cases"] == "0 (0 verdicts)"


def test_help_names_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["gate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for part in ("exit codes: 0", "4 no regression", "5 nothing was compared", "--allow-empty"):
        assert part in help_text


@pytest.mark.parametrize("order", ["same", "sorted", "shuffled"])
@pytest.mark.parametrize("fmt", ["table", "json", "jsonl", "junit", "markdown"])
def test_every_way_through_gives_the_same_report(
    tmp_path: Path, order: str, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine under the default budget, under a tiny one, and the in-memory
    reference join: the same report, byte for byte, and the same exit code."""
    b, c = _files(tmp_path, order=order)
    args = ["--baseline", str(b), "--candidate", str(c), "--format", fmt]
    code, text = _gate(tmp_path, *args)
    spilled = _gate(tmp_path, *args, "--memory-budget", "1K", out="spilled")
    assert spilled == (code, text)
    monkeypatch.setattr("litmus_sandbox._cli.gate.DuckJoin", MemoryJoin)
    joined = _gate(tmp_path, *args, out="joined")
    assert joined == (code, text)
    assert code == 1
    if fmt == "json":
        report = json.loads(text)
        assert report["counts"]["REGRESSION"] > 0
        assert report["statistics"]["cases"] == len(report["cases"]) == 429
        assert list(report) == [
            "decision",
            "exit_code",
            "litmus_sandbox_version",
            "inputs",
            "counts",
            "cases",
            "statistics",
            "unsafe_budget",
            "reasons",
            "rebaseline_plan",
            "unknown_exclusions",
            "warnings",
        ]
        epochs = next(x for x in report["cases"] if x["case_id"] == "c0003")
        assert epochs["baseline"]["epochs"] == 2


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_files_of_many_blocks_give_the_reference_report(
    tmp_path: Path, fmt: str, repeat: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files of several read blocks, shuffled, each case once on the baseline side (and
    once more on the candidate's, blocks apart): the engine's report is the in-memory
    join's, byte for byte."""
    rng = random.Random(8)
    n = 12_000  # some 2.4 MB a file: three 1 MiB blocks
    b_lines = [_legacy(f"case-{i:05d}", rng.random() < 0.8) for i in range(n)]
    c_lines = [
        _legacy(f"case-{i:05d}", rng.random() < 0.8, judge="j2" if i % 29 == 0 else "j1")
        for i in range(n + 40)
        if i % 31
    ]
    rng.shuffle(c_lines)
    if repeat:
        c_lines.append(c_lines[5].replace('"safe": true', '"safe": false'))
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    b.write_text("".join(b_lines))
    c.write_text("".join(c_lines))
    args = ["--baseline", str(b), "--candidate", str(c), "--format", fmt]
    code, text = _gate(tmp_path, *args)
    assert _gate(tmp_path, *args, "--memory-budget", "1K", out="spilled") == (code, text)
    monkeypatch.setattr("litmus_sandbox._cli.gate.DuckJoin", MemoryJoin)
    assert _gate(tmp_path, *args, out="joined") == (code, text)
    assert code == 1
    assert text.count("REGRESSION") > 100


def test_each_file_is_read_once_and_its_torn_last_line_warned_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case listed twice on the candidate's side, blocks apart, and a torn last line:
    each file read once, the torn line reported once, the reference join's report."""
    n = 12_000  # three 1 MiB blocks
    b_lines = [_legacy(f"case-{i:05d}", i % 7 != 0) for i in range(n)]
    c_lines = [_legacy(f"case-{i:05d}", i % 5 != 0) for i in reversed(range(n))]
    c_lines.append(c_lines[3].replace('"safe": true', '"safe": false'))
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    b.write_text("".join(b_lines))
    c.write_text("".join(c_lines) + '{"run_id": "torn", "sa')
    opened: list[str] = []
    real_open = files.open_input

    def counting(path: str, *args: Any, **kw: Any) -> Any:
        opened.append(path)
        return real_open(path, *args, **kw)

    monkeypatch.setattr(verdict_columns, "open_input", counting)
    args = ["--baseline", str(b), "--candidate", str(c)]
    code, text = _gate(tmp_path, *args)
    assert opened == [str(b), str(c)]
    torn = f"{c}:{n + 2}: warning: torn last line"
    assert text.count("torn last line") == 1
    assert torn in text
    assert code == 1
    monkeypatch.setattr("litmus_sandbox._cli.gate.DuckJoin", MemoryJoin)
    assert _gate(tmp_path, *args, out="joined") == (code, text)


def test_jsonl_is_a_line_per_case_then_the_summary(tmp_path: Path) -> None:
    b, c = _files(tmp_path, order="shuffled")
    code, text = _gate(tmp_path, "--baseline", str(b), "--candidate", str(c), "--format", "jsonl")
    lines = [json.loads(line) for line in text.splitlines()]
    *cases, summary = lines
    assert {x["kind"] for x in cases} == {"case"}
    assert summary["kind"] == "summary"
    assert (summary["decision"], summary["exit_code"]) == ("REGRESSION", code)
    assert summary["statistics"]["cases"] == len(cases)
    assert "cases" not in summary
    # Gate order: the baseline's cases as they first appear, then the candidate's own.
    ids = [x["case_id"] for x in cases]
    assert ids[:400] == [f"c{i:04d}" for i in range(400)]
    assert set(ids[400:]) == {f"c{i:04d}" for i in range(400, 430) if i % 23}
    _, whole = _gate(tmp_path, "--baseline", str(b), "--candidate", str(c), "--format", "json")
    report = json.loads(whole)
    assert sorted(cases, key=lambda x: x["case_id"]) == sorted(
        ({"kind": "case", **x} for x in report["cases"]), key=lambda x: x["case_id"]
    )
    assert {k: v for k, v in summary.items() if k != "kind"} == {
        k: v for k, v in report.items() if k != "cases"
    }


def test_a_bad_line_late_in_the_input_leaves_no_half_report(tmp_path: Path) -> None:
    b, c = _files(tmp_path)
    with c.open("a") as f:
        f.write("{oops\n" + _legacy("c9999"))
    report = tmp_path / "report.jsonl"
    report.write_text("the previous report\n")
    code = cli.main(
        [
            "gate",
            "--baseline",
            str(b),
            "--candidate",
            str(c),
            "--format",
            "jsonl",
            "-o",
            str(report),
        ]
    )
    assert code == 2
    assert report.read_text() == "the previous report\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_memory_budget_is_a_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b, c = _files(tmp_path, 10)
    with pytest.raises(SystemExit) as exc:
        cli.main(["gate", "--baseline", str(b), "--candidate", str(c), "--memory-budget", "lots"])
    assert exc.value.code == 2
    assert "expected a positive size" in capsys.readouterr().err


def test_junit_carries_the_readers_warnings_as_the_suites_stderr(tmp_path: Path) -> None:
    """A torn last line is reported in every format: JUnit's is the suite's system-err."""
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    b.write_text(_legacy("a") + _legacy("b"))
    c.write_text(_legacy("a") + _legacy("b", safe=False) + '{"run_id": "torn", "sa')
    code, text = _gate(tmp_path, "--baseline", str(b), "--candidate", str(c), "--format", "junit")
    assert code == 1
    suite_el = ET.fromstring(text)
    [err] = suite_el.findall("system-err")
    assert (
        err.text == f"{c}:3: warning: torn last line (the writer stopped mid-record); "
        "kept every whole line\n"
    )
    c.write_text(_legacy("a") + _legacy("b", safe=False))
    _, clean = _gate(tmp_path, "--baseline", str(b), "--candidate", str(c), "--format", "junit")
    assert ET.fromstring(clean).findall("system-err") == []
