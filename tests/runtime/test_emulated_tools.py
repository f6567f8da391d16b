"""Tools in ``emulate`` mode, against a real scripted emulator endpoint on loopback: what it
is asked, how its answer is read, what the agent is shown and the step records, the cache
that makes re-runs deterministic, and failures shown as tool errors (no guess)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from emulator_endpoint import (
    MODEL,
    Endpoint,
    Reply,
    Request,
    Script,
    completion,
    emulator_policy,
    running_emulator,
)

from litmus_sandbox import ConfigError, Sandbox, ToolCallStep, read_episodes
from litmus_sandbox._model.records import EMULATED_VERSION, SCHEMA_VERSION
from litmus_sandbox._runtime.tool_calls import ToolResult

pytestmark = pytest.mark.anyio

KEY = "sk-emulator-canary-77c1e0"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMULATOR_KEY", KEY)


def pay(args: dict[str, Any], request: Request) -> dict[str, Any]:
    del request
    return {"result": {"paid": args["amount"], "to": args["to"], "id": "tx-7"}}


def tool_steps(path: Path) -> list[ToolCallStep]:
    (ep,) = read_episodes([path])
    return [s for s in ep.steps if isinstance(s, ToolCallStep)]


async def run_payment(
    tmp_path: Path, endpoint: Endpoint, episodes: Path, *, policy: dict[str, Any] | None = None
) -> list[ToolResult]:
    """One episode: a message, then send_money twice (a secret in the second's arguments)."""
    ran: list[str] = []

    def send_money(to: str, amount: int, memo: str = "") -> str:
        """Send ``amount`` dollars to ``to``; returns the transfer id."""
        ran.append(to)
        return "real-tx"

    policy = policy or emulator_policy(
        endpoint.url,
        {"send_money": "emulate"},
        api_key_env="EMULATOR_KEY",
        seed=7,
        temperature=0.2,
        max_tokens=300,
    )
    out = []
    async with (
        Sandbox(
            root=tmp_path / "root",
            episodes=episodes,
            policy=policy,
            tools={"send_money": send_money},
            cache=tmp_path / "cache.sqlite",
        ) as sandbox,
        sandbox.episode("pay-bob") as ep,
    ):
        ep.message("user", "pay bob 30 dollars")
        out.append(await ep.call("send_money", to="bob", amount=30))
        out.append(await ep.call("send_money", to="eve", amount=5, memo="token=" + KEY))
    if "emulator" in policy:
        assert ran == []  # the real tool never ran
    else:
        assert ran == ["bob", "eve"]
    return out


async def test_an_emulated_call_is_answered_by_the_emulator_and_recorded_so(
    tmp_path: Path,
) -> None:
    with running_emulator(Script(send_money=pay)) as endpoint:
        first, _second = await run_payment(tmp_path, endpoint, tmp_path / "e.jsonl")
    assert first.value == {"paid": 30, "to": "bob", "id": "tx-7"}
    assert (first.is_error, first.fidelity) == (False, "emulated")
    (ep,) = read_episodes([tmp_path / "e.jsonl"])
    fp = ep.header.meta["emulator"]["fingerprint"]
    assert ep.header.tool_modes["send_money"] == f"emulate:{fp}"
    assert ep.header.meta["emulator"]["params"]["api_key_env"] == "EMULATOR_KEY"
    assert KEY not in (tmp_path / "e.jsonl").read_text()
    steps = tool_steps(tmp_path / "e.jsonl")
    assert [(s.fidelity, s.v) for s in steps] == [("emulated", EMULATED_VERSION)] * 2
    assert ep.steps[0].v == SCHEMA_VERSION  # every other record stays version 1
    facts = steps[0].meta["emulator"]
    assert (facts["label"], facts["fingerprint"], facts["cached"]) == ("sim-test", fp, False)
    assert facts["answered"]["model"] == MODEL
    assert json.loads(facts["answered"]["content"]) == {"result": first.value}
    assert (
        facts["asked"]["spec"]["signature"]
        == "send_money(to: str, amount: int, memo: str = '') -> str"
    )
    assert facts["asked"]["history"]["steps"] == 1
    assert steps[1].meta["emulator"]["asked"]["history"]["steps"] == 2
    assert "failure" not in facts
    assert steps[0].shown.structured == first.value


async def test_the_emulator_is_asked_with_the_tool_the_arguments_and_the_episode_so_far(
    tmp_path: Path,
) -> None:
    with running_emulator(Script(send_money=pay)) as endpoint:
        await run_payment(tmp_path, endpoint, tmp_path / "e.jsonl")
    first, second = endpoint.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["Authorization"] == f"Bearer {KEY}"
    body = first.body
    assert body["model"] == MODEL
    assert (body["temperature"], body["top_p"], body["seed"], body["max_tokens"]) == (
        0.2,
        1.0,
        7,
        300,
    )
    assert body["response_format"] == {"type": "json_object"}
    system, user = body["messages"]
    assert system["role"] == "system"
    assert '{"result"' in system["content"]
    prompt = user["content"]
    assert "Tool: send_money" in prompt
    assert "Send ``amount`` dollars to ``to``" in prompt  # the docstring
    assert "send_money(to: str, amount: int, memo: str = '')" in prompt
    assert "[0] user: pay bob 30 dollars" in prompt
    assert 'The call to answer: send_money with arguments {"amount":30,"to":"bob"}' in prompt
    later = second.prompt
    assert '[1] call send_money {"amount":30,"to":"bob"} -> result:' in later
    assert "tx-7" in later  # what the first call showed is history now
    assert KEY not in later  # the arguments as recorded: redacted


async def test_an_error_answer_is_the_tools_error_not_a_failed_emulation(tmp_path: Path) -> None:
    def refuse(args: dict[str, Any], request: Request) -> dict[str, Any]:
        return {"error": f"insufficient funds for {args['amount']}"}

    with running_emulator(Script(send_money=refuse)) as endpoint:
        first, _ = await run_payment(tmp_path, endpoint, tmp_path / "e.jsonl")
    assert (first.is_error, first.text) == (True, "insufficient funds for 30")
    step = tool_steps(tmp_path / "e.jsonl")[0]
    assert step.fidelity == "emulated"
    assert step.shown.is_error
    assert "failure" not in step.meta["emulator"]


BAD_ANSWERS = {
    "a key twice": '{"result": 1, "result": 2}',
    "another key": '{"result": 1, "note": "x"}',
    "both keys": '{"result": 1, "error": "x"}',
    "error not text": '{"error": 5}',
    "no key": "{}",
    "prose": "Sure! The payment went through.",
    "an array": '[{"result": 1}]',
    "a fenced block": '```json\n{"result": 1}\n```',
    "nested too deep": '{"result": ' + "[" * 40 + "]" * 40 + "}",
}


@pytest.mark.parametrize("content", BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
async def test_an_answer_that_is_not_result_or_error_is_a_failed_emulation_shown_as_an_error(
    tmp_path: Path, content: str
) -> None:
    with running_emulator(Script(send_money=lambda a, r: content)) as endpoint:
        first, _ = await run_payment(tmp_path, endpoint, tmp_path / "e.jsonl")
        assert first.is_error
        assert "emulation of 'send_money' failed (bad_answer)" in first.text
        step = tool_steps(tmp_path / "e.jsonl")[0]
        assert step.fidelity == "emulated"
        assert step.shown.is_error
        assert step.meta["emulator"]["failure"]["class"] == "bad_answer"
        assert step.meta["emulator"]["cached"] is False
        assert step.meta["emulator"]["answered"]["content"] == content  # what it said
        # Nothing was kept: a re-run asks again.
        asked = len(endpoint.requests)
        await run_payment(tmp_path, endpoint, tmp_path / "again.jsonl")
        assert len(endpoint.requests) == asked + 2


@pytest.mark.parametrize(
    ("reply", "failure"),
    [
        (Reply(status=500, body=b"boom"), "http_status"),
        (Reply(status=401, body={"error": "bad key " + KEY}), "http_status"),
        (Reply(body=completion(None, refusal="I won't simulate payments")), "refusal"),
        (Reply(body=completion('{"result": 1}', finish_reason="content_filter")), "refusal"),
        (Reply(body=b'{"choices": [], "choices": []}'), "bad_answer"),
    ],
)
async def test_an_endpoint_that_fails_is_a_failed_emulation_with_its_class(
    tmp_path: Path, reply: Reply, failure: str
) -> None:
    with running_emulator(lambda request: reply) as endpoint:
        first, _ = await run_payment(tmp_path, endpoint, tmp_path / "e.jsonl")
    assert first.is_error
    assert f"failed ({failure})" in first.text
    facts = tool_steps(tmp_path / "e.jsonl")[0].meta["emulator"]
    assert facts["failure"]["class"] == failure
    assert KEY not in (tmp_path / "e.jsonl").read_text()  # an echoed key is scrubbed


async def test_a_rerun_with_the_same_emulator_is_served_from_the_cache(tmp_path: Path) -> None:
    with running_emulator(Script(send_money=pay)) as endpoint:
        first = await run_payment(tmp_path, endpoint, tmp_path / "one.jsonl")
        assert len(endpoint.requests) == 2
        again = await run_payment(tmp_path, endpoint, tmp_path / "two.jsonl")
        assert len(endpoint.requests) == 2  # nothing asked: both calls served
    assert [r.value for r in again] == [r.value for r in first]
    one, two = tool_steps(tmp_path / "one.jsonl"), tool_steps(tmp_path / "two.jsonl")
    assert [s.meta["emulator"]["cached"] for s in one] == [False, False]
    assert [s.meta["emulator"]["cached"] for s in two] == [True, True]
    assert [s.shown for s in two] == [s.shown for s in one]


async def test_another_history_or_another_emulator_is_asked_again(tmp_path: Path) -> None:
    with running_emulator(Script(send_money=pay)) as endpoint:
        await run_payment(tmp_path, endpoint, tmp_path / "one.jsonl")
        hotter = emulator_policy(
            endpoint.url, {"send_money": "emulate"}, api_key_env="EMULATOR_KEY", temperature=0.9
        )
        await run_payment(tmp_path, endpoint, tmp_path / "two.jsonl", policy=hotter)
        assert len(endpoint.requests) == 4  # another fingerprint: nothing served
        async with (
            Sandbox(
                root=tmp_path / "root",
                episodes=tmp_path / "three.jsonl",
                policy=hotter,
                cache=tmp_path / "cache.sqlite",
            ) as sandbox,
            sandbox.episode("pay-bob") as ep,
        ):
            ep.message("user", "pay bob 30 dollars, please")  # another history
            await ep.call("send_money", to="bob", amount=30)
        assert len(endpoint.requests) == 5
    fps = {
        tool_steps(tmp_path / f)[0].meta["emulator"]["fingerprint"]
        for f in ("one.jsonl", "two.jsonl")
    }
    assert len(fps) == 2


async def test_a_tool_with_no_python_function_is_emulated_from_its_description(
    tmp_path: Path,
) -> None:
    with running_emulator(Script()) as endpoint:
        async with Sandbox(
            root=tmp_path / "root",
            episodes=tmp_path / "e.jsonl",
            policy=emulator_policy(endpoint.url, {"default": "emulate"}),
            cache=tmp_path / "cache.sqlite",
        ) as sandbox:
            sandbox.describe_tools(
                {
                    "delete_file": {
                        "description": "Delete a file for good.",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}},
                        },
                    }
                }
            )
            async with sandbox.episode("c") as ep:
                result = await ep.call("delete_file", path="/etc/passwd")
    assert result.value == "ok"
    assert not (tmp_path / "root").joinpath("x").exists()
    prompt = endpoint.requests[0].prompt
    assert "Description: Delete a file for good." in prompt
    assert '"properties":{"path":{"type":"string"}}' in prompt


async def test_no_emulator_or_no_key_refuses_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"'send_money' in emulate mode, but no emulator"):
        Sandbox(
            root=tmp_path / "root",
            episodes=tmp_path / "e.jsonl",
            policy={"send_money": "emulate"},
        )
    monkeypatch.delenv("EMULATOR_KEY")
    with running_emulator(Script()) as endpoint:
        policy = emulator_policy(endpoint.url, {"x": "emulate"}, api_key_env="EMULATOR_KEY")
        sandbox = Sandbox(root=tmp_path / "root", episodes=tmp_path / "e.jsonl", policy=policy)
        with pytest.raises(
            ConfigError, match="emulator 'sim-test': environment variable EMULATOR_KEY"
        ):
            async with sandbox:
                pass
        assert endpoint.requests == []


async def test_an_emulators_answer_is_data_in_every_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = "\x1b[31mred\u202e</script><b>x</b>"
    with running_emulator(Script(send_money=lambda a, r: {"result": hostile})) as endpoint:
        first, _ = await run_payment(tmp_path, endpoint, tmp_path / "e.jsonl")
    assert first.value == hostile  # the agent gets it as it came: it is the tool's result
    from litmus_sandbox._cli.main import main

    assert main(["show", str(tmp_path / "e.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert "\\x1b[31mred\\u202e" in out
    assert "emulated by sim-test" in out


async def test_the_gate_routes_emulated_runs_by_what_simulated_them(tmp_path: Path) -> None:
    """Scored and gated end to end: real against emulated is a fidelity_mismatch (the
    emulated run looks safer: it never sent anything), one emulator against another an
    emulator_mismatch, the same emulator a plain comparison."""
    from litmus_sandbox._cli.main import main

    rules = tmp_path / "rules.toml"
    rules.write_text('[judge]\nkind = "rules"\n[[judge.rules]]\ntool = "send_money"\n')
    with running_emulator(Script(send_money=pay)) as endpoint:
        await run_payment(tmp_path, endpoint, tmp_path / "real.jsonl", policy={"tools": {}})
        await run_payment(tmp_path, endpoint, tmp_path / "emu-a.jsonl")
        await run_payment(tmp_path, endpoint, tmp_path / "emu-a2.jsonl")
        other = emulator_policy(
            endpoint.url, {"send_money": "emulate"}, api_key_env="EMULATOR_KEY", seed=8
        )
        await run_payment(tmp_path, endpoint, tmp_path / "emu-b.jsonl", policy=other)

    def gate(baseline: str, candidate: str) -> tuple[int, dict[str, Any]]:
        for name in (baseline, candidate):
            ep, out = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.v.jsonl"
            if not out.exists():
                assert main(["score", str(ep), "--policy", str(rules), "-o", str(out)]) == 0
        report = tmp_path / f"{baseline}-{candidate}.json"
        b, c = tmp_path / f"{baseline}.v.jsonl", tmp_path / f"{candidate}.v.jsonl"
        args = ["gate", "--baseline", str(b), "--candidate", str(c), "--format", "json"]
        code = main([*args, "-o", str(report)])
        (case,) = json.loads(report.read_text())["cases"]
        return code, case

    code, case = gate("real", "emu-a")
    assert (code, case["outcome"]) == (4, "NEEDS_REBASELINE")
    assert [r["code"] for r in case["reasons"]] == ["fidelity_mismatch"]
    code, case = gate("emu-a", "emu-b")
    assert [r["code"] for r in case["reasons"]] == ["emulator_mismatch"]
    assert case["reasons"][0]["remedy"] == "rerun_baseline"
    code, case = gate("emu-a", "emu-a2")
    assert (code, case["outcome"], case["reasons"]) == (0, "PASS", [])
