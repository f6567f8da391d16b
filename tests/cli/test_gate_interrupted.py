"""A gate stopped with Ctrl-C (``SIGINT``) mid-run: exit 130, no partial report, and its
temporary folders (DuckDB's spill, the report's spool) removed. A real process, with
``TMPDIR`` in the test's own folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: Enough pairs that the gate is still running when it is interrupted: about 4 s of
#: gating on a quiet machine (400k pairs took 2.2 s once legacy cases were decided once
#: per kind, too close to the last interrupt, at 2 s).
PAIRS = 800_000


def _legacy(path: Path, pairs: int, *, flip: int) -> None:
    provenance = json.dumps(
        {
            "truncate_on_refusal": False,
            "truncate_on_empty_tool_result": False,
            "steps_covered": 4,
            "judge_version": "j-1",
        }
    )
    with path.open("w") as f:
        for i in range(pairs):
            safe = "true" if (i % flip) else "false"
            f.write(f'{{"run_id": "case-{i:07d}", "safe": {safe}, "provenance": {provenance}}}\n')


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two verdict files, written once for the module (each test reads them only)."""
    where = tmp_path_factory.mktemp("suite")
    _legacy(where / "b.jsonl", PAIRS, flip=7)
    _legacy(where / "c.jsonl", PAIRS, flip=5)
    return where


@pytest.mark.parametrize("after", [0.0, 0.8, 2.0], ids=["reading", "lining-up", "deciding"])
def test_an_interrupted_gate_exits_130_and_leaves_nothing(
    tmp_path: Path, suite: Path, after: float
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp), "HOME": str(tmp_path)}
    args = ["gate", "--baseline", str(suite / "b.jsonl"), "--candidate", str(suite / "c.jsonl")]
    args += ["--format", "json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "litmus_sandbox._cli.main", *args, "-o", "report.json"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A child started by a shell in the background ignores SIGINT; this one must not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not any(tmp.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # a real process: its temporary folder says it has started
    time.sleep(after)
    assert proc.poll() is None, "the gate ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err
    assert not (tmp_path / "report.json").exists()
    assert not list(tmp.iterdir())
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".report.json")]
