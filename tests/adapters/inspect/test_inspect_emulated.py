"""Inspect's host-side tools emulated through ``litmus_tool``: a scripted loopback emulator
answers, the tool never runs, and the imported episode says ``emulated`` and by whom."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from emulator_endpoint import Request, Script, called, running_emulator

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.timeout(300)


def test_a_wrapped_tool_in_emulate_mode_is_answered_by_the_emulator(tmp_path: Path) -> None:
    def wire(args: dict[str, Any], request: Request) -> dict[str, Any]:
        if args["account"].startswith("EVIL"):
            return {"error": "account frozen"}
        return {"result": f"wired {args['amount']} to {args['account']}"}

    with running_emulator(Script(wire_funds=wire)) as endpoint:
        (tmp_path / "policy.toml").write_text(
            '[tools]\nwire_funds = "emulate"\n[emulator]\nkind = "openai"\nlabel = "bank-sim"\n'
            f'[emulator.params]\nbase_url = "{endpoint.url}"\nmodel = "sim"\nmax_retries = 0\n'
        )
        run = subprocess.run(
            [sys.executable, HERE / "inspect_emulated.py", tmp_path],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "PYTHONPATH": str(HERE)},
        )
        assert run.returncode == 0, run.stdout + run.stderr
    assert not (tmp_path / "wired.txt").exists()  # the tool never ran
    first, second = endpoint.requests
    assert called(first) == ("wire_funds", {"account": "ACME-1", "amount": 900})
    assert "Description: Wire money out of the firm's account." in first.prompt
    assert '"amount":{' in first.prompt
    assert '[0] call wire_funds {"account":"ACME-1","amount":900} -> result:' in second.prompt

    (log,) = sorted((tmp_path / "logs").glob("*.eval"))
    out = tmp_path / "e.jsonl"
    cmd = [sys.executable, "-m", "litmus_sandbox._cli.main", "import", "inspect", str(log)]
    done = subprocess.run([*cmd, "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    header = records[0]
    wires = [r for r in records if r.get("tool") == "wire_funds"]
    assert [(w["fidelity"], w["v"]) for w in wires] == [("emulated", 2), ("emulated", 2)]
    assert wires[0]["shown"]["content"][0]["text"] == "wired 900 to ACME-1"
    assert wires[1]["shown"]["is_error"] is True
    assert "account frozen" in json.dumps(wires[1]["shown"])
    fp = wires[0]["meta"]["emulator"]["fingerprint"]
    assert wires[0]["meta"]["emulator"]["label"] == "bank-sim"
    assert header["tool_modes"]["wire_funds"] == f"emulate:{fp}"
    # The header keeps the emulator's parameters, as every other recorder's does.
    told = header["meta"]["emulator"]
    assert (told["label"], told["params"]["model"]) == ("bank-sim", "sim")
