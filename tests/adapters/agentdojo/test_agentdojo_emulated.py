"""AgentDojo with its state-changing tools emulated by a scripted loopback emulator:
``run agentdojo --policy`` records the calls as emulated, the attacks decided from the
environment no longer succeed (nothing ran), and the gate says fidelity_mismatch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from emulator_endpoint import Endpoint, Reply, Request, Script, called, running_emulator
from test_agentdojo import INJECTIONS, SCORING, USERS, episodes, verdicts

from litmus_sandbox._cli.main import main

WRITERS = ("send_money", "schedule_transaction", "update_scheduled_transaction")


def sent(args: dict[str, Any], request: Request) -> dict[str, Any]:
    return {"result": {"message": f"Transaction to {args.get('recipient')} sent."}}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Endpoint]:
    with running_emulator(Script(**dict.fromkeys(WRITERS, sent))) as e:
        yield e


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, endpoint: Endpoint
) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    work = tmp_path_factory.mktemp("agentdojo-emulated")
    (work / "emulate.toml").write_text(
        '[tools]\nsend_money = "emulate"\nschedule_transaction = "emulate"\n'
        '"update_*" = "emulate"\n'
        f'[emulator]\nkind = "openai"\nlabel = "bank-sim"\n[emulator.params]\n'
        f'base_url = "{endpoint.url}"\nmodel = "sim"\nmax_retries = 0\n'
    )

    def run(name: str, *args: str) -> dict[str, Any]:
        out = work / f"{name}.jsonl"
        tasks = [a for u in USERS for a in ("--user-task", u)]
        tasks += [a for i in INJECTIONS for a in ("--injection-task", i)]
        cmd = ["run", "agentdojo", "--suite", "banking", *tasks, "--pipeline"]
        cmd += ["hijacked-ground-truth", *args, "-o", str(out)]
        assert main(cmd) == 0
        return episodes(out)

    real = run("real")
    emulated = run(
        "emulated", "--policy", str(work / "emulate.toml"), "--cache", str(work / "c.sqlite")
    )
    return work, real, emulated


def test_state_changing_calls_are_emulated_and_change_nothing(
    runs: Any, endpoint: Endpoint
) -> None:
    _, real, emulated = runs
    pairs = [f"{u}/{i}" for u in USERS for i in INJECTIONS]
    assert all(verdicts(real[c])["attack_success"] for c in pairs)
    assert not any(verdicts(emulated[c])["attack_success"] for c in pairs)
    header = emulated[pairs[0]][0]
    fp = header["meta"]["emulator"]["fingerprint"]
    assert header["tool_modes"]["send_money"] == f"emulate:{fp}"
    assert header["tool_modes"]["get_balance"] == "real"
    sends = [r for c in pairs for r in emulated[c] if r.get("tool") == "send_money"]
    assert sends
    assert {(s["fidelity"], s["v"]) for s in sends} == {("emulated", 2)}
    assert all(not s["effects"]["state"] for s in sends)  # the bank did not move
    assert all(s["meta"]["emulator"]["label"] == "bank-sim" for s in sends)
    assert "Transaction to" in sends[0]["shown"]["content"][0]["text"]
    # The emulator was told the tool as AgentDojo describes it, and the episode so far.
    first = next(r for r in endpoint.requests if called(r)[0] == "send_money")
    assert "Sends a transaction to the recipient." in first.prompt
    assert '"recipient":{' in first.prompt
    assert "[0] user: " in first.prompt


def test_the_gate_calls_emulated_against_real_a_fidelity_mismatch(runs: Any) -> None:
    work, _, _ = runs
    (work / "scoring.toml").write_text(SCORING)
    for name in ("real", "emulated"):
        out = work / f"{name}.verdicts.jsonl"
        args = ["score", str(work / f"{name}.jsonl"), "--policy", str(work / "scoring.toml")]
        assert main([*args, "-o", str(out), "--no-cache"]) == 0
    report = work / "gate.json"
    args = ["gate", "--baseline", str(work / "real.verdicts.jsonl")]
    args += ["--candidate", str(work / "emulated.verdicts.jsonl"), "--format", "json"]
    assert main([*args, "-o", str(report)]) == 4
    gate = json.loads(report.read_text())
    assert gate["counts"]["REGRESSION"] == 0
    assert gate["counts"]["NEEDS_REBASELINE"] == len(USERS) * len(INJECTIONS)
    assert {r["code"] for c in gate["cases"] for r in c["reasons"]} == {"fidelity_mismatch"}


def test_a_rerun_is_served_from_the_cache(runs: Any, endpoint: Endpoint) -> None:
    work, _, emulated = runs
    asked = len(endpoint.requests)
    out = work / "again.jsonl"
    args = ["run", "agentdojo", "--suite", "banking", "--user-task", USERS[0]]
    args += ["--injection-task", INJECTIONS[0], "--pipeline", "hijacked-ground-truth"]
    args += ["--policy", str(work / "emulate.toml"), "--cache", str(work / "c.sqlite")]
    assert main([*args, "-o", str(out)]) == 0
    assert len(endpoint.requests) == asked
    again = episodes(out)[f"{USERS[0]}/{INJECTIONS[0]}"]
    first = emulated[f"{USERS[0]}/{INJECTIONS[0]}"]
    calls = [r for r in again if r.get("fidelity") == "emulated"]
    assert calls
    assert all(r["meta"]["emulator"]["cached"] for r in calls)
    assert [r["shown"] for r in calls] == [
        r["shown"] for r in first if r.get("fidelity") == "emulated"
    ]


def test_a_ground_truth_pipeline_reads_a_failed_emulation_as_its_error(tmp_path: Path) -> None:
    """AgentDojo's ground-truth pipelines drop a tool's error and show its result as a
    success: a failed emulation (here the endpoint answers 500) or an emulated error
    reaches them as the error's text, never as an empty success, and the step says the
    error went unflagged."""

    answered: list[int] = []

    def refused(args: dict[str, Any], request: Request) -> dict[str, Any] | Reply:
        answered.append(1)  # the first call an error, the others no answer at all
        return {"error": "insufficient funds"} if len(answered) == 1 else Reply(status=500)

    script = Script(send_money=refused)
    with running_emulator(script) as endpoint:
        policy = tmp_path / "emulate.toml"
        policy.write_text(
            '[tools]\nsend_money = "emulate"\n'
            f'[emulator]\nkind = "openai"\nlabel = "bank-sim"\n[emulator.params]\n'
            f'base_url = "{endpoint.url}"\nmodel = "sim"\nmax_retries = 0\n'
        )
        out = tmp_path / "e.jsonl"
        cmd = ["run", "agentdojo", "--suite", "banking", "--user-task", "user_task_0"]
        cmd += ["--injection-task", "injection_task_0", "--injection-task", "injection_task_3"]
        cmd += ["--pipeline", "hijacked-ground-truth", "--policy", str(policy), "-o", str(out)]
        assert main(cmd) == 0
    calls = [r for rs in episodes(out).values() for r in rs if r.get("fidelity") == "emulated"]
    texts = [c["shown"]["content"][0]["text"] for c in calls if c["shown"]["content"]]
    assert texts[0] == "insufficient funds"
    assert "emulation of 'send_money' failed (http_status)" in texts[1]
    for c in calls:
        assert c["shown"]["content"], c  # never an empty success
        assert c["meta"]["agentdojo"]["error_not_flagged"] is True
    assert any("failure" in c["meta"]["emulator"] for c in calls)
