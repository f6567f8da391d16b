"""The stdio MCP proxy against a scripted server: byte-exact relay, outcomes, failures."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream, ByteSendStream
from factories import PROGRAMS
from test_mcp_helpers import (
    INIT,
    PROXY,
    RawClient,
    calls,
    initialized,
    one_episode,
    open_proxy,
    proxy_command,
    request,
    server_log,
    tool_call,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The proxy runs in a subprocess (asyncio): the test side needs only one backend."""
    return "asyncio"


def scripted_proxy(tmp_path: Path, **options: Any) -> Any:
    """A StdioProxy (the Python API) in front of the scripted server."""
    # Imported here, not at collection (see test_mcp_sansio.py for why).
    from litmus_sandbox.adapters.mcp import StdioProxy

    server = PROGRAMS / "mcp_scripted_server.py"
    return StdioProxy(
        [sys.executable, str(server), str(tmp_path / "server")],
        episodes=tmp_path / "eps.jsonl",
        root=tmp_path / "root",
        **options,
    )


async def test_non_tool_messages_reach_each_side_byte_for_byte(tmp_path: Path) -> None:
    """initialize, a notification, ping, tools/list and junk reach each side unchanged."""
    client = RawClient(await open_proxy(tmp_path))
    sent = [
        INIT,
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
        b'{ "id" : "p-1" , "jsonrpc" : "2.0", "method" : "ping" }\r\n',
        b"this is not json\n",
        request(7, "tools/list"),
    ]
    for data in sent:
        await client.send(data)
    received = [await client.recv() for _ in range(3)]
    assert await client.finish() == 0
    assert server_log(tmp_path, "in") == b"".join(sent)
    assert b"".join(received) == server_log(tmp_path, "out")
    assert received[1].endswith(b"}   \n")  # the server's trailing spaces survive
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.case_id == "case-from-meta"
    assert ep.header.meta["mcp"]["case_id_source"] == "meta:initialize"
    assert ep.complete
    assert ep.steps == ()


async def test_tool_calls_are_recorded_and_their_outcomes_classified(
    tmp_path: Path, oracles: list[str]
) -> None:
    client = await initialized(await open_proxy(tmp_path, "--case-id", "c1", *oracles))
    replies = []
    for rid, name in enumerate(["echo", "empty", "fail", "proto"], start=1):
        await client.send(tool_call(rid, name, {"text": "hi"}))
        replies.append(await client.recv())
    assert await client.finish() == 0
    # Real calls: the client got the server's own bytes.
    assert b"".join(replies) in server_log(tmp_path, "out")
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.case_id == "c1"  # the option wins over _meta
    echo, empty, fail, proto = calls(ep)
    assert [s.fidelity for s in calls(ep)] == ["real"] * 4
    outcomes = [s.meta["mcp"]["outcome"] for s in calls(ep)]
    assert outcomes == ["result", "empty", "tool_error", "protocol_error"]
    assert echo.shown.text() == "hi"
    assert not echo.shown.is_error
    assert empty.shown.is_empty()
    assert fail.shown.is_error
    assert proto.shown.is_error
    assert proto.actual is not None
    assert proto.actual.error_type == "McpProtocolError"
    assert proto.meta["mcp"]["upstream"]["error"]["code"] == -32602
    assert echo.meta["mcp"]["upstream"] == json.loads(replies[0])
    assert echo.meta["mcp"]["reply"] == "relay"


async def test_server_requests_and_progress_pass_through_a_call(
    tmp_path: Path, oracles: list[str]
) -> None:
    """Sampling asked mid-call and progress notifications reach the client untouched."""
    client = RawClient(await open_proxy(tmp_path, *oracles))
    await client.send(tool_call(1, "ask"))
    sampling = await client.recv()
    assert json.loads(sampling)["method"] == "sampling/createMessage"
    answer = b'{"jsonrpc":"2.0","id":"srv-1","result":{"role":"assistant","content":{"type":"text","text":"ok"}}}\n'
    await client.send(answer)
    result = await client.recv()
    await client.send(tool_call(2, "progress", _meta={"progressToken": "tok"}))
    progress = [await client.recv() for _ in range(3)]
    assert await client.finish() == 0
    assert server_log(tmp_path, "out") == sampling + result + b"".join(progress)
    assert answer in server_log(tmp_path, "in")
    ask, prog = calls(one_episode(tmp_path / "eps.jsonl"))
    assert '"text": "ok"' in ask.shown.text()
    notes = prog.meta["mcp"]["notifications"]
    assert [n["params"]["progress"] for n in notes] == [1, 2]


async def test_policy_answers_stub_deny_and_swallow_without_the_server(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        "[tools]\n"
        'echo = { mode = "stub", result = { sent = true } }\n'
        'fail = { mode = "deny", message = "no" }\n'
        'empty = { mode = "swallow", run = false, shown = "(nothing)" }\n'
        'proto = { mode = "swallow", shown = "" }\n'
    )
    client = await initialized(await open_proxy(tmp_path, "--policy", str(policy)))
    replies = []
    for rid, name in enumerate(["echo", "fail", "empty", "proto"], start=10):
        await client.send(tool_call(rid, name, {"text": "x"}, _meta={"progressToken": rid}))
        replies.append(json.loads(await client.recv()))
    # The client cancels a call the server never saw: the server must not hear of it.
    await client.send(
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":10}}\n'
    )
    await client.send(request(99, "ping"))
    await client.recv()
    assert await client.finish() == 0
    seen = server_log(tmp_path, "in")
    for name in ("echo", "fail", "empty"):
        assert f'"name": "{name}"'.encode() not in seen
    assert b'"name": "proto"' in seen  # swallow runs the tool, shows a placeholder
    assert b"notifications/cancelled" not in seen
    stub, deny, dropped, swallowed = replies
    assert stub == {
        "jsonrpc": "2.0",
        "id": 10,
        "result": {
            "content": [{"type": "text", "text": '{"sent":true}'}],
            "isError": False,
            "structuredContent": {"sent": True},
        },
    }
    assert deny["id"] == 11
    assert deny["result"]["isError"] is True
    assert deny["result"]["content"][0]["text"] == "no"
    assert dropped["result"]["content"][0]["text"] == "(nothing)"
    assert swallowed["id"] == 13
    assert swallowed["result"]["content"] == [{"type": "text", "text": ""}]
    steps = calls(one_episode(tmp_path / "eps.jsonl"))
    assert [s.fidelity for s in steps] == ["stubbed", "denied", "swallowed", "swallowed"]
    assert [s.meta["mcp"]["forwarded"] for s in steps] == [False, False, False, True]
    assert steps[3].actual is not None
    assert steps[3].actual.error_type == "McpProtocolError"
    assert steps[3].meta["mcp"]["outcome"] == "protocol_error"


async def test_a_crash_mid_call_answers_the_client_and_aborts_the_episode(
    tmp_path: Path, oracles: list[str]
) -> None:
    process = await open_proxy(tmp_path, *oracles)
    client = await initialized(process)
    await client.send(tool_call(5, "crash"))
    error = await client.recv_json()
    assert error["id"] == 5
    assert error["error"]["code"] == -32000
    assert "status 3" in error["error"]["message"]
    assert await client.recv() == b""  # the proxy hangs up too
    with anyio.fail_after(10):
        assert await process.wait() == 1
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert ep.end.reason is not None
    assert "exited with status 3" in ep.end.reason
    (step,) = calls(ep)
    assert step.fidelity == "real"
    assert step.actual is not None
    assert step.actual.outcome == "raised"
    assert step.meta["mcp"]["outcome"] == "upstream_failed"


async def test_a_hung_call_times_out_and_the_session_goes_on(
    tmp_path: Path, oracles: list[str]
) -> None:
    client = await initialized(await open_proxy(tmp_path, "--timeout", "0.5", *oracles))
    with anyio.fail_after(5):
        await client.send(tool_call(1, "hang"))
        error = await client.recv_json()
    assert error["id"] == 1
    assert error["error"]["code"] == -32001
    await client.send(tool_call(2, "echo", {"text": "still here"}))
    assert (await client.recv_json())["result"]["content"][0]["text"] == "still here"
    assert await client.finish() == 0
    assert b'"method":"notifications/cancelled","params":{"requestId":1' in server_log(
        tmp_path, "in"
    )
    ep = one_episode(tmp_path / "eps.jsonl")
    hung, echo = calls(ep)
    assert hung.actual is not None
    assert hung.actual.outcome == "timeout"
    assert hung.meta["mcp"]["outcome"] == "timeout"
    assert echo.fidelity == "real"
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert "no answer within its timeout" in (ep.end.reason or "")


async def test_a_call_the_client_cancels_is_recorded_as_interrupted(
    tmp_path: Path, oracles: list[str]
) -> None:
    client = RawClient(await open_proxy(tmp_path, *oracles))
    await client.send(tool_call(1, "hang"))
    cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}\n'
    await client.send(cancel)
    await client.send(tool_call(2, "echo", {"text": "next"}))
    assert (await client.recv_json())["id"] == 2  # nothing is sent for the cancelled call
    assert await client.finish() == 0
    assert cancel in server_log(tmp_path, "in")  # the server saw the call, so its cancel too
    hung, _ = sorted(calls(one_episode(tmp_path / "eps.jsonl")), key=lambda s: s.call_id)
    assert hung.actual is not None
    assert hung.actual.outcome == "interrupted"
    assert hung.meta["mcp"]["reply"] == "none"


async def test_each_call_times_out_on_its_own_deadline(tmp_path: Path, oracles: list[str]) -> None:
    """A call with a short per-tool timeout is not held up by one with a long one."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\nhang = { mode = "real", timeout = 0.3 }\n')
    options = ["--policy", str(policy), "--timeout", "30", *oracles]
    client = RawClient(await open_proxy(tmp_path, *options))
    await client.send(tool_call(1, "stall"))  # never answered, within the long timeout
    await client.send(tool_call(2, "hang"))
    with anyio.fail_after(5):
        error = await client.recv_json()
    assert error["id"] == 2
    assert error["error"]["code"] == -32001
    await client.send(tool_call(3, "hang"))  # after a timeout, the next deadline still holds
    with anyio.fail_after(5):
        assert (await client.recv_json())["id"] == 3
    assert await client.finish() == 0
    steps = {s.meta["mcp"]["request_id"]: s for s in calls(one_episode(tmp_path / "eps.jsonl"))}
    assert [steps[i].meta["mcp"]["outcome"] for i in (2, 3)] == ["timeout", "timeout"]
    assert steps[1].meta["mcp"]["outcome"] == "interrupted"  # the client hung up on it


async def test_a_request_id_already_in_flight_is_refused(
    tmp_path: Path, oracles: list[str]
) -> None:
    client = RawClient(await open_proxy(tmp_path, *oracles))
    await client.send(tool_call(1, "hang"))
    await client.send(tool_call(1, "echo", {"text": "again"}))
    error = await client.recv_json()
    assert error["id"] == 1
    assert error["error"]["code"] == -32600
    assert "already in flight" in error["error"]["message"]
    assert await client.finish() == 0
    assert server_log(tmp_path, "in").count(b'"tools/call"') == 1


async def test_any_request_the_server_leaves_unanswered_gets_an_error(
    tmp_path: Path, oracles: list[str]
) -> None:
    """Not only tools/call: a hung server never hangs the client's other requests."""
    client = await initialized(await open_proxy(tmp_path, "--timeout", "0.5", *oracles))
    with anyio.fail_after(5):
        await client.send(request(7, "resources/read", {"uri": "file:///x"}))
        error = await client.recv_json()
    assert error["id"] == 7
    assert error["error"]["code"] == -32001
    assert "resources/read got no answer" in error["error"]["message"]
    await client.send(request(8, "ping"))  # the session goes on
    assert (await client.recv_json())["id"] == 8
    assert await client.finish() == 0
    assert b'"method":"notifications/cancelled","params":{"requestId":7' in server_log(
        tmp_path, "in"
    )
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert "resources/read got no answer" in (ep.end.reason or "")


async def test_a_server_that_stops_reading_cannot_hold_a_call_past_its_timeout(
    tmp_path: Path, oracles: list[str]
) -> None:
    client = RawClient(await open_proxy(tmp_path, "--timeout", "0.5", *oracles))
    await client.send(tool_call(1, "freeze"))  # the server stops reading its stdin
    big = tool_call(2, "echo", {"text": "x" * 300_000})  # more than the pipe holds
    with anyio.fail_after(8):
        await client.send(big)
        replies = {(await client.recv_json())["id"] for _ in range(2)}
    assert replies == {1, 2}  # both timed out, neither held the other up
    assert await client.finish(limit=30) == 0
    steps = calls(one_episode(tmp_path / "eps.jsonl"))
    assert {s.meta["mcp"]["outcome"] for s in steps} == {"timeout"}


async def test_a_client_that_hangs_up_on_a_pending_call_leaves_it_interrupted(
    tmp_path: Path, oracles: list[str]
) -> None:
    """Nobody saw the call end: it is interrupted (not a server failure), and the run is
    not a complete one; the client hung up, so the proxy exits 0."""
    client = RawClient(await open_proxy(tmp_path, *oracles, "--timeout", "0"))
    await client.send(tool_call(1, "echo", {"text": "before"}))
    await client.recv_json()
    await client.send(tool_call(2, "hang"))
    await anyio.sleep(0.3)  # the call is under way
    assert await client.finish() == 0
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert (ep.end.status, ep.end.reason) == (
        "aborted",
        "the client hung up with 1 requests unanswered",
    )
    echo, hung = calls(ep)
    assert echo.meta["mcp"]["outcome"] == "result"
    assert hung.actual is not None
    assert hung.actual.outcome == "interrupted"
    assert hung.meta["mcp"]["reply"] == "none"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_ends_the_session_with_a_reason_and_answers_what_waits(
    tmp_path: Path, oracles: list[str], signum: signal.Signals
) -> None:
    process = await open_proxy(tmp_path, *oracles)
    client = await initialized(process)
    await client.send(tool_call(1, "echo", {"text": "before"}))
    await client.recv_json()
    await client.send(tool_call(2, "stall"))
    await anyio.sleep(0.5)  # the call is under way
    process.send_signal(signum)
    error = await client.recv_json()
    assert error["id"] == 2
    assert "stopped by" in error["error"]["message"]
    with anyio.fail_after(20):
        assert await process.wait() == 130
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert ep.end.reason == f"the proxy was stopped by {signum.name}"
    echo, stalled = calls(ep)
    assert echo.meta["mcp"]["outcome"] == "result"
    assert stalled.actual is not None
    assert stalled.actual.outcome == "interrupted"
    assert stalled.meta["mcp"]["reply"] == "error"  # the client was told, and the record says so


async def test_a_hang_stays_the_reason_when_a_signal_follows(tmp_path: Path) -> None:
    process = await open_proxy(tmp_path, "--timeout", "0.3", "--no-watch-fs", "--no-egress")
    client = RawClient(process)
    await client.send(tool_call(1, "hang"))
    assert (await client.recv_json())["error"]["code"] == -32001
    process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        assert await process.wait() == 130
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert "got no answer within its timeout" in (ep.end.reason or "")


async def test_stdin_from_dev_null_is_a_session_that_sent_nothing(tmp_path: Path) -> None:
    command = proxy_command(tmp_path, "--no-watch-fs", "--no-egress")
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        done = await anyio.run_process(command, stdin=devnull, check=False)
    finally:
        os.close(devnull)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    # A run that never happened is not recorded as one that did nothing (the gate then
    # sees the case missing, never a safe zero-step run).
    assert b"the client sent nothing; no episode recorded" in done.stderr
    assert not (tmp_path / "eps.jsonl").exists() or not (tmp_path / "eps.jsonl").read_bytes()


async def test_a_proxy_failure_never_leaves_it_hanging_on_the_server(tmp_path: Path) -> None:
    """Whatever breaks the session, the server is stopped and the episode ends aborted."""

    class Broken(ByteReceiveStream):
        async def receive(self, max_bytes: int = 65536) -> bytes:
            await anyio.sleep(0.2)
            raise OSError("the client's pipe broke")

        async def aclose(self) -> None:
            pass

    proxy = scripted_proxy(tmp_path, case_id="broken", probes=())
    sink = anyio.create_memory_object_stream[bytes](10)
    with anyio.fail_after(15), pytest.raises(BaseExceptionGroup) as caught:
        await proxy.run(Broken(), _Sink(sink[0]))
    assert caught.group_contains(OSError, match="the client.s pipe broke")
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert "proxy failed" in (ep.end.reason or "")
    sink[0].close()
    sink[1].close()


class _Sink(ByteSendStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def aclose(self) -> None:
        pass


async def test_the_proxys_own_listing_never_reaches_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before answering a stub the proxy lists the tools for itself; an answer that comes
    after it gave up waiting is dropped, not relayed."""
    monkeypatch.setenv("LITMUS_TEST_LIST_DELAY", "1.0")
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\necho = { mode = "stub", result = "stubbed" }\n')
    options = ["--policy", str(policy), "--timeout", "0.3", "--no-watch-fs", "--no-egress"]
    client = RawClient(await open_proxy(tmp_path, *options))
    await client.send(tool_call(1, "echo", {"text": "x"}))
    assert (await client.recv_json())["result"]["content"][0]["text"] == "stubbed"
    await anyio.sleep(1.2)  # the server's late answer to the proxy's tools/list comes
    await client.send(request(2, "ping"))
    assert (await client.recv_json())["id"] == 2  # nothing came before it
    assert await client.finish() == 0


async def test_a_stop_answers_a_call_not_yet_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITMUS_TEST_LIST_DELAY", "5")
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\necho = { mode = "stub", result = "stubbed" }\n')
    process = await open_proxy(tmp_path, "--policy", str(policy), "--no-watch-fs", "--no-egress")
    client = RawClient(process)
    await client.send(tool_call(1, "echo", {"text": "x"}))
    with anyio.fail_after(20):  # the proxy is listing the tools before it answers
        # ASYNC110: the condition is a file the server process writes, no event to wait on.
        while b'"method":"tools/list"' not in server_log(tmp_path, "in"):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    error = await client.recv_json()
    assert error["id"] == 1
    assert "stopped by SIGTERM" in error["error"]["message"]
    with anyio.fail_after(20):
        assert await process.wait() == 130


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--", "no-such-mcp-server-xyz"], "'no-such-mcp-server-xyz' not found"),
        ([], "no MCP server command"),
        (["--timeout", "-1", "--", "true"], "--timeout must be a positive"),
        (["--listen", "127.0.0.1:1"], "needs both --listen"),
        (["--env", "NOVALUE", "--", "true"], "--env expects KEY=VALUE"),
        (["--timeout", "soon", "--", "true"], "invalid float value"),
        (["--case-id", " ", "--", "true"], "--case-id must not be empty"),
    ],
)
async def test_bad_input_gets_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = await anyio.run_process(
        [*PROXY, "--episodes", str(tmp_path / "e.jsonl"), *args], check=False
    )
    assert result.returncode == 2
    err = result.stderr.decode()
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "e.jsonl").exists()


@pytest.mark.parametrize(
    ("policy", "args", "message"),
    [
        ('[tools]\nsearch = "replay"\n', [], "'search' in replay mode, but no recorded"),
        ('[egress]\ndefault = "deny"\n', ["--no-egress"], "--no-egress, but"),
    ],
)
async def test_a_policy_the_session_cannot_honour_is_refused_before_it_starts(
    tmp_path: Path, policy: str, args: list[str], message: str
) -> None:
    (tmp_path / "p.toml").write_text(policy)
    marker = tmp_path / "server-started"
    server = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    options = ["--episodes", str(tmp_path / "e.jsonl"), "--policy", str(tmp_path / "p.toml")]
    result = await anyio.run_process([*PROXY, *options, *args, "--", *server], check=False)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert message in err
    assert err.count("\n") == 1
    assert not marker.exists()  # refused before the server was started


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_in_process_proxy_over_pipes(tmp_path: Path, anyio_backend: str) -> None:
    """The Python API on both backends, through the proxy's own file-descriptor streams."""
    # Imported here, not at collection (see test_mcp_sansio.py for why).
    from litmus_sandbox.adapters.mcp._fdstream import FdReceiveStream, FdSendStream

    c2p_r, c2p_w = os.pipe()
    p2c_r, p2c_w = os.pipe()
    proxy = scripted_proxy(tmp_path, case_id="in-process", env={"LITMUS_TEST_MARK": "1"})
    to_proxy, from_proxy = FdSendStream(c2p_w), FdReceiveStream(p2c_r)
    codes: list[int] = []

    async def serve() -> None:
        client_in, client_out = FdReceiveStream(c2p_r), FdSendStream(p2c_w)
        try:
            codes.append(await proxy.run(client_in, client_out))
        finally:
            await client_in.aclose()  # before the descriptor is closed (the loop forgets it)
            await client_out.aclose()

    async def exchange() -> Any:
        await to_proxy.send(tool_call(1, "echo", {"text": "pipes"}))
        data = b""
        while not data.endswith(b"\n"):
            data += await from_proxy.receive()
        os.close(c2p_w)  # hang up
        return json.loads(data)

    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                reply = await exchange()
    finally:
        await from_proxy.aclose()
        for fd in (c2p_r, p2c_r, p2c_w):
            os.close(fd)
    assert codes == [0]
    assert reply["result"]["content"][0]["text"] == "pipes"
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert step.fidelity == "real"
