"""``litmus-sandbox replay``: offline checks against a cassette, and the runtime's own log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from factories import call, end, header, msg

from litmus_sandbox import JsonlWriter, Policy, Sandbox
from litmus_sandbox._cli.main import main

pytestmark = pytest.mark.anyio


def write(path: Path, eid: str, calls: list[tuple[str, dict[str, Any]]], case: str = "c1") -> Path:
    with JsonlWriter(path) as w:
        w.write(header(eid, case))
        w.write(msg(0, "user", "go", eid=eid))
        for i, (tool, args) in enumerate(calls, start=1):
            w.write(call(i, tool, args=args, eid=eid))
        w.write(end(eid, len(calls) + 1))
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    rec: list[tuple[str, dict[str, Any]]] = [
        ("search", {"q": "a", "rid": 1}),
        ("send", {"to": "x"}),
    ]
    return {
        "rec": write(tmp_path / "rec.jsonl", "rec", rec),
        "same": write(
            tmp_path / "same.jsonl",
            "same",
            [("search", {"rid": 2, "q": "a"}), ("send", {"to": "x"})],
        ),
        "swapped": write(
            tmp_path / "swapped.jsonl",
            "sw",
            [("send", {"to": "x"}), ("search", {"q": "a", "rid": 1})],
        ),
        "other": write(tmp_path / "other.jsonl", "o", [("search", {"q": "b", "rid": 1})]),
    }


def test_check_passes_when_calls_follow_the_cassette(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", "--check", "--cassette", str(files["rec"]), str(files["same"])]
    assert main([*argv, "--ignore", "$.rid"]) == 0
    assert "0 of 1 episodes diverged" in capsys.readouterr().out
    assert main(argv) == 1  # rid differs unless ignored
    assert main([*argv, "--ignore", "rid"]) == 0  # "rid" reads as "$.rid"


def test_strict_order_catches_a_permutation_that_any_order_accepts(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["replay", "--check", "--cassette", str(files["rec"]), str(files["swapped"])]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--order", "strict", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["diverged"] is True
    assert report["exit_code"] == 1
    (ep,) = report["episodes"]
    first = ep["first_divergence"]
    assert (first["step"], first["tool"], first["reason"]) == (1, "send", "out_of_order")
    assert first["expected"]["tool"] == "search"


def test_divergence_report_names_closest_calls_and_unused_ones(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", "--check", "--cassette", str(files["rec"]), str(files["other"])])
    out = capsys.readouterr().out
    assert code == 1
    assert "first divergence:" in out
    assert 'step 1: search {"q":"b","rid":1}: no recorded call has this tool' in out
    assert "differs at $.q" in out
    assert "recorded calls never used:" in out
    assert 'send {"to":"x"}' in out
    # Without --check the report is printed and the exit is 0.
    assert main(["replay", "--cassette", str(files["rec"]), str(files["other"])]) == 0


def test_policy_limits_the_check_to_replayed_tools(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\nsend = "replay"\n[replay]\norder = "strict"\n')
    argv = ["replay", "--check", "--cassette", str(files["rec"]), "--policy", str(policy)]
    assert main([*argv, str(files["swapped"])]) == 0  # search is real: not checked
    assert main([*argv, str(files["other"])]) == 1  # the recorded send never came
    capsys.readouterr()


def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind":"episode","v":1,"episode_id":"e","case_id":"c"}\nnot json\n{}\n')
    assert main(["replay", "--check", "--cassette", str(bad), str(files["same"])]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2:" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["replay", "--check", str(files["same"])]) == 2
    assert "no episode in" in capsys.readouterr().err
    assert main(["replay", "--order", "strict", str(files["same"])]) == 2
    capsys.readouterr()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "litmus_sandbox._cli.main",
            "replay",
            "--check",
            "--cassette",
            str(tmp_path / "missing.jsonl"),
            str(files["same"]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "missing.jsonl" in r.stderr


async def test_check_reads_the_runtime_log_of_a_replayed_episode(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    async def search(**args: Any) -> str:
        return "never called"

    sandbox = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "new.jsonl",
        policy=Policy(default="replay", replay={"ignore": ["$.rid"]}),
        replay=[files["rec"]],
        tools={"search": search},
    )
    async with sandbox, sandbox.episode("c1") as ep:
        await ep.call("search", q="a", rid=99)
        await ep.call("search", q="zzz", rid=100)
    assert main(["replay", "--check", str(tmp_path / "new.jsonl")]) == 1
    out = capsys.readouterr().out
    assert "2 calls, 1 served, 1 divergences, 1 unused  DIVERGED" in out
    assert "step 1: search" in out
    assert 'send {"to":"x"}' in out


def test_a_malformed_replay_log_is_bad_input(tmp_path: Path) -> None:
    lines = [
        '{"kind":"episode","v":1,"episode_id":"b","case_id":"c","meta":{"replay":{"sources":["x"]}}}',
        '{"kind":"step","type":"tool_call","v":1,"episode_id":"b","index":0,"call_id":"b-0",'
        '"tool":"t","args":{},"fidelity":"replayed","shown":{"content":[]}}',
        '{"kind":"end","v":1,"episode_id":"b","status":"complete","meta":{"replay":{"calls":"x"}}}',
    ]
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "litmus_sandbox._cli.main", "replay", "--check", "bad.jsonl"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (r.returncode, r.stderr.count("\n")) == (2, 1), r.stderr
    assert "bad.jsonl:3: malformed replay record" in r.stderr
    assert "Traceback" not in r.stderr


def _replay_check(path: Path, records: list[Any]) -> subprocess.CompletedProcess[str]:
    """Write ``records`` as a log at ``path``, then run ``replay --check`` on it."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return subprocess.run(
        [sys.executable, "-m", "litmus_sandbox._cli.main", "replay", "--check", path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _replayed_with_one_miss(tmp_path: Path, files: dict[str, Path]) -> list[Any]:
    sandbox = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "new.jsonl",
        policy=Policy(default="replay", replay={"ignore": ["$.rid"]}),
        replay=[files["rec"]],
    )
    async with sandbox, sandbox.episode("c1") as ep:
        await ep.call("search", q="a", rid=99)
        await ep.call("send", to="y")
    return [json.loads(line) for line in (tmp_path / "new.jsonl").read_text().splitlines()]


async def test_a_malformed_logged_divergence_is_bad_input_never_a_pass(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    records = await _replayed_with_one_miss(tmp_path, files)
    (line,) = [
        i for i, r in enumerate(records, 1) if "divergence" in r.get("meta", {}).get("replay", {})
    ]
    records[line - 1]["meta"]["replay"]["divergence"] = "junk"
    bad = tmp_path / "bad.jsonl"
    r = _replay_check(bad, records)
    assert (r.returncode, r.stderr.count("\n")) == (2, 1), r.stderr
    assert f"bad.jsonl:{line}: malformed replay record: meta.replay.divergence" in r.stderr
    # The end record's replay facts of the wrong shape are named by their line too.
    records[line - 1]["meta"]["replay"].pop("divergence")
    records[-1]["meta"]["replay"]["unused"] = 5
    r = _replay_check(bad, records)
    assert (r.returncode, r.stderr.count("\n")) == (2, 1), r.stderr
    assert f"bad.jsonl:{len(records)}: malformed replay record" in r.stderr


async def test_divergences_the_end_record_counts_on_no_step_fail_the_check(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    records = await _replayed_with_one_miss(tmp_path, files)
    for r in records:
        r.get("meta", {}).get("replay", {}).pop("divergence", None)
    assert records[-1]["meta"]["replay"]["divergences"] == 1
    records[-1]["meta"]["replay"]["unused"] = []
    cut = tmp_path / "cut.jsonl"
    r = _replay_check(cut, records)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 divergence(s) counted by the end record on no step" in r.stdout


async def test_a_logged_divergence_counts_without_header_facts_or_end(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """A crashed run (no end record) whose header lost its replay facts: the divergence
    its step carries still fails the check."""
    records = await _replayed_with_one_miss(tmp_path, files)
    records[0]["meta"].pop("replay")
    cut = tmp_path / "cut.jsonl"
    r = _replay_check(cut, records[:-1])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DIVERGED" in r.stdout


async def test_a_malformed_header_replay_record_is_named_by_its_line(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    records = await _replayed_with_one_miss(tmp_path, files)
    records[0]["meta"]["replay"]["sources"] = 5
    records[-1]["meta"]["replay"].pop("sources")
    bad = tmp_path / "bad.jsonl"
    r = _replay_check(bad, records)
    assert (r.returncode, r.stderr.count("\n")) == (2, 1), r.stderr
    assert "bad.jsonl:1: malformed replay record: meta.replay.sources" in r.stderr


def test_a_plain_recording_checks_against_a_redacted_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check compares both sides redacted, as a live replay does: a cassette recorded
    with the plain secret follows a run whose recording holds it redacted."""
    from litmus_sandbox._core.redaction import DEFAULT_REDACTION, redact_step

    plain = write(tmp_path / "plain.jsonl", "p", [("login", {"password": "hunter2-canary"})])
    step = redact_step(call(1, "login", args={"password": "hunter2-canary"}), DEFAULT_REDACTION)
    assert step.args["password"].startswith("<redacted 14 chars sha256:")
    run = write(tmp_path / "run.jsonl", "r", [("login", dict(step.args))])
    assert main(["replay", "--check", "--cassette", str(plain), str(run)]) == 0
    assert "0 of 1 episodes diverged" in capsys.readouterr().out
