"""The stdio proxy between hostile peers, its memory capped: it stays up, bounded, and
records what they did (a scripted server, ``tests/programs/mcp_hostile_server.py``, and
a raw client)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from factories import PROGRAMS
from test_mcp_helpers import (
    PROXY,
    RawClient,
    calls,
    line,
    one_episode,
    proxy_command,
    request,
    tool_call,
)

pytestmark = pytest.mark.anyio

#: The proxy's address space: several times what it needs (about 200 MB), far less than
#: what the hostile peers send.
MEMORY_CAP = 768 << 20
INIT = request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def capped_proxy(tmp_path: Path, *options: str, stdout: int = subprocess.PIPE) -> Process:
    """The proxy in front of the hostile server, under ``RLIMIT_AS`` (set in the child
    before it runs the proxy, as a ``preexec_fn`` would); ``stdout``: where it writes."""
    server = [sys.executable, str(PROGRAMS / "mcp_hostile_server.py"), str(tmp_path / "server")]
    proxy = [*PROXY, "--episodes", str(tmp_path / "eps.jsonl"), "--no-egress", *options]
    cap = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP})); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return await anyio.open_process(
        [sys.executable, "-c", cap, *proxy, "--", *server],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=stdout,
        stderr=None,
        cwd=tmp_path,
    )


def seen_by_server(tmp_path: Path) -> bytes:
    path = tmp_path / "server.in"
    return path.read_bytes() if path.exists() else b""


def refused(tmp_path: Path) -> list[Any]:
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    value: list[Any] = ep.end.meta["mcp"]["refused"]
    return value


async def test_a_server_that_writes_without_newlines_is_cut_off(tmp_path: Path) -> None:
    process = await capped_proxy(tmp_path, "--max-message-bytes", str(4 << 20))
    client = RawClient(process)
    await client.send(INIT)
    await client.recv_json()
    await client.send(tool_call(1, "flood"))
    error = await client.recv_json(limit=30)
    assert error["id"] == 1
    assert error["error"]["code"] == -32000
    with anyio.fail_after(20):
        assert await process.wait() == 1  # the server is gone: the proxy hangs up
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert f"over {4 << 20} bytes" in (ep.end.reason or "")
    (step,) = calls(ep)
    assert step.meta["mcp"]["outcome"] == "upstream_failed"


@pytest.mark.parametrize("side", ["client", "server"])
async def test_deep_nesting_from_either_side_never_crashes_the_proxy(
    tmp_path: Path, side: str
) -> None:
    client = RawClient(await capped_proxy(tmp_path))
    await client.send(INIT)
    await client.recv_json()
    if side == "client":
        deep = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}
        data = json.dumps(deep).encode()[:-1] + b',"x":' + b"[" * 100_000 + b"]" * 100_000
        await client.send(data + b"}\n")
        error = await client.recv_json()
        assert (error["id"], error["error"]["code"]) == (1, -32600)  # its id came first
        await client.send(tool_call(2, "echo", {"text": "still here"}))
        assert (await client.recv_json())["result"]["content"][0]["text"] == "still here"
        assert await client.finish() == 0
        assert b"[[[" not in seen_by_server(tmp_path)
    else:
        await client.send(tool_call(1, "deep"))
        error = await client.recv_json()
        assert (error["id"], error["error"]["code"]) == (1, -32000)
        assert await client.finish() in (0, 1)
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert "nested deeper than 128 levels" in (ep.end.reason or "")


async def test_whatever_could_invoke_a_tool_unrecorded_is_refused(tmp_path: Path) -> None:
    client = RawClient(await capped_proxy(tmp_path))
    hostile = [
        line([{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}]),
        line({"jsonrpc": "2.0", "id": None, "method": "tools/call", "params": {"name": "echo"}}),
        tool_call(3, "echo", ["a", "list"]),  # type: ignore[arg-type]
        tool_call(4, "echo", "a string"),  # type: ignore[arg-type]
        request(5, "tools/call", {"name": ["echo"], "arguments": {}}),
        request({"an": "object"}, "tools/call", {"name": "echo", "arguments": {}}),
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo\xff"}}\n',
    ]
    replies = []
    for data in hostile:
        await client.send(data)
        replies.append(await client.recv_json())
    notification = line({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo"}})
    await client.send(notification)  # no id: refused, and no answer
    await client.send(tool_call(8, "echo", {"text": "fine"}))
    assert (await client.recv_json())["id"] == 8
    assert await client.finish() == 0
    assert isinstance(replies[0], list)  # a batch is answered with a batch
    codes = [r[0]["error"]["code"] if isinstance(r, list) else r["error"]["code"] for r in replies]
    assert codes == [-32600, -32600, -32602, -32602, -32602, -32600, -32700]
    assert seen_by_server(tmp_path).count(b"tools/call") == 1  # only the well-formed one
    assert len(refused(tmp_path)) == len(hostile) + 1
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert step.meta["mcp"]["request_id"] == 8


async def test_a_half_line_from_a_crashed_server_never_reaches_the_client(
    tmp_path: Path,
) -> None:
    process = await capped_proxy(tmp_path)
    client = RawClient(process)
    await client.send(tool_call(1, "halfline"))
    error = await client.recv_json()  # a whole line, and an answer the client can read
    assert (error["id"], error["error"]["code"]) == (1, -32000)
    assert await client.recv() == b""
    with anyio.fail_after(20):
        assert await process.wait() == 1
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert ep.end.meta["mcp"]["dropped_from_server"] == {"unterminated": 1}


async def test_invalid_utf8_and_junk_from_the_server_are_recorded_as_such(
    tmp_path: Path,
) -> None:
    client = RawClient(await capped_proxy(tmp_path))
    await client.send(tool_call(1, "badutf8"))
    error = await client.recv_json()
    assert (error["id"], error["error"]["code"]) == (1, -32000)
    assert "invalid UTF-8" in error["error"]["message"]
    await client.send(tool_call(2, "junk"))
    assert (await client.recv_json())["result"]["content"][0]["text"] == "after junk"
    assert await client.finish() == 0
    ep = one_episode(tmp_path / "eps.jsonl")
    bad, junk = calls(ep)
    assert bad.meta["mcp"]["outcome"] == "upstream_failed"
    assert bad.meta["mcp"]["invalid_utf8"] is True
    assert junk.meta["mcp"]["outcome"] == "result"
    assert ep.end is not None
    assert ep.end.meta["mcp"]["dropped_from_server"] == {"not_json": 1}


async def test_an_oversized_client_message_gets_an_error_and_aborts(tmp_path: Path) -> None:
    client = RawClient(await capped_proxy(tmp_path, "--max-message-bytes", "65536"))
    await client.send(tool_call(1, "echo", {"text": "y" * 200_000}))
    error = await client.recv_json()
    assert (error["id"], error["error"]["code"]) == (1, -32600)  # its id came first
    await client.send(tool_call(2, "echo", {"text": "small"}))
    assert (await client.recv_json())["id"] == 2
    assert await client.finish() == 0
    assert b"yyyy" not in seen_by_server(tmp_path)
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert "over 65536 bytes" in (ep.end.reason or "")


async def test_a_client_that_stops_reading_is_recorded_as_such(tmp_path: Path) -> None:
    process = await capped_proxy(tmp_path, "--timeout", "1")
    client = RawClient(process)
    for rid in range(1, 5):  # answers far larger than the pipe holds, never read
        await client.send(tool_call(rid, "big", {"size": 1 << 20}))
    with anyio.fail_after(20):
        # ASYNC110: the condition is a file the server writes; no event to wait on.
        while seen_by_server(tmp_path).count(b'"big"') < 4:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    await anyio.sleep(2)  # past the timeout, with answers unread
    assert await client.finish() == 0
    await process.aclose()  # the answers it never read go with it
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert "the client stopped reading" in (ep.end.reason or "")
    # Every byte it never got is counted, the queued answer's and the later ones' alike
    # (at least one whole answer), and so is every reply: the steps, written first, say
    # what was sent (an answer relayed, or an error for a call that timed out meanwhile).
    assert ep.end.meta["mcp"]["client_stopped_reading"] > 1 << 20
    assert ep.end.meta["mcp"]["undelivered_replies"] == 4
    assert {s.meta["mcp"]["reply"] for s in calls(ep)} <= {"relay", "error"}


async def test_a_client_gone_before_its_answer_comes_is_recorded_as_such(
    tmp_path: Path,
) -> None:
    """The client hangs up (input and output closed) while the server works on a call
    it then answers: the step says the answer was relayed (it was written first), the
    end record says it never arrived, and the run is not a complete one."""
    read_end, write_end = os.pipe()  # the client's output pipe, to close for real
    process = await capped_proxy(tmp_path, stdout=write_end)
    os.close(write_end)
    assert process.stdin is not None
    await process.stdin.send(tool_call(1, "slow", {"seconds": 1}))
    with anyio.fail_after(10):
        # ASYNC110: the condition is a file the server writes; no event to wait on.
        while b'"slow"' not in seen_by_server(tmp_path):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    os.close(read_end)
    await process.stdin.aclose()
    with anyio.fail_after(20):
        assert await process.wait() == 0
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert (ep.end.status, ep.end.reason) == (
        "aborted",
        "the client hung up before the answer to a call reached it",
    )
    assert ep.end.meta["mcp"]["undelivered_replies"] == 1
    (step,) = calls(ep)
    assert (step.meta["mcp"]["outcome"], step.meta["mcp"]["reply"]) == ("result", "relay")


async def test_a_late_answer_to_a_cancelled_call_reaches_the_client(tmp_path: Path) -> None:
    """Cancelling changes nothing else on the wire: the server's answer, sent after the
    cancel, reaches the client as a direct client gets it (and ignores it); the step
    says the call was interrupted and the client shown nothing."""
    client = RawClient(await capped_proxy(tmp_path))
    await client.send(tool_call(1, "slow", {"seconds": 1}))
    cancel = {"requestId": 1, "reason": "the agent moved on"}
    await client.send(
        line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
    )
    late = await client.recv_json()
    assert (late["id"], late["result"]["content"][0]["text"]) == (1, "late")
    await client.send(tool_call(2, "echo", {"text": "after"}))
    assert (await client.recv_json())["id"] == 2
    assert await client.finish() == 0
    assert b"notifications/cancelled" in seen_by_server(tmp_path)
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "complete"
    assert ep.end.meta["mcp"]["late_answers_relayed"] == 1
    slow, echo = calls(ep)
    assert slow.actual is not None
    assert (slow.actual.outcome, slow.meta["mcp"]["reply"]) == ("interrupted", "none")
    assert echo.meta["mcp"]["outcome"] == "result"


async def test_the_message_size_limit_has_a_documented_minimum(tmp_path: Path) -> None:
    small = await anyio.run_process(
        [*PROXY, "--max-message-bytes", "1023", "--", "true"], cwd=tmp_path, check=False
    )
    assert small.returncode == 2
    assert b"--max-message-bytes must be at least 1024" in small.stderr
    shown = await anyio.run_process([*PROXY, "--help"], cwd=tmp_path)
    assert b"at least 1024" in b" ".join(shown.stdout.split())  # however it is wrapped


@pytest.mark.parametrize("where", ["inline", "in a task"])
async def test_an_answer_over_the_readers_line_limit_is_relayed_whole_and_recorded_capped(
    tmp_path: Path, where: str
) -> None:
    """A 17 MiB answer (the readers refuse lines over 16 MiB by default) reaches the
    client byte for byte; the step records it capped (``max_result_bytes``), with the
    size and hash of what was shown, so the episode stays readable. Inline: a plain call
    with no probe awaited; in a task: the filesystem oracle watches a root."""
    size = 17 << 20
    options = ["--no-egress"]
    if where == "in a task":
        (tmp_path / "root").mkdir()
        options += ["--root", str(tmp_path / "root")]
    command = proxy_command(tmp_path, *options)
    process = await anyio.open_process(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    client = RawClient(process)
    await client.send(INIT)
    await client.recv_json()
    await client.send(tool_call(1, "big", {"size": size}))
    reply = await client.recv(limit=60)
    assert await client.finish() == 0
    assert json.loads(reply)["result"]["content"][0]["text"] == "b" * size
    server_wrote = (tmp_path / "server.out").read_bytes().splitlines(keepends=True)
    assert reply in server_wrote  # the server's own bytes, not a re-encoding
    lines = (tmp_path / "eps.jsonl").read_bytes().splitlines()
    assert max(map(len, lines)) < 1 << 20
    ep = one_episode(tmp_path / "eps.jsonl")  # read with the default line limit
    assert ep.complete
    (step,) = calls(ep)
    assert step.fidelity == "real"
    assert step.shown.text() == "b" * (256 << 10)
    assert step.meta["capped"]["size"] > size
    whole = json.dumps([[{"type": "text", "text": "b" * size}], None], separators=(",", ":"))
    assert step.meta["capped"]["sha256"] == hashlib.sha256(whole.encode()).hexdigest()
    mcp = step.meta["mcp"]
    assert mcp["reply"] == "relay"
    assert mcp["upstream"] is None
    assert mcp["upstream_bytes"] == len(reply.rstrip(b"\n"))
    assert mcp["upstream_sha256"] == hashlib.sha256(reply.rstrip(b"\n")).hexdigest()


async def test_arguments_over_the_readers_line_limit_are_forwarded_whole_and_recorded_capped(
    tmp_path: Path,
) -> None:
    """A 17 MiB argument (under ``--max-message-bytes``, over the readers' 16 MiB line
    limit) reaches the server byte for byte; the step keeps the short argument whole and
    the long one cut, with the size and hash of all of them, so the episode stays readable."""
    size = 17 << 20
    process = await anyio.open_process(
        proxy_command(tmp_path, "--no-egress"), env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    client = RawClient(process)
    await client.send(INIT)
    await client.recv_json()
    args = {"path": "/notes/today.txt", "content": "c" * size}
    sent = tool_call(1, "empty", args)
    await client.send(sent)
    assert json.loads(await client.recv(limit=60))["result"] == {"content": []}
    assert await client.finish() == 0
    assert sent in (tmp_path / "server.in").read_bytes().splitlines(keepends=True)
    lines = (tmp_path / "eps.jsonl").read_bytes().splitlines()
    assert max(map(len, lines)) < 1 << 20
    ep = one_episode(tmp_path / "eps.jsonl")  # read with the default line limit
    assert ep.complete
    (step,) = calls(ep)
    assert step.args == {"path": "/notes/today.txt", "content": "c" * (32 << 10)}
    whole = json.dumps(args, separators=(",", ":")).encode()
    assert step.meta["args_capped"] == {
        "size": len(whole),
        "sha256": hashlib.sha256(whole).hexdigest(),
        "cut": ["content"],
    }
    assert step.meta["mcp"]["reply"] == "relay"
