"""A server's event nested too deep is cut off on every stream the HTTP proxy relays.

The hostile peer answers ``tools/list`` with an event stream carrying a harmless log
message, a 100,000-deep one, then the answer; ``ping`` with its answer, then a deep
event; and its GET stream with a log message, a deep event, then another log message.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from test_mcp_helpers import episodes

pytestmark = pytest.mark.anyio

DEEP = b"[" * 100_000 + b"]" * 100_000
WHY = "the MCP server sent a message nested deeper than 128 levels"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def log(text: str) -> bytes:
    message = {"jsonrpc": "2.0", "method": "notifications/message", "params": {}}
    message["params"] = {"level": "info", "logger": "hostile", "data": text}
    return json.dumps(message).encode()


def deep_log() -> bytes:
    return (
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":'
        + DEEP
        + b"}}"
    )


def event(data: bytes) -> bytes:
    return b"event: message\ndata: " + data + b"\n\n"


class _Deep(BaseHTTPRequestHandler):
    """An MCP server over streamable HTTP that nests events 100,000 deep (see the module)."""

    protocol_version = "HTTP/1.1"
    sessions = itertools.count(1)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        rid, method = body.get("id"), body.get("method")
        if "id" not in body or "method" not in body:
            self._send(202, "application/json", b"")
            return
        if method == "initialize":
            result = {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "deep", "version": "1"},
            }
            sid = f"s{next(self.sessions)}"
            self._send(200, "application/json", self._answer(rid, result), sid)
        elif method == "tools/list":
            tools = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}
            stream = event(log("before")) + event(deep_log()) + event(self._answer(rid, tools))
            self._send(200, "text/event-stream", stream)
        elif method == "ping":
            stream = event(self._answer(rid, {})) + event(deep_log()) + event(log("after"))
            self._send(200, "text/event-stream", stream)
        elif method == "server/discover":
            error = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}
            self._send(200, "application/json", json.dumps(error).encode())
        else:
            self._send(200, "application/json", self._answer(rid, {}))

    def do_GET(self) -> None:
        if self.path.endswith("/quiet"):
            self._send(405, "text/plain", b"")  # no server-initiated stream
            return
        stream = event(log("get-before")) + event(deep_log()) + event(log("get-after"))
        self._send(200, "text/event-stream", stream)

    def do_DELETE(self) -> None:
        self._send(200, "application/json", b"")

    @staticmethod
    def _answer(rid: Any, result: Any) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()

    def _send(self, status: int, ctype: str, data: bytes, sid: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if sid is not None:
            self.send_header("Mcp-Session-Id", sid)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def deep_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Deep)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def datas(body: bytes) -> list[Any]:
    """The JSON data of each event of an event stream."""
    out = []
    for block in body.decode().split("\n\n"):
        lines = [ln[5:].strip() for ln in block.splitlines() if ln.startswith("data:")]
        if lines:
            out.append(json.loads("\n".join(lines)))
    return out


def ends_by_session(path: Path) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for ep in episodes(path):
        assert ep.end is not None
        found[ep.header.meta["mcp"]["session_id"]] = (ep.end.status, ep.end.reason or "")
    return found


async def test_a_deep_event_never_reaches_the_client_on_any_relayed_stream(
    tmp_path: Path, deep_server: str
) -> None:
    """Before a relayed request's answer, after it, and on a GET stream: the events
    before the deep one reach the client whole, the deep one and what follows it never
    do, a request still waiting gets ``-32000`` naming why, and each session's episode
    ends aborted with that reason."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(f"{deep_server}/mcp", episodes=tmp_path / "eps.jsonl", root=tmp_path)
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
    }
    got: dict[str, httpx.Response] = {}
    sids: dict[str, str] = {}
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            for name, method in (("listed", "tools/list"), ("pinged", "ping"), ("get", None)):
                opened = await client.post("/mcp", json=init, headers=ACCEPT)
                sid = sids[name] = opened.headers["mcp-session-id"]
                headers = {**ACCEPT, "Mcp-Session-Id": sid}
                if method is None:
                    got[name] = await client.get("/mcp", headers=headers)
                else:
                    request = {"jsonrpc": "2.0", "id": 7, "method": method}
                    got[name] = await client.post("/mcp", json=request, headers=headers)
                await client.delete("/mcp", headers=headers)
        proxy.stop()

    for response in got.values():
        assert response.status_code == 200
        assert b"[[[[" not in response.content
        assert "content-length" not in response.headers  # its length is the proxy's now
    logged = [d["params"]["data"] for d in datas(got["listed"].content) if "method" in d]
    assert logged == ["before"]
    (error,) = [d for d in datas(got["listed"].content) if "id" in d]
    assert (error["id"], error["error"]["code"]) == (7, -32000)
    assert error["error"]["message"] == f"litmus-sandbox: {WHY}"
    assert datas(got["pinged"].content) == [{"jsonrpc": "2.0", "id": 7, "result": {}}]
    assert datas(got["get"].content) == [json.loads(log("get-before"))]

    ends = ends_by_session(tmp_path / "eps.jsonl")
    assert ends == dict.fromkeys(sids.values(), ("aborted", WHY))


async def test_the_sdk_client_gets_an_error_for_a_listing_cut_off(
    tmp_path: Path, deep_server: str
) -> None:
    """The MCP SDK's client through the proxy: the harmless log message before the deep
    one reaches it, its ``list_tools`` fails with ``-32000``, and its session's episode
    ends aborted, recorded."""
    from litmus_sandbox.adapters.mcp import HttpProxy
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    proxy = HttpProxy(f"{deep_server}/quiet", episodes=tmp_path / "eps.jsonl", root=tmp_path)
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params.data)

    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        with anyio.fail_after(30):
            async with Client(f"http://127.0.0.1:{port}/quiet", logging_callback=on_log) as client:
                with pytest.raises(MCPError) as raised:
                    await client.list_tools()
        proxy.stop()
    assert raised.value.code == -32000
    assert WHY in raised.value.message
    assert logs == ["before"]
    assert list(ends_by_session(tmp_path / "eps.jsonl").values()) == [("aborted", WHY)]
