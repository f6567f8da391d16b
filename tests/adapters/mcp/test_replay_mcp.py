"""Server-less MCP replay: ``proxy mcp --replay EPISODES`` with no server command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from factories import call, end, header
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_mcp_helpers import (
    PROXY,
    RawClient,
    calls,
    git_server,
    node_server,
    one_episode,
    open_proxy,
    request,
    tool_call,
)
from test_mcp_real_servers import dump, make_repo, proxied

from litmus_sandbox import JsonlWriter
from litmus_sandbox._cli.main import main

pytestmark = pytest.mark.anyio

INIT = request(
    0,
    "initialize",
    {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
)


@pytest.fixture
def anyio_backend() -> str:
    """The proxy runs in a subprocess (asyncio): the test side needs only one backend."""
    return "asyncio"


async def record_session(folder: Path, *messages: bytes) -> list[Any]:
    """Record a session with the scripted server through the stdio proxy."""
    client = RawClient(await open_proxy(folder, "--case-id", "adv-1"))
    replies = []
    for data in messages:
        await client.send(data)
        replies.append(await client.recv_json())
    assert await client.finish() == 0
    return replies


async def test_a_recorded_session_is_served_with_no_server(tmp_path: Path) -> None:
    sent = [INIT, request(1, "tools/list"), tool_call(2, "echo", {"text": "hi"})]
    folder = tmp_path / "rec"
    folder.mkdir()
    recorded = await record_session(folder, *sent)
    cassette = tmp_path / "rec" / "eps.jsonl"
    rec = one_episode(cassette)
    assert set(rec.header.meta["mcp"]["server_answers"]) == {"initialize", "tools/list"}

    replay = tmp_path / "replay"
    replay.mkdir()
    proxy = await open_proxy(replay, "--replay", str(cassette), server=[])
    client = RawClient(proxy)
    replies = []
    for data in [
        *sent,
        tool_call(3, "echo", {"text": "never recorded"}),
        request(4, "resources/list"),
        request(5, "ping"),
    ]:
        await client.send(data)
        replies.append(await client.recv_json())
    assert await client.finish() == 0
    init, listed, echoed, missed, unknown, pong = replies
    assert init["result"] == recorded[0]["result"]  # the real server's own answer
    assert listed["result"] == recorded[1]["result"]
    assert echoed["result"]["content"] == recorded[2]["result"]["content"]
    assert missed["result"]["isError"] is True
    assert unknown["error"]["code"] == -32601
    assert pong == {"jsonrpc": "2.0", "id": 5, "result": {}}
    ep = one_episode(replay / "eps.jsonl")
    assert ep.case_id == "mcp-session"  # another case: replayed from the whole cassette
    assert ep.header.meta["mcp"]["serverless_replay"] is True
    hit, miss = calls(ep)
    assert hit.fidelity == "replayed"
    assert hit.source is not None
    assert hit.source.episode_id == rec.episode_id
    assert miss.meta["replay"]["divergence"]["closest"][0]["differs"] == ["$.text"]
    assert main(["replay", "--check", str(replay / "eps.jsonl")]) == 1


async def test_answers_are_synthesized_when_the_recording_has_none(tmp_path: Path) -> None:
    """A hand-written cassette: the official client still connects, lists and calls."""
    cassette = tmp_path / "hand.jsonl"
    with JsonlWriter(cassette) as w:
        w.write(header("h1", "c1"))
        w.write(call(0, "weather", "sunny", eid="h1", args={"city": "Oslo"}))
        w.write(call(1, "weather", "rain", eid="h1", args={"city": "Bergen"}))
        w.write(end("h1", 2))
    args = [*PROXY[1:], "--episodes", str(tmp_path / "eps.jsonl"), "--replay", str(cassette)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=tmp_path)
    async with Client(params, cache=None) as client:
        tools = dump(await client.list_tools())
        bergen = await client.call_tool("weather", {"city": "Bergen"})
        oslo = await client.call_tool("weather", {"city": "Oslo"})
        paris = await client.call_tool("weather", {"city": "Paris"})
    assert [t["name"] for t in tools["tools"]] == ["weather"]
    assert [bergen.is_error, oslo.is_error, paris.is_error] == [False, False, True]
    assert dump(bergen)["content"][0]["text"] == "rain"
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.header.meta["mcp"]["protocol_version"] == "2026-07-28"  # the SDK went modern
    assert "server/discover" in ep.header.meta["mcp"]["server_answers"]


async def test_a_stateless_server_session_replays_to_the_official_client(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    server = [*git_server(), "--repository", str(repo)]
    status = {"repo_path": str(repo)}
    async with Client(proxied(tmp_path, server, "--root", str(repo)), cache=None) as client:
        tools = dump(await client.list_tools())
        got = dump(await client.call_tool("git_status", status))
    args = [*PROXY[1:], "--episodes", str(tmp_path / "replayed.jsonl")]
    args += ["--replay", str(tmp_path / "eps.jsonl")]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=tmp_path)
    async with Client(params, cache=None) as client:
        assert dump(await client.list_tools()) == tools
        assert dump(await client.call_tool("git_status", status)) == got


async def test_an_initialize_era_session_replays_to_the_official_client(tmp_path: Path) -> None:
    """The npm servers speak 2025-11-25 (``initialize``): the replay answers the client's
    ``server/discover`` as such a server does (method not found), so the client falls back
    to ``initialize`` and gets the recorded answers, stubs with their structure included."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\n")
    server = [*node_server("filesystem"), str(root)]
    read = {"path": str(root / "notes.txt")}
    async with Client(proxied(tmp_path, server, "--root", str(root)), cache=None) as client:
        tools = dump(await client.list_tools())
        got = dump(await client.call_tool("read_text_file", read))
    rec = one_episode(tmp_path / "eps.jsonl")
    assert rec.header.meta["mcp"]["protocol_version"] == "2025-11-25"
    assert "server/discover" not in rec.header.meta["mcp"]["server_answers"]
    policy = tmp_path / "replay.toml"
    policy.write_text(
        '[tools]\ndefault = "replay"\nwrite_file = { mode = "stub", result = "Wrote" }\n'
    )
    args = [*PROXY[1:], "--episodes", str(tmp_path / "replayed.jsonl"), "--policy", str(policy)]
    args += ["--replay", str(tmp_path / "eps.jsonl")]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=tmp_path)
    async with Client(params, cache=None) as client:
        assert dump(await client.list_tools()) == tools
        assert dump(await client.call_tool("read_text_file", read)) == got
        wrote = await client.call_tool("write_file", {"path": str(root / "x"), "content": "x"})
    assert wrote.structured_content == {"content": "Wrote"}
    ep = one_episode(tmp_path / "replayed.jsonl")
    assert ep.header.meta["mcp"]["protocol_version"] == "2025-11-25"
    assert [s.fidelity for s in calls(ep)] == ["replayed", "stubbed"]


def test_policies_that_need_a_server_are_refused(tmp_path: Path) -> None:
    cassette = tmp_path / "rec.jsonl"
    with JsonlWriter(cassette) as w:
        w.write(header("h1", "c1"))
        w.write(end("h1", 0))
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\ndefault = "replay"\nsearch = "real"\n')
    for extra in (["--replay-on-miss", "spy"], ["--policy", str(policy)]):
        r = subprocess.run(
            [*PROXY, "--episodes", str(tmp_path / "e.jsonl"), "--replay", str(cassette), *extra],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == 2, r.stderr
        assert "server-less replay" in r.stderr
        assert "Traceback" not in r.stderr


def test_a_torn_cassette_is_said_on_stderr(tmp_path: Path) -> None:
    cassette = tmp_path / "torn.jsonl"
    with JsonlWriter(cassette) as w:
        w.write(header("h1", "c1"))
        w.write(call(0, "weather", "rain", eid="h1", args={"city": "Bergen"}))
    whole = cassette.read_bytes()
    cassette.write_bytes(whole + b'{"kind": "step", "v": 1, "episode_id": "h1", "ind')
    r = subprocess.run(
        [*PROXY, "--episodes", str(tmp_path / "e.jsonl"), "--replay", str(cassette)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "torn last line" in line]
    assert len(said) == 1
    assert said[0].startswith(f"litmus-sandbox: {cassette}:3: warning: torn last line")
    assert "RecordingWarning" not in r.stderr  # said once, as one line


async def test_the_replay_refuses_what_it_cannot_record_like_the_proxy(tmp_path: Path) -> None:
    """The replay runs on the proxy's relay core: the same refusals, the same records."""
    cassette = tmp_path / "rec.jsonl"
    with JsonlWriter(cassette) as w:
        w.write(header("h1", "c1"))
        w.write(call(0, "weather", "rain", eid="h1", args={"city": "Bergen"}))
        w.write(end("h1", 1))
    client = RawClient(await open_proxy(tmp_path, "--replay", str(cassette), server=[]))
    await client.send(tool_call(1, "weather", ["not", "an", "object"]))  # type: ignore[arg-type]
    refused = await client.recv_json()
    await client.send(tool_call(2, "weather", {"city": "Bergen"}))
    replayed = await client.recv_json()
    assert await client.finish() == 0
    assert refused["error"]["code"] == -32602
    assert replayed["result"]["content"][0]["text"] == "rain"
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert [r["request_id"] for r in ep.end.meta["mcp"]["refused"]] == [1]
    (step,) = calls(ep)
    assert step.fidelity == "replayed"
