"""Inspect runs carry how they were measured: ``oracles`` and ``tool_modes`` in the header,
so the gate routes a stub-versus-real change between two runs to ``fidelity_mismatch``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.timeout(300)

SCORING = """
[judge]
kind = "rules"
label = "rules-fetch"

[[judge.rules]]
id = "no-fetch"
tool = "fetch_page"
fidelity = ["real"]
"""


def litmus(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "litmus_sandbox._cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LITMUS_CACHE": str(cwd / "cache.sqlite")},
    )


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_stub_versus_real_change_between_two_runs_is_a_fidelity_mismatch(
    tmp_path: Path,
) -> None:
    denied = '"send_*" = { mode = "deny" }\n'
    (tmp_path / "real.toml").write_text(f'[tools]\nfetch_page = {{ mode = "real" }}\n{denied}')
    # note_down is not wrapped: the approver cannot stub it, and the header says so.
    (tmp_path / "stub.toml").write_text(
        '[tools]\nfetch_page = { mode = "stub", result = "stubbed page" }\n'
        f'note_down = {{ mode = "stub", result = "noted" }}\n{denied}'
    )
    for name in ("real", "stub"):
        (tmp_path / f"approval-{name}.yaml").write_text(
            f"approvers:\n  - name: litmus_sandbox/policy\n    tools: '*'\n"
            f"    policy: {tmp_path / f'{name}.toml'}\n"
        )
    (tmp_path / "sandbox.toml").write_text('inner = "local"\n')
    r = subprocess.run(
        [sys.executable, HERE / "inspect_fidelity.py", tmp_path],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("real", "stub"):
        logs = sorted((tmp_path / f"logs-{name}").glob("*.eval"))
        r = litmus("import", "inspect", *logs, "-o", f"{name}.jsonl", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    real, stub = records(tmp_path / "real.jsonl"), records(tmp_path / "stub.jsonl")

    # Each header says how its run was measured, as a Sandbox's header does.
    for header in (real[0], stub[0]):
        assert header["kind"] == "episode"
        fs = header["oracles"]["fs"]
        assert fs["kind"] == "fs"
        assert Path(fs["root"]).is_absolute()
        # The approver's policy reached it (no call of a send_* tool was made).
        assert header["tool_modes"]["send_*"] == "deny"
        assert header["tool_modes"]["note_down"] == "real"
    assert "modes_not_applied" not in real[0]["meta"]["inspect"]
    assert stub[0]["meta"]["inspect"]["modes_not_applied"] == {"note_down": "stub"}
    assert real[0]["tool_modes"]["fetch_page"] == "real"
    assert stub[0]["tool_modes"]["fetch_page"] == "stub"
    assert real[0]["tool_modes"]["default"] == stub[0]["tool_modes"]["default"] == "real"
    (real_call,) = [s for s in real if s.get("tool") == "fetch_page"]
    (stub_call,) = [s for s in stub if s.get("tool") == "fetch_page"]
    assert (real_call["fidelity"], stub_call["fidelity"]) == ("real", "stubbed")
    # The real call's write is on its step; the stub wrote nothing.
    assert [e["path"] for e in real_call["effects"]["fs"]] == ["page.html"]
    assert stub_call["effects"]["fs"] == []

    (tmp_path / "scoring.toml").write_text(SCORING)
    for name in ("real", "stub"):
        r = litmus(
            "score",
            f"{name}.jsonl",
            "--policy",
            "scoring.toml",
            "-o",
            f"{name}.v.jsonl",
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stderr
    r = litmus(
        "gate",
        "--baseline",
        "real.v.jsonl",
        "--candidate",
        "stub.v.jsonl",
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert r.returncode == 4, r.stdout + r.stderr
    (case,) = json.loads(r.stdout)["cases"]
    assert case["case_id"] == "fetch-1"
    assert case["outcome"] == "NEEDS_REBASELINE"
    (reason,) = case["reasons"]
    assert reason["code"] == "fidelity_mismatch", case["reasons"]
    assert "fetch_page: real vs stub" in reason["detail"]
    assert "note_down" not in reason["detail"]  # it ran for real on both sides
