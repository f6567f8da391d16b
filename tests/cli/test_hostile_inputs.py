"""Every reader behind the command line, fed hostile input: exit 2 with one line naming the
file (or a documented warning), never a traceback, never unbounded memory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from factories import ROOT, call, end, header, msg, verdict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litmus_sandbox._cli.main import main
from litmus_sandbox._model.codec import encode

POLICY = '[scoring]\ntruncate_on_refusal = false\n\n[judge]\nkind = "rules"\n'
_DEEP = "[" * 100_000 + "]" * 100_000

EPISODES = b"".join(
    encode(r)
    for r in (
        header("e1", "c1"),
        msg(0, "user", "hi", eid="e1"),
        call(1, "send_email", eid="e1", args={"to": "a@b.c", "n": -1.5}),
        end("e1", 2),
    )
)
VERDICTS = encode(verdict("c1")) + encode(verdict("c2", safe=False))
LEGACY = (
    b'{"run_id": "c1", "safe": true, "provenance": {"truncate_on_refusal": false, '
    b'"truncate_on_empty_tool_result": false, "steps_covered": 2, "judge_version": "j"}}\n'
)
EXCLUSIONS = {
    "x.txt": b"c1 known flaky\n",
    "x.csv": b"case_id,reason\nc1,known flaky\n",
    "x.jsonl": b'{"case_id": "c1", "reason": "known flaky"}\n',
    "x.json": b'{"c1": "known flaky"}',
    "x.toml": b'[exclude]\nc1 = "known flaky"\n',
}


def _good(folder: Path) -> dict[str, Path]:
    files = {
        "episodes": (folder / "good.episodes.jsonl", EPISODES),
        "verdicts": (folder / "good.verdicts.jsonl", VERDICTS),
        # Another file with the same verdicts: a gate refuses one file on both sides.
        "candidate": (folder / "good.candidate.jsonl", VERDICTS),
        "policy": (folder / "good.toml", POLICY.encode()),
    }
    for path, data in files.values():
        path.write_bytes(data)
    return {name: path for name, (path, _) in files.items()}


#: How each reader is reached from the command line, with the file under test as ``bad``.
COMMANDS: dict[str, Callable[[dict[str, Path], Path], list[str]]] = {
    "score episodes": lambda g, bad: [
        "score", str(bad), "--policy", str(g["policy"]), "-o", str(bad.parent / "out.jsonl"),
        "--no-cache",
    ],
    "score policy": lambda g, bad: [
        "score", str(g["episodes"]), "--policy", str(bad), "-o", str(bad.parent / "o.jsonl"),
        "--no-cache",
    ],
    "gate verdicts": lambda g, bad: [
        "gate", "--baseline", str(bad), "--candidate", str(g["verdicts"]),
    ],
    "gate exclusions": lambda g, bad: [
        "gate", "--baseline", str(g["verdicts"]), "--candidate", str(g["candidate"]),
        "--exclude", str(bad),
    ],
    "replay cassette": lambda g, bad: [
        "replay", "--check", "--cassette", str(bad), str(g["episodes"]),
    ],
}  # fmt: skip
#: A well-formed file for each reader, to truncate and mutate.
VALID = {
    "score episodes": ("e.jsonl", EPISODES),
    "score policy": ("p.toml", POLICY.encode()),
    "gate verdicts": ("v.jsonl", VERDICTS),
    "gate exclusions": ("x.jsonl", EXCLUSIONS["x.jsonl"]),
    "replay cassette": ("c.jsonl", EPISODES),
}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def _assert_one_error(code: int, err: str, bad: Path) -> None:
    assert "Traceback" not in err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("litmus-sandbox: error: "), err
    assert str(bad) in lines[0], err


def _assert_clean(code: int, err: str, bad: Path) -> None:
    """Exit 2 with one line naming the file, or a normal exit with warnings only."""
    assert "Traceback" not in err
    assert code != 3, err
    if code == 2:
        _assert_one_error(code, err, bad)
    else:
        assert code in (0, 1, 4, 5), err
        for line in err.strip().splitlines():
            assert line.startswith(f"litmus-sandbox: {bad}:"), err
            assert ": warning: " in line, err


HOSTILE: list[tuple[str, str, bytes]] = [
    ("score episodes", "deep.jsonl", EPISODES + b'{"kind":"end","v":1,"x":' + _DEEP.encode() + b"}\n"),
    ("score episodes", "dup.jsonl", EPISODES.replace(b'"index":0', b'"index":0,"index":5', 1)),
    ("score episodes", "v.jsonl", EPISODES.replace(b'"v":1', b'"v":-1', 1)),
    ("score episodes", "bin.jsonl", b"\x00\xff" * 100 + b"\n"),
    ("score policy", "deep.toml", (POLICY + "x = " + _DEEP + "\n").encode()),
    ("score policy", "dotted.toml", (POLICY + "x." + ".".join(["a"] * 50_000) + " = 1\n").encode()),
    ("score policy", "latin1.toml", b"[judge]\nlabel = '\xe9'\n"),
    ("gate verdicts", "dup.jsonl", VERDICTS.replace(b'"safe":true', b'"safe":true,"safe":false', 1)),
    ("gate verdicts", "deep.jsonl", LEGACY + LEGACY[:-2] + b', "x": ' + _DEEP.encode() + b"}\n"),
    ("gate verdicts", "v0.jsonl", VERDICTS.replace(b'"v":1', b'"v":0')),
    ("gate verdicts", "newer.jsonl", LEGACY + LEGACY[:-2] + b', "kind": "x", "v": 99}\n'),
    ("gate exclusions", "null.jsonl", b'{"case_id": null, "reason": "r"}\n'),
    ("gate exclusions", "list.jsonl", b'{"case_id": [1], "reason": "r"}\n'),
    ("gate exclusions", "dict.jsonl", b'{"case_id": {}, "reason": "r"}\n'),
    ("gate exclusions", "big.jsonl", b'{"case_id": ' + b"9" * 5000 + b', "reason": "r"}\n'),
    ("gate exclusions", "field.csv", b"c1," + b"x" * 200_000 + b"\n"),
    ("gate exclusions", "deep.json", b'{"c1": ' + _DEEP.encode() + b"}"),
    ("gate exclusions", "deep.toml", b"[exclude]\nc1 = " + _DEEP.encode() + b"\n"),
    ("gate exclusions", "dup.json", b'{"c1": "a", "c1": "b"}'),
    ("replay cassette", "dup.jsonl", EPISODES.replace(b'"case_id":"c1"', b'"case_id":"c1","case_id":"c2"')),
]  # fmt: skip


@pytest.mark.parametrize(("command", "name", "data"), HOSTILE)
def test_hostile_content_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, name: str, data: bytes
) -> None:
    good = _good(tmp_path)
    bad = tmp_path / name
    bad.write_bytes(data)
    code, err = _run(COMMANDS[command](good, bad), capsys)
    _assert_one_error(code, err, bad)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "long line"])
def test_what_is_not_a_regular_file_or_too_long_is_refused_by_every_reader(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    kind: str,
) -> None:
    good = _good(tmp_path)
    if kind == "fifo":
        bad = tmp_path / "pipe.jsonl"
        os.mkfifo(bad)
    elif kind == "directory":
        bad = tmp_path / "folder.jsonl"
        bad.mkdir()
    elif kind == "device":
        bad = Path("/dev/zero")
    else:
        bad = tmp_path / ("long.toml" if "policy" in command else "long.jsonl")
        bad.write_bytes(b"x" * 5000 + b"\n")
        monkeypatch.setenv("LITMUS_MAX_LINE_BYTES", "4K")
    code, err = _run(COMMANDS[command](good, bad), capsys)
    _assert_one_error(code, err, bad)
    assert ("not a regular file" in err) == (kind != "long line")


def _mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for pos, delete, insert in edits:
        at = pos % (len(out) + 1)
        out[at : at + delete] = insert
    return bytes(out)


_EDITS = st.lists(
    st.tuples(
        st.integers(0, 10_000),
        st.integers(0, 3),
        st.sampled_from([b"", b"\n", b'"', b",", b"{", b"}", b"[", b"-", b".", b"\xff", b"1"]),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    command=st.sampled_from(sorted(COMMANDS)),
    how=st.sampled_from(["random", "truncated", "mutated"]),
    blob=st.binary(max_size=300),
    cut=st.integers(0, 10_000),
    edits=_EDITS,
)
def test_fuzzed_inputs_never_crash_any_reader(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    command: str,
    how: str,
    blob: bytes,
    cut: int,
    edits: list[tuple[int, int, bytes]],
) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    good = _good(folder)
    name, valid = VALID[command]
    data = {
        "random": blob,
        "truncated": valid[: cut % (len(valid) + 1)],
        "mutated": _mutate(valid, edits),
    }[how]
    bad = folder / name
    bad.write_bytes(data)
    code, err = _run(COMMANDS[command](good, bad), capsys)
    _assert_clean(code, err, bad)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(EXCLUSIONS)), how=st.sampled_from(["truncated", "mutated"]),
       cut=st.integers(0, 200), edits=_EDITS)  # fmt: skip
def test_fuzzed_exclusion_files_in_every_form_never_crash(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    name: str,
    how: str,
    cut: int,
    edits: list[tuple[int, int, bytes]],
) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    good = _good(folder)
    valid = EXCLUSIONS[name]
    data = valid[: cut % (len(valid) + 1)] if how == "truncated" else _mutate(valid, edits)
    bad = folder / name
    bad.write_bytes(data)
    code, err = _run(COMMANDS["gate exclusions"](good, bad), capsys)
    _assert_clean(code, err, bad)


# ---------------------------------------------------------------- in a bounded process

_LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20))
from litmus_sandbox._cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["score episodes", "gate verdicts", "score policy"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "one 4 GiB line"])
def test_no_input_hangs_or_grows_memory_without_bound(
    tmp_path: Path, command: str, kind: str
) -> None:
    """In a process limited to 768 MiB of address space: exit 2 at once, one line."""
    good = _good(tmp_path)
    if kind == "fifo":
        bad = tmp_path / "pipe"
        os.mkfifo(bad)
    elif kind == "/dev/zero":
        bad = Path("/dev/zero")
    else:
        bad = tmp_path / "huge"
        with open(bad, "wb") as f:
            f.truncate(4 << 30)  # sparse: no disk used
    r = subprocess.run(
        [sys.executable, "-c", _LIMITED, *COMMANDS[command](good, bad)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    _assert_one_error(r.returncode, r.stderr, bad)
