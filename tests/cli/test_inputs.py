"""Inputs that say what they are: an empty episode or verdict file is one line and exit 2
(unless ``--allow-empty-input``), and a gate refuses the same file on both sides."""

from __future__ import annotations

import os
from collections.abc import Callable
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


#: Every command line that reads an episode or verdict stream, with ``bad`` in one place;
#: and the argument that names it in the message ("" for a positional one).
READERS: dict[str, tuple[str, str, Callable[[dict[str, str], str], list[str]]]] = {
    "score": ("episodes", "", lambda g, bad: [
        "score", bad, "--policy", g["policy"], "-o", bad + ".out", "--no-cache",
    ]),
    "gate --baseline": ("verdicts", "--baseline", lambda g, bad: [
        "gate", "--baseline", bad, "--candidate", g["verdicts"],
    ]),
    "gate --candidate": ("verdicts", "--candidate", lambda g, bad: [
        "gate", "--baseline", g["verdicts"], "--candidate", bad,
    ]),
    "gate --candidate-episodes": ("episodes", "--candidate-episodes", lambda g, bad: [
        "gate", "--baseline", g["verdicts"], "--candidate-episodes", bad,
        "--policy", g["policy"], "--no-cache",
    ]),
    "gate --baseline-episodes": ("episodes", "--baseline-episodes", lambda g, bad: [
        "gate", "--baseline", g["verdicts"], "--candidate", g["verdicts2"],
        "--baseline-episodes", bad, "--no-cache",
    ]),
    "rebaseline --episodes": ("episodes", "--episodes", lambda g, bad: [
        "rebaseline", "--episodes", bad, "--policy", g["policy"], "-o", bad + ".out",
        "--no-cache",
    ]),
    "show": ("episodes", "", lambda g, bad: ["show", bad]),
    "show --verdicts": ("verdicts", "--verdicts", lambda g, bad: [
        "show", g["episodes"], "--verdicts", bad,
    ]),
    "replay": ("episodes", "", lambda g, bad: ["replay", "--cassette", g["episodes"], bad]),
    "replay --cassette": ("episodes", "--cassette", lambda g, bad: [
        "replay", "--cassette", bad, g["episodes"],
    ]),
    "diff": ("episodes", "", lambda g, bad: ["diff", g["episodes"], bad]),
    "export otel": ("episodes", "", lambda g, bad: ["export", "otel", bad, "-o", bad + ".out"]),
    "export otel --verdicts": ("verdicts", "--verdicts", lambda g, bad: [
        "export", "otel", g["episodes"], "--verdicts", bad, "-o", bad + ".out",
    ]),
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(READERS))
@pytest.mark.parametrize(
    ("content", "why"), [(b"", "empty file"), (b"\n \n\t\r\n", "only blank lines")]
)
def test_an_empty_stream_is_one_line_naming_it(
    tmp_path: Path,
    good: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    command: str,
    content: bytes,
    why: str,
) -> None:
    kind, arg, argv = READERS[command]
    bad = tmp_path / "runs" / "x.jsonl"
    bad.parent.mkdir()
    bad.write_bytes(content)
    code, out, err = _run(argv(good, str(bad)), capsys)
    where = f"{arg} {bad}" if arg else str(bad)
    line = _one_line(code, err, f"{where}: no {kind} ({why})", "--allow-empty-input")
    assert line.endswith("pass --allow-empty-input if an empty input is expected")
    assert out == ""
    assert not Path(str(bad) + ".out").exists()  # refused before anything was written


def test_an_empty_baseline_says_what_it_would_do(
    tmp_path: Path, good: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A gate against an empty baseline file is a mistake until said otherwise."""
    (tmp_path / "empty.jsonl").write_bytes(b"")
    empty = str(tmp_path / "empty.jsonl")
    code, out, err = _run(["gate", "--baseline", empty, "--candidate", good["verdicts"]], capsys)
    _one_line(code, err, f"--baseline {empty}: no verdicts (empty file): every candidate "
              "case would be baseline_missing; pass --allow-empty-input")  # fmt: skip
    code, out, err = _run(["gate", "--baseline", good["verdicts"], "--candidate", empty], capsys)
    _one_line(code, err, f"--candidate {empty}: no verdicts (empty file): every baseline "
              "case would be candidate_missing")  # fmt: skip
    # Accepted, it is what it says: every candidate case NEEDS_REBASELINE (exit 4).
    argv = ["gate", "--baseline", empty, "--candidate", good["verdicts"], "--allow-empty-input"]
    code, out, err = _run(argv, capsys)
    assert (code, err) == (4, "")
    assert "baseline_missing" in out


def test_the_candidates_policy_is_never_read_from_an_empty_file(
    tmp_path: Path, good: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "like.jsonl").write_bytes(b"")
    like = str(tmp_path / "like.jsonl")
    argv = ["rebaseline", "--episodes", good["episodes"], "--like", like, "-o", like + ".out"]
    for extra in ([], ["--allow-empty-input"]):
        code, _, err = _run([*argv, *extra], capsys)
        line = _one_line(code, err, f"--like {like}: no verdicts (empty file)")
        assert "--allow-empty-input" not in line  # it would not help


def test_allow_empty_input_reads_an_empty_file_as_holding_none(
    tmp_path: Path, good: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_bytes(b"\n\n")
    empty, blank, allow = (
        str(tmp_path / "empty.jsonl"),
        str(tmp_path / "blank.jsonl"),
        "--allow-empty-input",
    )
    out_v = str(tmp_path / "out.verdicts.jsonl")
    score = ["score", empty, "--policy", good["policy"], "-o", out_v, "--no-cache", allow]
    code, out, err = _run(score, capsys)
    assert (code, err) == (0, "")
    assert out.startswith("scored 0 episodes")
    # Nothing on either side: exit 5 as ever, and --allow-empty still decides.
    gate = ["gate", "--baseline", empty, "--candidate", blank, allow]
    assert _run(gate, capsys)[0] == 5
    assert _run([*gate, "--allow-empty"], capsys)[0] == 0
    rebaseline = ["rebaseline", "--episodes", blank, "--policy", good["policy"], "-o", out_v]
    code, out, err = _run([*rebaseline, "--no-cache", allow], capsys)
    assert code == 0
    assert out.startswith("re-scored 0 baseline episodes")
    assert _run(["show", empty, allow], capsys) == (0, "", "")
    # show still says when what --case asked for is not there.
    code, _, err = _run(["show", empty, "--case", "c1", allow], capsys)
    _one_line(code, err, "no episode to show")
    code, out, _ = _run(["show", empty, good["episodes"], allow], capsys)
    assert code == 0
    assert "case c1" in out
    code, out, _ = _run(["replay", "--cassette", good["episodes"], empty, allow], capsys)
    assert code == 0
    assert "0 of 0 episodes diverged" in out
    code, out, _ = _run(["diff", empty, good["episodes"], allow], capsys)
    assert code == 1
    assert "only in B: case c1" in out
    assert _run(["diff", empty, blank, allow], capsys)[0] == 0


def test_show_without_the_flag_still_names_a_file_with_only_a_torn_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that holds a record, if only a torn one, is not empty: the readers' own
    word on it stands."""
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(EPISODES[:20])
    code, _, err = _run(["show", str(torn)], capsys)
    assert code == 2
    assert "torn last line" in err
    assert err.splitlines()[-1] == f"litmus-sandbox: error: {torn}: no episode to show"


def _same(tmp_path: Path, target: str, how: str) -> str:
    """``target`` by another name: the same path, a ``file://`` URL, a symbolic link or a
    hard link."""
    if how == "path":
        return target
    if how == "file URL":
        return Path(target).resolve().as_uri()
    other = tmp_path / f"{how} to {Path(target).name}"
    if how == "symlink":
        other.symlink_to(target)
    else:
        os.link(target, other)
    return str(other)


@pytest.mark.parametrize("how", ["path", "file URL", "symlink", "hard link"])
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


def test_help_of_each_reader_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (
        ["score"],
        ["gate"],
        ["rebaseline"],
        ["show"],
        ["replay"],
        ["diff"],
        ["export", "otel"],
    ):
        code, out, _ = _run([*command, "--help"], capsys)
        assert code == 0
        assert "--allow-empty-input" in out, command
    assert "--allow-empty-input" in " ".join(_run(["--help"], capsys)[1].split())


@pytest.mark.parametrize(
    "line",
    [
        '{"run_id": "c1", "safe": true, "provenance": {"steps_covered": -2}}',
        '{"kind": "verdict", "v": 1, "episode_id": "e1", "case_id": "c1", "safe": true, '
        '"step_verdicts": [], "provenance": {"steps_covered": -1}}',
        '{"kind": "verdict", "v": 1, "episode_id": "e1", "case_id": "c1", "safe": true, '
        '"step_verdicts": [], "provenance": {"steps_recorded": -1}}',
    ],
    ids=["legacy", "covered", "recorded"],
)
def test_a_negative_count_of_steps_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    """A verdict covering -2 steps is no verdict to compare: one line naming the file and
    line, exit 2 (not a case gated with a made-up span of steps)."""
    (tmp_path / "b.jsonl").write_bytes(VERDICTS + line.encode() + b"\n")
    (tmp_path / "c.jsonl").write_bytes(VERDICTS)
    argv = [
        "gate",
        "--baseline",
        str(tmp_path / "b.jsonl"),
        "--candidate",
        str(tmp_path / "c.jsonl"),
    ]
    code, _, err = _run(argv, capsys)
    _one_line(code, err, "b.jsonl:2:", ">= 0")
