"""A reader that leaves early (``| head -1``) never changes a command's exit code: a
REGRESSION stays exit 1 however much of the report was read. And a Python judge that
calls ``sys.exit`` is a judge failure (exit 6), never the command's exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from factories import verdict

from litmus_sandbox import JsonlWriter


@pytest.fixture
def regression(tmp_path: Path) -> Path:
    """2,000 cases that regress: a report far larger than a pipe holds."""
    for side, safe in (("b", True), ("c", False)):
        with JsonlWriter(tmp_path / f"{side}.jsonl") as out:
            out.write_many(verdict(f"case-{i:05d}", safe=safe) for i in range(2000))
    return tmp_path


@pytest.mark.parametrize("fmt", ["table", "json", "jsonl", "junit", "markdown"])
def test_a_regression_stays_exit_1_when_the_reader_leaves(regression: Path, fmt: str) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "litmus_sandbox", "gate", "--baseline", "b.jsonl",
         "--candidate", "c.jsonl", "--format", fmt],
        cwd=regression, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        assert process.stdout.readline()  # one line read, then the reader is gone
        process.stdout.close()
        assert process.wait(60) == 1
        assert process.stderr is not None
        assert process.stderr.read() == b""


def test_a_judge_calling_sys_exit_is_a_judge_failure(regression: Path) -> None:
    from factories import call, episode, msg

    eps = regression / "eps.jsonl"
    ep = episode([msg(0, "user", "hi"), call(1, "search")])
    with JsonlWriter(eps) as out:
        out.write(ep.header)
        out.write_many(ep.steps)
        assert ep.end is not None
        out.write(ep.end)
    (regression / "j.py").write_text("import sys\n\ndef judge(step, context):\n    sys.exit(0)\n")
    (regression / "p.toml").write_text(
        '[judge]\nkind = "python"\nentry = "j:judge"\npath = "j.py"\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "litmus_sandbox", "score", "eps.jsonl", "--policy", "p.toml",
         "-o", "v.jsonl", "--no-cache"],
        cwd=regression, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 6
    assert "judge_error" in r.stderr
    assert "the judge called sys.exit(0)" in r.stderr


#: In-process use with standard output put on a file that nothing else holds; the
#: command then opens files of its own (a spool past its memory) while it writes.
IN_PROCESS = """
import sys
from litmus_sandbox._cli.main import main
sys.stdout = open(sys.argv[1], "w")
sys.argv = ["litmus-sandbox", "gate", "--baseline", "b.jsonl", "--candidate", "c.jsonl"]
sys.exit(main())
"""


def test_a_stdout_nothing_else_holds_keeps_its_file(regression: Path) -> None:
    """The stream that owned standard output's file must outlive its replacement: were
    it collected, its descriptor would close, a file opened later would take its number,
    and the report would be written into that file instead."""
    done = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, "report.txt"],
        cwd=regression, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = (regression / "report.txt").read_text()
    assert report.count("REGRESSION") >= 2000
    assert report.rstrip().endswith("decision: REGRESSION (exit 1)")
