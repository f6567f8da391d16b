"""Inputs that say what they are: a gate refuses the same file on both sides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from factories import end, header, msg, verdict

from litmus_sandbox._cli.main import main
from litmus_sandbox._model.codec import encode

POLICY = '[scoring]\ntruncate_on_refusal = false\n\n[judge]\nkind = "rules"\n'
EPISODES = b"".join(
    encode(r) for r in (header("e1", "c1"), msg(0, "user", "hi", eid="e1"), end("e1", 1))
)
VERDICTS = encode(verdict("c1"))


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code: int, err: str, *parts: str) -> str:
    """Exit 2 and one line, ``litmus-sandbox: error: ...``, holding each of ``parts``."""
    assert "Traceback" not in err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("litmus-sandbox: error: "), err
    for part in parts:
        assert part in lines[0], err
    return lines[0]


@pytest.fixture
def good(tmp_path: Path) -> dict[str, str]:
    """Well-formed inputs of each kind, two of each stream (two sides of a gate)."""
    files = {
        "episodes": ("e.jsonl", EPISODES),
        "episodes2": ("e2.jsonl", EPISODES),
        "verdicts": ("v.jsonl", VERDICTS),
        "verdicts2": ("v2.jsonl", VERDICTS),
        "policy": ("p.toml", POLICY.encode()),
    }
    for name, data in files.values():
        (tmp_path / name).write_bytes(data)
    return {key: str(tmp_path / name) for key, (name, _) in files.items()}


def _same(tmp_path: Path, target: str, how: str) -> str:
    """``target`` by another name: the same path, a symbolic link or a hard link."""
    if how == "path":
        return target
    other = tmp_path / f"{how} to {Path(target).name}"
    if how == "symlink":
        other.symlink_to(target)
    else:
        os.link(target, other)
    return str(other)


@pytest.mark.parametrize("how", ["path", "symlink", "hard link"])
def test_a_gate_refuses_the_same_file_on_both_sides(
    tmp_path: Path, good: dict[str, str], capsys: pytest.CaptureFixture[str], how: str
) -> None:
    v = good["verdicts"]
    other = _same(tmp_path, v, how)
    code, out, err = _run(["gate", "--baseline", v, "--candidate", other], capsys)
    line = _one_line(code, err, f"--baseline {v} and --candidate {other} are the same file")
    assert "a run compared with itself always passes" in line
    assert out == ""
    # Among several files on a side too, and the other way round.
    code, _, err = _run(["gate", "--baseline", good["verdicts2"], other, "--candidate", v], capsys)
    _one_line(code, err, f"--baseline {other} and --candidate {v} are the same file")
    e = good["episodes"]
    e_other = _same(tmp_path, e, how)
    argv = [
        "gate", "--baseline", v, "--candidate", good["verdicts2"],
        "--baseline-episodes", e, "--candidate-episodes", e_other, "--no-cache",
    ]  # fmt: skip
    code, out, err = _run(argv, capsys)
    _one_line(
        code, err, f"--baseline-episodes {e} and --candidate-episodes {e_other} are the same file"
    )
    # Two files with the same content are two runs: compared.
    code, out, err = _run(["gate", "--baseline", v, "--candidate", good["verdicts2"]], capsys)
    assert (code, err) == (0, "")
