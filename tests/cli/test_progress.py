"""The long commands show progress on a terminal, and nothing with ``--quiet``, in CI, or
when stderr is not a terminal (the other tests: they all run without one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import call, end, header, msg, verdict

from litmus_sandbox import JsonlWriter
from litmus_sandbox._cli import gate as gate_cli
from litmus_sandbox._cli import progress
from litmus_sandbox._cli.main import main
from litmus_sandbox._store.streams import write_verdicts


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr counts as a terminal (rich draws on it: FORCE_COLOR), outside CI."""
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("CI", raising=False)


def _gate_files(tmp_path: Path) -> list[str]:
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_verdicts(b, None, [verdict(f"c{i}") for i in range(50)])
    write_verdicts(c, None, [verdict(f"c{i}") for i in range(50)])
    return ["gate", "--baseline", str(b), "--candidate", str(c)]


@pytest.mark.usefixtures("terminal")
def test_a_large_gate_counts_the_cases_decided(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = _gate_files(tmp_path)
    assert main(args) == 0
    assert "cases decided" not in capsys.readouterr().err, "a small gate: no counter"
    monkeypatch.setattr(gate_cli, "LARGE_GATE", 0)
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "gating" in captured.err
    assert "cases decided" in captured.err
    assert "decision: PASS" in captured.out
    assert main([*args, "--quiet"]) == 0
    assert "cases decided" not in capsys.readouterr().err
    monkeypatch.setenv("CI", "true")
    assert main(args) == 0
    assert "cases decided" not in capsys.readouterr().err


@pytest.mark.usefixtures("terminal")
def test_replay_check_shows_the_episodes_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eps = tmp_path / "eps.jsonl"
    with JsonlWriter(eps) as w:
        w.write(header("e1", "c1"))
        w.write_many([msg(0, "user", "hi"), call(1, "search", "ok", args={"q": "a"})])
        w.write(end("e1", 2))
    check = ["replay", "--check", "--cassette", str(eps), str(eps)]
    assert main(check) == 0
    assert "checking episodes" in capsys.readouterr().err
    assert main([*check, "-q"]) == 0
    assert "checking episodes" not in capsys.readouterr().err


@pytest.mark.usefixtures("terminal")
def test_import_says_what_it_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "chat.jsonl"
    line = {"case_id": "c1", "messages": [{"role": "user", "content": "hi"}]}
    log.write_text(json.dumps(line) + "\n")
    args = ["import", "openai-chat", str(log), "-o", str(tmp_path / "eps.jsonl")]
    assert main(args) == 0
    assert "importing 1 log (openai-chat)" in capsys.readouterr().err
    assert main([*args, "--quiet"]) == 0
    assert "importing" not in capsys.readouterr().err


def test_nothing_is_drawn_without_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate_cli, "LARGE_GATE", 0)
    assert main(_gate_files(tmp_path)) == 0
    assert capsys.readouterr().err == ""
