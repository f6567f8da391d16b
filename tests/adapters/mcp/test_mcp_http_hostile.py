"""The streamable-HTTP proxy refuses what could invoke a tool unrecorded."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from test_mcp_helpers import calls, episodes, one_episode

pytestmark = pytest.mark.anyio
SEEN: list[bytes] = []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Lenient(BaseHTTPRequestHandler):
    """Keeps every body it gets and answers anything with a result (10 MB of text for a
    call to ``big``, as JSON; to ``big_event``, as an event)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        SEEN.append(body)
        try:
            rid = json.loads(body).get("id")
        except (ValueError, AttributeError):
            rid = None
        content = []
        if b'"big' in body:  # an answer far larger than the sockets' buffers
            content = [{"type": "text", "text": "b" * 10_000_000}]
        reply = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": content}}).encode()
        ctype = "application/json"
        if b'"big_event"' in body:  # the same answer as an event
            reply, ctype = b"event: message\ndata: " + reply + b"\n\n", "text/event-stream"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def lenient() -> Iterator[str]:
    SEEN.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Lenient)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    finally:
        httpd.shutdown()
        httpd.server_close()


def tools_call(rid: Any, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


async def test_what_could_invoke_a_tool_unrecorded_never_reaches_the_server(
    tmp_path: Path, lenient: str
) -> None:
    from litmus_sandbox.adapters.mcp import HttpProxy

    hostile: list[bytes] = [
        json.dumps([tools_call(1, {"name": "echo"})]).encode(),
        json.dumps(tools_call(None, {"name": "echo"})).encode(),
        json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "x"}}).encode(),
        json.dumps(tools_call(4, {"name": "echo", "arguments": ["a"]})).encode(),
        json.dumps(tools_call(5, {"name": ["echo"]})).encode(),
        b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"a":'
        + b"[" * 50_000
        + b"]" * 50_000
        + b"}}",
    ]
    proxy = HttpProxy(lenient, episodes=tmp_path / "eps.jsonl", root=tmp_path)
    headers = {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": "H"}
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            replies = [await client.post("/mcp", content=data, headers=headers) for data in hostile]
            good = json.dumps(tools_call(7, {"name": "echo"})).encode()
            ok = await client.post("/mcp", content=good, headers=headers)
        proxy.stop()
    assert [r.status_code for r in replies] == [400] * len(hostile)
    assert isinstance(replies[0].json(), list)  # a batch is answered with a batch
    assert [r.json()["error"]["code"] for r in replies[1:]] == [
        -32600,
        -32600,
        -32602,
        -32602,
        -32600,
    ]
    assert ok.status_code == 200
    assert [json.dumps(tools_call(7, {"name": "echo"})).encode()] == SEEN  # only the good one
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert len(ep.end.meta["mcp"]["refused"]) == len(hostile)
    (step,) = calls(ep)
    assert step.meta["mcp"]["request_id"] == 7


@pytest.mark.parametrize("tool", ["big", "big_event"])
async def test_a_client_that_stops_reading_is_recorded_as_such(
    tmp_path: Path, lenient: str, tool: str
) -> None:
    """A client that reads nothing of a large answer for ``timeout`` seconds is given up
    on (its connection closed): the step says the answer was relayed (it is written
    first), the end record that it never arrived, and the episode ends aborted."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(
        lenient, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=1, session_grace=0.2
    )
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool}}
    ).encode()
    head = (
        b"POST /mcp HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        with socket.socket() as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(("127.0.0.1", port))
            client.sendall(head + body)  # then reads nothing
            with anyio.fail_after(20):
                # ASYNC110: the condition is the episode file's end record.
                while not any(ep.end for ep in episodes(tmp_path / "eps.jsonl")):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
        proxy.stop()
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert (ep.end.reason or "").startswith("the client stopped reading (")
    assert ep.end.meta["mcp"]["client_stopped_reading"] > 0
    assert ep.end.meta["mcp"]["undelivered_replies"] == 1
    (step,) = calls(ep)
    assert (step.meta["mcp"]["outcome"], step.meta["mcp"]["reply"]) == ("result", "relay")
