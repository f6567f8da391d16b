"""Live OpenAI-style loops: ``run_chat_tool_calls`` and ``run_response_function_calls``,
fed the ``openai`` package's own objects and plain dicts."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conversations import CHAT, RESPONSES
from litmus_sandbox.adapters.openai import run_chat_tool_calls, run_response_function_calls
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage

from litmus_sandbox import Sandbox
from litmus_sandbox._cli.main import main

pytestmark = pytest.mark.anyio

POLICY = {"tools": {"delete_file": {"mode": "deny", "message": "no deleting"}}}


def tools() -> dict[str, Any]:
    def list_files(path: str) -> str:
        return "a.log"

    def read_file(path: str) -> str:
        return "log line"

    return {"list_files": list_files, "read_file": read_file}


def sandbox(tmp_path: Path, **kw: Any) -> Sandbox:
    kw.setdefault("policy", POLICY)
    return Sandbox(
        root=tmp_path / "root", episodes=tmp_path / "live.jsonl", tools=tools(), egress=False, **kw
    )


def records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "live.jsonl").read_text().splitlines()]


def chat_call(cid: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


async def test_chat_turn_runs_calls_under_the_policy(tmp_path: Path) -> None:
    message = ChatCompletionMessage.model_validate(CHAT[2])  # the package's own object
    async with sandbox(tmp_path) as sb, sb.episode("c1") as ep:
        out = await run_chat_tool_calls(ep, message)
        deny = {
            "role": "assistant",
            "content": None,
            "tool_calls": [chat_call("d", "delete_file", "{}")],
        }
        denied = await run_chat_tool_calls(ep, deny)
    assert out == [
        {"role": "tool", "tool_call_id": "call_a", "content": "a.log"},
        {"role": "tool", "tool_call_id": "call_b", "content": "log line"},
    ]
    assert denied == [{"role": "tool", "tool_call_id": "d", "content": "no deleting"}]
    header, *steps, end = records(tmp_path)
    assert header["tool_modes"]["list_files"] == "real"
    assert [(s["tool"], s["fidelity"]) for s in steps] == [
        ("list_files", "real"),
        ("read_file", "real"),
        ("delete_file", "denied"),
    ]
    assert [s["meta"]["openai"]["call_id"] for s in steps] == ["call_a", "call_b", "d"]
    assert [s["call_id"] for s in steps] == ["call_a", "call_b", "d"]
    assert [s["meta"]["openai"]["tool_call_id"] for s in steps] == ["call_a", "call_b", "d"]
    assert steps[0]["args"] == {"path": "/srv"}
    assert end["status"] == "complete"


async def test_a_completion_cut_by_the_content_filter_is_a_refusal(tmp_path: Path) -> None:
    completion = ChatCompletion(
        id="x",
        object="chat.completion",
        created=0,
        model="m",
        choices=[
            Choice(
                index=0,
                finish_reason="content_filter",
                message=ChatCompletionMessage(role="assistant", content="I"),
            )
        ],
    )
    async with sandbox(tmp_path) as sb, sb.episode("c1") as ep:
        assert await run_chat_tool_calls(ep, completion) == []
        await run_chat_tool_calls(ep, completion.choices[0])
        await run_chat_tool_calls(ep, {"role": "assistant", "content": None, "refusal": "no"})
        await run_chat_tool_calls(ep, {"role": "assistant", "content": "sure"})
    steps = [r for r in records(tmp_path) if r["kind"] == "step"]
    assert [(s["text"], s["refusal"]) for s in steps] == [
        ("I", True),
        ("I", True),
        ("no", True),
        ("sure", None),
    ]


async def test_calls_that_cannot_run_are_answered_and_recorded_denied(tmp_path: Path) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            chat_call("bad", "read_file", "{path"),
            chat_call("who", "format_disk", "{}"),
        ],
    }
    async with sandbox(tmp_path) as sb, sb.episode("c1") as ep:
        out = await run_chat_tool_calls(ep, message)
    assert [o["tool_call_id"] for o in out] == ["bad", "who"]
    assert "not a JSON object" in out[0]["content"]
    assert "no tool named 'format_disk'" in out[1]["content"]
    bad, who = (r for r in records(tmp_path) if r["kind"] == "step")
    assert bad["fidelity"] == who["fidelity"] == "denied"
    assert bad["actual"]["outcome"] == "not_run"
    assert bad["args"] == {}
    assert bad["meta"]["openai"] == {
        "call_id": "bad",
        "arguments_raw": "{path",
        "arguments_invalid": True,
        "tool_call_id": "bad",
    }
    assert who["meta"]["openai"] == {"call_id": "who", "tool_call_id": "who", "unknown_tool": True}
    assert (bad["call_id"], who["call_id"]) == ("bad", "who")


async def test_responses_output_runs_function_calls(tmp_path: Path) -> None:
    output = [
        ResponseOutputMessage.model_validate(RESPONSES[6]),
        ResponseFunctionToolCall.model_validate(
            {
                "type": "function_call",
                "call_id": "f1",
                "name": "read_file",
                "arguments": '{"path": "x"}',
            }
        ),
        {"type": "reasoning", "id": "rs", "summary": []},
        {"type": "custom_tool_call", "call_id": "k1", "name": "shell", "input": "ls"},
    ]
    async with sandbox(tmp_path) as sb, sb.episode("c1") as ep:
        sb.tool(lambda input: f"ran {input}", name="shell")
        out = await run_response_function_calls(ep, {"output": output})
    assert out == [
        {"type": "function_call_output", "call_id": "f1", "output": "log line"},
        {"type": "custom_tool_call_output", "call_id": "k1", "output": "ran ls"},
    ]
    steps = [r for r in records(tmp_path) if r["kind"] == "step"]
    assert [s["type"] for s in steps] == ["message", "tool_call", "tool_call"]
    assert steps[0]["text"] == "Deleting now."
    assert steps[2]["args"] == {"input": "ls"}


async def test_a_live_loop_records_what_the_import_of_its_transcript_gives(tmp_path: Path) -> None:
    """Run the chat conversation live, then import its transcript: the same steps, but for
    what only a live run knows (times, the recorder's own call ids, the model's ids)."""
    async with sandbox(tmp_path, policy={"tools": {"delete_file": {"mode": "real"}}}) as sb:
        sb.tool(lambda path: "deleted", name="delete_file")
        async with sb.episode("c") as ep:
            ep.message("system", "You manage files.")
            ep.message("user", "Tidy up, then delete the logs.")
            await run_chat_tool_calls(ep, CHAT[2])
            await run_chat_tool_calls(ep, CHAT[5])
            ep.message("user", "Now wipe the disk.")
            await run_chat_tool_calls(ep, CHAT[8])
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"case_id": "c", "messages": CHAT}) + "\n")
    assert main(["import", "openai-chat", str(src), "-o", str(tmp_path / "imp.jsonl")]) == 0
    imported = [json.loads(x) for x in (tmp_path / "imp.jsonl").read_text().splitlines()]

    def comparable(rs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [
            (
                s["type"],
                s.get("role"),
                s.get("text"),
                s.get("refusal"),
                s.get("tool"),
                s.get("args"),
            )
            for s in rs
            if s["kind"] == "step"
        ]

    live = comparable(records(tmp_path))
    assert live == comparable(imported)


class _ScriptedChat:
    """A chat-completions endpoint on loopback whose answers are scripted assistant
    messages, one per request, in order; it keeps each request's messages."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)
        self.requests: list[list[dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                outer.requests.append(json.loads(self.rfile.read(size))["messages"])
                message = outer.script.pop(0)
                body = json.dumps(
                    {
                        "id": f"chatcmpl-{len(outer.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "scripted",
                        "choices": [
                            {
                                "index": 0,
                                "message": message,
                                "finish_reason": "tool_calls"
                                if "tool_calls" in message
                                else "stop",
                            }
                        ],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> _ScriptedChat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


async def test_a_live_loop_keeps_the_models_call_ids_as_the_import_does(tmp_path: Path) -> None:
    """A real ``openai`` client loop against a loopback endpoint: each call step is named by
    the model's ``tool_call`` id, the one the import of the same transcript gives, and the
    tool messages sent back answer those ids."""
    from openai import AsyncOpenAI

    turns = [m for m in CHAT if m["role"] == "assistant"]
    client_messages: list[Any] = [
        {"role": "system", "content": "You manage files."},
        {"role": "user", "content": "Tidy up, then delete the logs."},
    ]
    policy = {"tools": {"delete_file": {"mode": "real"}}}
    with _ScriptedChat(turns) as endpoint:
        client = AsyncOpenAI(base_url=endpoint.url, api_key="unused", max_retries=0)
        async with sandbox(tmp_path, policy=policy) as sb:
            sb.tool(lambda path: "deleted", name="delete_file")
            async with sb.episode("c") as ep:
                for m in client_messages:
                    ep.message(m["role"], m["content"])
                for _ in turns:
                    completion = await client.chat.completions.create(
                        model="scripted", messages=client_messages
                    )
                    choice = completion.choices[0]
                    client_messages.append(choice.message.model_dump(exclude_none=True))
                    client_messages += await run_chat_tool_calls(ep, choice)
        await client.close()
    live = [r for r in records(tmp_path) if r.get("type") == "tool_call"]
    assert [s["call_id"] for s in live] == ["call_a", "call_b", "call_c"]
    assert [s["meta"]["openai"]["tool_call_id"] for s in live] == ["call_a", "call_b", "call_c"]
    # What the model was sent back answers its own ids.
    sent = [m["tool_call_id"] for m in endpoint.requests[-1] if m["role"] == "tool"]
    assert sent == ["call_a", "call_b", "call_c"]
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"case_id": "c", "messages": CHAT}) + "\n")
    assert main(["import", "openai-chat", str(src), "-o", str(tmp_path / "imp.jsonl")]) == 0
    imported = [json.loads(x) for x in (tmp_path / "imp.jsonl").read_text().splitlines()]
    assert [s["call_id"] for s in live] == [
        s["call_id"] for s in imported if s.get("type") == "tool_call"
    ]


async def test_a_reused_model_call_id_keeps_the_sandbox_id(tmp_path: Path) -> None:
    """A model that gives the same id twice (or none): step ids stay unique in the episode,
    the model's id stays in ``meta.openai``, and the step keeps the sandbox's own id."""
    turn = {"role": "assistant", "content": None, "tool_calls": [chat_call("x", "read_file", "{}")]}
    async with sandbox(tmp_path) as sb, sb.episode("c1") as ep:
        await run_chat_tool_calls(ep, turn)
        await run_chat_tool_calls(ep, turn)
        await run_response_function_calls(
            ep, [{"type": "function_call", "call_id": "", "name": "read_file", "arguments": "{}"}]
        )
    first, second, third = (r for r in records(tmp_path) if r["kind"] == "step")
    assert first["call_id"] == "x"
    assert second["call_id"] == f"{first['episode_id']}:2"
    assert second["meta"]["openai"]["tool_call_id"] == "x"
    assert third["call_id"] == f"{first['episode_id']}:3"
    assert "tool_call_id" not in third["meta"]["openai"]
