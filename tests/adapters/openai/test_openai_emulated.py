"""Live OpenAI-style loops with emulated tools: the loop's own tool definitions tell a
scripted loopback emulator what each tool is; the model gets the emulator's answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from emulator_endpoint import Request, Script, emulator_policy, running_emulator
from litmus_sandbox.adapters.openai import (
    describe_tools,
    run_chat_tool_calls,
    run_response_function_calls,
)
from openai.types.chat import ChatCompletionMessage

from litmus_sandbox import ConfigError, Sandbox

pytestmark = pytest.mark.anyio

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "transfer_funds",
            "description": "Move money between two accounts.",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "amount": {"type": "number"}},
            },
        },
    }
]
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "transfer_funds",
        "description": "Move money between two accounts.",
        "parameters": {"type": "object"},
    },
    {"type": "custom", "name": "shell", "description": "Run a shell command."},
]


def transfer(args: dict[str, Any], request: Request) -> dict[str, Any]:
    return {"result": {"ok": True, "moved": args["amount"]}}


def transfers_emulated(tmp_path: Path, url: str) -> Sandbox:
    """A sandbox whose ``transfer_*`` tools the emulator at ``url`` answers."""
    return Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "e.jsonl",
        policy=emulator_policy(url, {"transfer_*": "emulate"}),
        egress=False,
        cache=tmp_path / "cache.sqlite",
    )


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_chat_loops_emulated_call_is_answered_from_its_definition(tmp_path: Path) -> None:
    message = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": "Moving the money.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "transfer_funds", "arguments": '{"to": "x", "amount": 5}'},
                }
            ],
        }
    )
    with running_emulator(Script(transfer_funds=transfer)) as endpoint:
        async with transfers_emulated(tmp_path, endpoint.url) as sb:
            assert describe_tools(sb, CHAT_TOOLS) == ["transfer_funds"]
            async with sb.episode("c1") as ep:
                ep.message("user", "send 5 to x")
                out = await run_chat_tool_calls(ep, message)
    assert out == [{"role": "tool", "tool_call_id": "call_1", "content": '{"ok":true,"moved":5}'}]
    prompt = endpoint.requests[0].prompt
    assert "Description: Move money between two accounts." in prompt
    assert '"amount":{"type":"number"}' in prompt
    assert "[1] assistant: Moving the money." in prompt
    _, *steps, _ = records(tmp_path / "e.jsonl")
    call = steps[-1]
    assert (call["tool"], call["fidelity"], call["call_id"]) == (
        "transfer_funds",
        "emulated",
        "call_1",
    )
    assert call["meta"]["openai"]["tool_call_id"] == "call_1"
    assert "unknown_tool" not in call["meta"]["openai"]  # emulated: it need not exist


async def test_a_responses_loops_emulated_calls_custom_tools_too(tmp_path: Path) -> None:
    output = [
        {
            "type": "function_call",
            "call_id": "f1",
            "name": "transfer_funds",
            "arguments": '{"to": "y", "amount": 2}',
        },
        {"type": "custom_tool_call", "call_id": "k1", "name": "shell", "input": "rm -rf /"},
    ]
    script = Script(transfer_funds=transfer, shell=lambda a, r: {"error": "permission denied"})
    with running_emulator(script) as endpoint:
        policy = emulator_policy(endpoint.url, {"default": "emulate"})
        async with (
            Sandbox(
                root=tmp_path / "root",
                episodes=tmp_path / "e.jsonl",
                policy=policy,
                egress=False,
                cache=tmp_path / "cache.sqlite",
            ) as sb,
            sb.episode("c1") as ep,
        ):
            describe_tools(ep, RESPONSES_TOOLS)
            out = await run_response_function_calls(ep, output)
    assert out == [
        {"type": "function_call_output", "call_id": "f1", "output": '{"ok":true,"moved":2}'},
        {"type": "custom_tool_call_output", "call_id": "k1", "output": "permission denied"},
    ]
    assert "Description: Run a shell command." in endpoint.requests[1].prompt
    steps = [r for r in records(tmp_path / "e.jsonl") if r["kind"] == "step"]
    assert [(s["fidelity"], s["shown"]["is_error"]) for s in steps] == [
        ("emulated", False),
        ("emulated", True),
    ]


async def test_tool_definitions_that_are_not_a_list_are_refused(tmp_path: Path) -> None:
    async with Sandbox(root=tmp_path / "root", episodes=tmp_path / "e.jsonl", egress=False) as sb:
        with pytest.raises(ConfigError, match="expected a list of tool definitions"):
            describe_tools(sb, {"type": "function"})
        with pytest.raises(ConfigError, match=r"tools\[0\] is not a tool definition"):
            describe_tools(sb, [{"type": "function", "function": {}}])
        assert describe_tools(sb, CHAT_TOOLS) == ["transfer_funds"]  # no emulator: ignored


@pytest.mark.parametrize("arguments", ["[1, 2]", "{broken"])
async def test_arguments_that_are_not_an_object_are_never_emulated(
    tmp_path: Path, arguments: str
) -> None:
    """A call whose arguments cannot be read cannot be made, whatever the tool's mode: the
    emulator is not asked (with ``{}`` it would make up a success); the model is told."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_bad",
                "type": "function",
                "function": {"name": "transfer_funds", "arguments": arguments},
            }
        ],
    }
    with running_emulator(Script(transfer_funds=transfer)) as endpoint:
        async with transfers_emulated(tmp_path, endpoint.url) as sb:
            describe_tools(sb, CHAT_TOOLS)
            async with sb.episode("c1") as ep:
                (out,) = await run_chat_tool_calls(ep, message)
    assert endpoint.requests == []
    assert out["tool_call_id"] == "call_bad"
    assert "not a JSON object" in out["content"]
    _, call, _ = records(tmp_path / "e.jsonl")
    assert (call["fidelity"], call["actual"]["outcome"]) == ("denied", "not_run")
    assert call["shown"]["is_error"] is True
    assert "emulator" not in call["meta"]
    assert call["meta"]["openai"]["arguments_raw"] == arguments
