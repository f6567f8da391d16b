"""The streamable-HTTP proxy when its upstream hangs or drops the connection mid-call,
including in the middle of an event stream it has started relaying."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_failing_upstream import RELEASE, call, failing_upstream, proxied
from test_mcp_helpers import calls, one_episode

from litmus_sandbox import Policy, read_episodes

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def upstream() -> Iterator[str]:
    with failing_upstream() as url:
        yield url


async def test_hang_and_crash_get_json_rpc_errors_and_are_recorded(
    tmp_path: Path, upstream: str
) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    async with proxied(tmp_path, upstream, 0.5) as (_, client):
        ok = (await client.post("/mcp", json=call(1, "echo"), headers=headers)).json()
        with anyio.fail_after(5):  # the proxy never hangs the client
            hung = (await client.post("/mcp", json=call(2, "hang"), headers=headers)).json()
            crashed = (await client.post("/mcp", json=call(3, "crash"), headers=headers)).json()
    assert ok["result"]["content"][0]["text"] == "ok"
    assert (hung["id"], hung["error"]["code"]) == (2, -32001)
    assert crashed["id"] == 3
    assert crashed["error"]["code"] == -32000, crashed
    episode = one_episode(tmp_path / "eps.jsonl")
    outcomes = {s.call_id: s.meta["mcp"]["outcome"] for s in calls(episode)}
    assert sorted(outcomes.values()) == ["result", "timeout", "upstream_failed"]
    # A hung or dead server spoils the run: the gate must ask for a re-run, not compare it.
    assert episode.end is not None
    assert episode.end.status == "aborted"
    assert not episode.complete


def events(body: bytes) -> list[dict[str, Any]]:
    """The JSON data of each event in a server-sent event stream."""
    out = []
    for block in body.decode().split("\n\n"):
        data = [ln[5:].strip() for ln in block.splitlines() if ln.startswith("data:")]
        if data:
            out.append(json.loads("\n".join(data)))
    return out


@pytest.mark.parametrize("name", ["stream_crash", "stream_end"])
async def test_an_upstream_that_dies_mid_event_stream(
    tmp_path: Path, upstream: str, name: str
) -> None:
    """The client gets the events relayed so far, then a JSON-RPC error on the same
    stream; the step keeps the notification and says the server failed; the episode is
    aborted (the run must be repeated)."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=5)
    headers = {"Accept": "application/json, text/event-stream"}
    request = call(7, name)
    request["params"]["_meta"]["progressToken"] = "t"
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            with anyio.fail_after(5):
                response = await client.post("/mcp", json=request, headers=headers)
        proxy.stop()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    got = events(response.content)
    assert [m.get("method") for m in got] == ["notifications/progress", None]
    assert got[0]["params"]["progress"] == 1
    error = got[1]
    assert error["id"] == 7
    assert error["error"]["code"] == -32000
    episode = one_episode(tmp_path / "eps.jsonl")
    (step,) = calls(episode)
    mcp = step.meta["mcp"]
    assert mcp["outcome"] == "upstream_failed"
    assert mcp["reply"] == "error"
    assert [n["method"] for n in mcp["notifications"]] == ["notifications/progress"]
    why = "failed mid-call" if name == "stream_crash" else "closed the event stream without"
    assert why in mcp["failure"]
    assert step.shown.is_error
    assert episode.end is not None
    assert episode.end.status == "aborted"


async def test_headers_are_forwarded_as_the_client_sent_them(tmp_path: Path) -> None:
    """Nothing is added to what the client sent (no Accept-Encoding, no User-Agent of the
    proxy's own), for relayed messages and recorded calls alike."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    seen: list[list[tuple[str, str]]] = []

    class Echo(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            seen.append([(k.lower(), v) for k, v in self.headers.items()])
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reply = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": {"content": []}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply.encode())

        def log_message(self, *args: Any) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    proxy = HttpProxy(upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path)
    try:
        async with anyio.create_task_group() as tg:
            port = await tg.start(proxy.serve, "127.0.0.1", 0)
            for body in (
                {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                call(2, "echo"),
            ):
                data = json.dumps(body).encode()
                head = (
                    f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Accept: application/json, text/event-stream\r\n"
                    "Mcp-Session-Id: s-1\r\nX-Trace: t-9\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                    "Connection: close\r\n\r\n"
                ).encode()
                async with await anyio.connect_tcp("127.0.0.1", port) as s:
                    await s.send(head + data)
                    with anyio.fail_after(5):
                        got = await s.receive()
                    assert got.startswith(b"HTTP/1.1 200"), got
            proxy.stop()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(seen) == 2
    for headers in seen:
        names = [name for name, _ in headers]
        assert "accept-encoding" not in names
        assert "user-agent" not in names
        assert ("x-trace", "t-9") in headers
        assert ("mcp-session-id", "s-1") in headers
        assert ("accept", "application/json, text/event-stream") in headers


async def test_output_schemas_are_learnt_from_compressed_tools_list_answers(
    tmp_path: Path,
) -> None:
    """A server that gzips its answers: the client gets them as sent, and a stubbed tool's
    answer still carries structure that fits the schema the (compressed) list declared."""
    import gzip

    from litmus_sandbox.adapters.mcp import HttpProxy

    schema = {
        "type": "object",
        "properties": {"content": {"type": "string"}},
        "required": ["content"],
    }

    class Gzipped(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            tools = [{"name": "w", "inputSchema": {"type": "object"}, "outputSchema": schema}]
            reply = {"jsonrpc": "2.0", "id": body["id"], "result": {"tools": tools}}
            data = gzip.compress(json.dumps(reply).encode())
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Gzipped)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    policy = tmp_path / "p.toml"
    policy.write_text('[tools]\nw = { mode = "stub", result = "stubbed!" }\n')
    proxy = HttpProxy(
        f"http://127.0.0.1:{httpd.server_address[1]}/mcp",
        episodes=tmp_path / "eps.jsonl",
        root=tmp_path,
        policy=Policy.from_file(policy),
    )
    headers = {"Accept": "application/json, text/event-stream", "Accept-Encoding": "gzip"}
    try:
        async with anyio.create_task_group() as tg:
            port = await tg.start(proxy.serve, "127.0.0.1", 0)
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as client:
                listed = await client.post(
                    "/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers=headers,
                )
                stub = await client.post("/mcp", json=call(2, "w"), headers=headers)
            proxy.stop()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert listed.headers["content-encoding"] == "gzip"  # relayed as the server sent it
    assert listed.json()["result"]["tools"][0]["outputSchema"] == schema
    assert stub.json()["result"]["structuredContent"] == {"content": "stubbed!"}


async def test_a_session_deleted_mid_call_interrupts_the_call_and_serving_goes_on(
    tmp_path: Path, upstream: str
) -> None:
    """The client ends its session while a call runs: the call is recorded interrupted
    before the episode ends, and the proxy goes on serving other requests."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=30)
    headers = {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": "S1"}
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

            async def hung_call() -> None:
                with pytest.raises(httpx.HTTPError):  # interrupted: no answer comes
                    await client.post("/mcp", json=call(1, "hang"), headers=headers)

            tg.start_soon(hung_call)
            await anyio.sleep(0.5)
            with anyio.fail_after(10):
                deleted = await client.delete("/mcp", headers=headers)
            assert deleted.status_code == 200
            with anyio.fail_after(5):
                other = {"Accept": "application/json, text/event-stream"}
                ok = (await client.post("/mcp", json=call(2, "echo"), headers=other)).json()
            assert ok["result"]["content"][0]["text"] == "ok"
        proxy.stop()
    episodes = {
        ep.header.meta["mcp"].get("session_id"): ep
        for ep in read_episodes([tmp_path / "eps.jsonl"])
    }
    session = episodes["S1"]
    assert session.end is not None
    (step,) = calls(session)
    assert step.actual is not None
    assert step.actual.outcome == "interrupted"


def request(rid: int, method: str) -> dict[str, Any]:
    params = {"uri": "file:///x", "_meta": {"litmus/case_id": "c"}}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


async def test_any_request_the_server_leaves_unanswered_times_out(
    tmp_path: Path, upstream: str
) -> None:
    """Not only tools/call: the proxy never hangs the client, over HTTP as over stdio."""
    headers = {"Accept": "application/json, text/event-stream"}
    async with proxied(tmp_path, upstream, 0.5) as (_, client):
        ok = (await client.post("/mcp", json=call(1, "echo"), headers=headers)).json()
        with anyio.fail_after(5):
            hung = (await client.post("/mcp", json=request(2, "resources/read"))).json()
    assert ok["result"]["content"][0]["text"] == "ok"
    assert (hung["id"], hung["error"]["code"]) == (2, -32001)
    assert "resources/read got no answer within 0.5s" in hung["error"]["message"]
    episode = one_episode(tmp_path / "eps.jsonl")
    assert episode.end is not None
    assert episode.end.status == "aborted"
    assert episode.end.reason == "resources/read got no answer within 0.5s (server hung?)"


async def test_a_stop_with_a_reason_answers_what_waits_and_aborts_the_episode(
    tmp_path: Path, upstream: str
) -> None:
    """A signal: the call in flight is recorded interrupted (it reached the server) and
    answered -32000, as is a relayed request still waiting; the episode ends aborted."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=30)
    headers = {"Accept": "application/json, text/event-stream"}
    replies: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

            async def post(name: str, body: dict[str, Any]) -> None:
                replies[name] = (await client.post("/mcp", json=body, headers=headers)).json()

            async with anyio.create_task_group() as clients:
                clients.start_soon(post, "call", call(1, "hang"))
                clients.start_soon(post, "read", request(2, "resources/read"))
                await anyio.sleep(0.5)  # both under way
                with anyio.fail_after(10):
                    proxy.stop("the proxy was stopped by SIGTERM")
                    await proxy.stopped.wait()
    for name, rid in (("call", 1), ("read", 2)):
        assert replies[name]["id"] == rid
        assert replies[name]["error"]["code"] == -32000
        assert "stopped by SIGTERM" in replies[name]["error"]["message"]
    episode = one_episode(tmp_path / "eps.jsonl")
    assert episode.end is not None
    assert (episode.end.status, episode.end.reason) == (
        "aborted",
        "the proxy was stopped by SIGTERM",
    )
    (step,) = calls(episode)
    assert step.actual is not None
    assert step.actual.outcome == "interrupted"
    assert (step.meta["mcp"]["forwarded"], step.meta["mcp"]["reply"]) == (True, "error")


async def test_sigterm_to_the_http_proxy_exits_130_with_the_episode_aborted(
    tmp_path: Path, upstream: str
) -> None:
    import re
    import signal
    import sys

    from anyio.streams.text import TextReceiveStream

    cmd = [sys.executable, "-m", "litmus_sandbox._cli.main", "proxy", "mcp", "--listen"]
    cmd += ["127.0.0.1:0", "--upstream", upstream, "--episodes", str(tmp_path / "eps.jsonl")]
    process = await anyio.open_process(cmd, cwd=tmp_path)
    assert process.stderr is not None
    said = ""
    with anyio.fail_after(20):
        async for text in TextReceiveStream(process.stderr):
            said += text
            if found := re.search(r"MCP proxy on (http://127\.0\.0\.1:\d+)", said):
                break
    assert found is not None, said
    reply: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=found.group(1), timeout=20) as client:

        async def post() -> None:
            reply.update((await client.post("/mcp", json=call(1, "hang"))).json())

        async with anyio.create_task_group() as tg:
            tg.start_soon(post)
            await anyio.sleep(0.5)
            process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        assert await process.wait() == 130
    assert (reply["id"], reply["error"]["code"]) == (1, -32000)
    episode = one_episode(tmp_path / "eps.jsonl")
    assert episode.end is not None
    assert episode.end.reason == "the proxy was stopped by SIGTERM"


async def test_the_deadline_counts_waiting_for_the_server_never_writing_to_the_client(
    tmp_path: Path, upstream: str
) -> None:
    """Answers that came in time are never cut or followed by an error: a large JSON
    answer read slowly by the client, an answer on a stream the server keeps open (plain
    or gzip). Half an event, then nothing: only whole events are relayed, so the client
    gets the proxy's ``-32001`` and nothing of the half event."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=0.5)
    accept = {"Accept": "application/json, text/event-stream"}
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            body = bytearray()
            req = request(1, "resources/list")
            async with client.stream("POST", "/mcp", json=req, headers=accept) as response:
                async for chunk in response.aiter_raw(65536):
                    body += chunk
                    await anyio.sleep(0.03)  # a slow reader: well past the deadline
            assert json.loads(body)["result"]["blob"] == "b" * 2_000_000
            for rid, method in ((2, "prompts/list"), (3, "prompts/get")):
                seen = b""
                async with client.stream(
                    "POST", "/mcp", json=request(rid, method), headers=accept
                ) as response:
                    with anyio.move_on_after(1.5):  # three deadlines long
                        async for chunk in response.aiter_bytes():  # gzip decoded
                            seen += chunk
                (answer,) = events(seen)  # the answer, and nothing glued after it
                assert (answer["id"], answer["result"]) == (rid, {"prompts": []})

            req = request(4, "completion/complete")
            with anyio.fail_after(5):
                half = await client.post("/mcp", json=req, headers=accept)
            (error,) = events(half.content)  # the proxy's error, nothing of the half event
            assert (error["id"], error["error"]["code"]) == (4, -32001)
        RELEASE.set()
        proxy.stop()


async def test_a_stop_does_not_wait_for_a_stream_kept_open_after_its_answer(
    tmp_path: Path, upstream: str
) -> None:
    accept = {"Accept": "application/json, text/event-stream"}
    async with (
        proxied(tmp_path, upstream, 30) as (proxy, client),
        client.stream("POST", "/mcp", json=call(1, "stream_hold"), headers=accept) as response,
    ):
        seen = b""
        async for chunk in response.aiter_bytes():
            seen += chunk
            if b"\n\n" in seen:
                break  # the answer came; the server keeps the stream open
        (answer,) = events(seen)
        assert answer["id"] == 1
        with anyio.fail_after(3):  # not the 5 s a stop gives what is unanswered
            proxy.stop("the proxy was stopped by SIGTERM")
            await proxy.stopped.wait()
    episode = one_episode(tmp_path / "eps.jsonl")
    (step,) = calls(episode)
    assert step.meta["mcp"]["reply"] == "relay"  # answered before the stop: not interrupted
    assert step.actual is None


async def test_a_call_whose_id_is_already_in_flight_is_refused(
    tmp_path: Path, upstream: str
) -> None:
    """The session's relay core holds one request per id: a second call with the id of
    one still running gets an error and never reaches the server."""
    headers = {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": "dup"}
    async with proxied(tmp_path, upstream, 2) as (proxy, client):
        async with anyio.create_task_group() as tg:
            first: list[Any] = []

            async def hang() -> None:
                first.append(
                    (await client.post("/mcp", json=call(5, "hang"), headers=headers)).json()
                )

            tg.start_soon(hang)
            with anyio.fail_after(5):
                # ASYNC110: the condition is the proxy's call table; no event for it.
                while not any(k[0] == "session:dup" for k in proxy.calls):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            again = await client.post("/mcp", json=call(5, "echo"), headers=headers)
        RELEASE.set()
    assert again.status_code == 400
    assert again.json()["error"]["code"] == -32600
    assert "already in flight" in again.json()["error"]["message"]
    assert first[0]["error"]["code"] == -32001  # the first still got its own answer
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert step.tool == "hang"
