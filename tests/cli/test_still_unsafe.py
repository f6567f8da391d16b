"""Cases still unsafe (unsafe on both sides: a PASS) called out in every format, and
``gate --max-unsafe N|P%``, an absolute bar on the candidate."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from factories import legacy, verdict
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import gate, reports
from litmus_sandbox._core.suite import UnsafeLimit, stream_gate


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "litmus_sandbox._cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"LITMUS_CACHE": str(cwd / "cache.sqlite"), "PATH": "/usr/bin:/bin"},
    )


def _dump(path: Path, verdicts: list[Any]) -> None:
    path.write_bytes(b"".join(msgspec.json.encode(v) + b"\n" for v in verdicts))


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Ten comparable legacy cases: s1 regresses, u1-u3 are unsafe on both sides, the
    rest safe on both."""
    b = [legacy(f"p{i}", True) for i in range(6)] + [legacy("s1", True)]
    c = [legacy(f"p{i}", True) for i in range(6)] + [legacy("s1", False)]
    b += [legacy(f"u{i}", False) for i in (1, 2, 3)]
    c += [legacy(f"u{i}", False) for i in (1, 2, 3)]
    _dump(tmp_path / "b.jsonl", b)
    _dump(tmp_path / "c.jsonl", c)
    return tmp_path


def _gate(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run("gate", "--baseline", "b.jsonl", "--candidate", "c.jsonl", *extra, cwd=folder)


def test_every_format_counts_and_marks_the_cases_still_unsafe(files: Path) -> None:
    table = _gate(files)
    assert table.returncode == 1  # s1 regressed
    rows = [line for line in table.stdout.splitlines() if line.startswith("u")]
    assert len(rows) == 3
    assert all(row.endswith("unsafe -> unsafe  (still unsafe)") for row in rows)
    assert "still unsafe 3" in table.stdout

    report = json.loads(_gate(files, "--format", "json").stdout)
    assert report["statistics"]["still_unsafe"] == 3
    assert report["unsafe_budget"] is None
    still = [
        c["case_id"]
        for c in report["cases"]
        if c["outcome"] == "PASS" and not c["candidate"]["safe"]
    ]
    assert still == ["u1", "u2", "u3"]

    summary = json.loads(_gate(files, "--format", "jsonl").stdout.splitlines()[-1])
    assert summary["kind"] == "summary"
    assert summary["statistics"]["still_unsafe"] == 3

    md = _gate(files, "--format", "markdown").stdout
    assert md.count("| PASS **still unsafe** | unsafe → unsafe |") == 3
    assert "still unsafe (unsafe→unsafe, a PASS) 3." in md

    suite = ET.fromstring(_gate(files, "--format", "junit").stdout)
    props = {p.get("name"): p.get("value") for p in suite.find("properties") or ()}
    assert props["still_unsafe"] == "3"
    marked = [
        t.get("name")
        for t in suite.iter("testcase")
        if t.find("properties/property[@name='still_unsafe']") is not None
    ]
    assert marked == ["u1", "u2", "u3"]
    for name in marked:  # still passing test cases, saying why in system-out
        case = suite.find(f"testcase[@name='{name}']")
        assert case is not None
        assert case.find("failure") is None
        assert case.find("error") is None
        assert "still unsafe: unsafe -> unsafe" in (case.findtext("system-out") or "")


@pytest.mark.parametrize(
    ("limit", "code", "exceeded", "echo"),
    [
        ("4", 1, False, 4),  # 1 regression + 3 still unsafe = 4: not past 4; s1 regressed
        ("3", 1, True, 3),
        ("40%", 1, False, "40%"),  # 4 of 10 is 40%: not past it
        ("39.9%", 1, True, "39.9%"),
    ],
)
def test_max_unsafe_counts_regressions_and_still_unsafe_cases(
    files: Path, limit: str, code: int, exceeded: bool, echo: int | str
) -> None:
    r = _gate(files, "--format", "json", "--max-unsafe", limit)
    assert r.returncode == code
    budget = json.loads(r.stdout)["unsafe_budget"]
    assert budget == {"limit": echo, "candidate_unsafe": 4, "exceeded": exceeded}


def test_max_unsafe_alone_blocks_with_exit_1_and_says_why(tmp_path: Path) -> None:
    """No regression: only the budget blocks; the table's summary line says so."""
    _dump(tmp_path / "b.jsonl", [legacy("u1", False), legacy("u2", False), legacy("p", True)])
    _dump(tmp_path / "c.jsonl", [legacy("u1", False), legacy("u2", False), legacy("p", True)])
    assert _gate(tmp_path).returncode == 0
    assert _gate(tmp_path, "--max-unsafe", "2").returncode == 0
    r = _gate(tmp_path, "--max-unsafe", "1")
    assert r.returncode == 1
    assert (
        "unsafe budget (--max-unsafe 1): 2 of 3 comparable cases unsafe in the candidate, "
        "more than 1 case: exceeded, the gate blocks"
    ) in r.stdout
    assert r.stdout.rstrip().endswith("decision: REGRESSION (exit 1)")
    r = _gate(tmp_path, "--max-unsafe", "0%", "--format", "junit")
    props = {p.get("name"): p.get("value") for p in ET.fromstring(r.stdout).iter("property")}
    assert r.returncode == 1
    assert props["unsafe_budget_exceeded"] == "true"
    assert props["max_unsafe"] == "0%"
    # The budget is a test case of its own: failed, so a dashboard counting failures
    # shows the block though no case regressed; passed within the budget.
    suite = ET.fromstring(r.stdout)
    (budget,) = [t for t in suite.iter("testcase") if t.get("classname") == "litmus.gate.budget"]
    assert budget.get("name") == "unsafe budget (--max-unsafe 0%)"
    assert budget.find("failure") is not None
    assert (suite.get("tests"), suite.get("failures")) == ("4", "1")
    r = _gate(tmp_path, "--max-unsafe", "2", "--format", "junit")
    suite = ET.fromstring(r.stdout)
    assert suite.get("failures") == "0"
    assert [t.find("failure") for t in suite.iter("testcase")] == [None] * 4


@pytest.mark.parametrize("value", ["-1", "1.5", "abc", "", "101%", "5 %", "%", "1e3", "٣"])
def test_a_bad_max_unsafe_is_one_line_and_exit_2(files: Path, value: str) -> None:
    r = _gate(files, "--max-unsafe", value)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1
    assert "--max-unsafe" in r.stderr
    assert "Traceback" not in r.stderr


_side = st.lists(
    st.one_of(
        st.builds(
            lambda k, safe, j: legacy(k, safe, judge_version=j),
            st.sampled_from("abcdef"),
            st.booleans(),
            st.sampled_from(["j1", "j1", "j2"]),
        ),
        st.builds(lambda k, safe: verdict(k, safe), st.sampled_from("abcdef"), st.booleans()),
    ),
    max_size=10,
)


@given(_side, _side)
def test_still_unsafe_is_every_pass_unsafe_on_both_sides_whoever_lines_up(
    b: list[Any], c: list[Any]
) -> None:
    """The count is the PASS cases whose sides are both unsafe, whether the sink lists
    the plain passes or not; a sink that lists none still gets every such case."""
    report = gate(b, c)
    still = [
        r.case_id
        for r in report.cases
        # Each side's verdict is pass^k over its epochs.
        if r.outcome == "PASS"
        and not all(v.safe for v in r.baseline)
        and not all(v.safe for v in r.candidate)
    ]
    assert report.statistics.still_unsafe == len(still)
    assert [r.case_id for r in report.cases if r.still_unsafe] == still

    class Quiet:
        plain = False

        def __init__(self) -> None:
            self.cases: list[Any] = []

        def write(self, results: Any) -> None:
            self.cases.extend(results)

    quiet = Quiet()
    assert stream_gate(b, c, quiet) == report.summary()
    assert [r.case_id for r in quiet.cases if r.still_unsafe] == still


@given(st.integers(0, 50), st.integers(0, 50), st.decimals(0, 100, places=2))
def test_a_percentage_limit_is_exact(unsafe: int, comparable: int, percent: Decimal) -> None:
    limit = UnsafeLimit.parse(f"{percent}%")
    assert limit.limit == f"{percent}%"
    assert limit.exceeded(unsafe, comparable) == (unsafe * 100 > percent * comparable)
    assert UnsafeLimit.parse(str(unsafe)).exceeded(comparable, 0) == (comparable > unsafe)


@pytest.mark.parametrize("fmt", sorted(reports.FORMATS))
def test_the_budget_streamed_is_the_budget_rendered(fmt: str) -> None:
    b = [legacy("u1", False), legacy("s", True)]
    c = [legacy("u1", False), legacy("s", False)]
    limit = UnsafeLimit.parse("1")
    out = io.BytesIO()
    with reports.writer(fmt, out, max_unsafe=limit) as w:
        summary = stream_gate(b, c, w)
        w.finish(summary)
    text = out.getvalue().decode()
    assert text == reports.render(gate(b, c), fmt, max_unsafe=limit) + "\n"
    assert summary.exit_code(max_unsafe=limit) == 1
    assert summary.over_budget(limit)
    assert not summary.over_budget(UnsafeLimit.parse("2"))
