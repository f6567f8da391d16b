"""The streamable-HTTP proxy between hostile peers, its memory capped (``RLIMIT_AS``, as
the stdio hostile tests): it stays up, bounded, answers, and records what they did."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from test_mcp_helpers import PROXY, calls, episodes

pytestmark = pytest.mark.anyio

#: The proxy's address space: several times what it needs, far less than the floods.
MEMORY_CAP = 768 << 20
LIMIT = 4 << 20  # --max-message-bytes
ACCEPT = {"Accept": "application/json, text/event-stream"}
DEEP = b"[" * 100_000 + b"]" * 100_000
BAD_UTF8 = b'{"type":"text","text":"caf\xe9 \xff"}'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Hostile(BaseHTTPRequestHandler):
    """Answers each tool its own hostile way (``flood_json``: a JSON body that never
    ends; ``flood_event``: an event that never ends; ``deep``: 100k-deep nesting;
    ``bad_utf8`` / ``bad_utf8_event``: invalid UTF-8), ``echo`` plainly; ``tools/list``
    is answered 100k deep, ``resources/list`` with a body that never ends."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        rid = json.dumps(body.get("id")).encode()
        if "id" not in body:
            self._send("application/json", b"", status=202)
            return
        method, name = body.get("method"), body.get("params", {}).get("name")
        head = b'{"jsonrpc":"2.0","id":' + rid + b',"result":'
        try:
            if name == "flood_json" or method == "resources/list":
                self._endless("application/json", head + b'{"content":[{"type":"text","text":"')
            elif name == "flood_event":
                self._endless("text/event-stream", b"event: message\ndata: " + head + b'"')
            elif name == "deep" or method == "tools/list":
                self._send("application/json", head + DEEP + b"}")
            elif name == "bad_utf8":
                self._send("application/json", head + b'{"content":[' + BAD_UTF8 + b"]}}")
            elif name == "bad_utf8_event":
                data = head + b'{"content":[' + BAD_UTF8 + b"]}}"
                self._send("text/event-stream", b"event: message\ndata: " + data + b"\n\n")
            else:
                text = {"content": [{"type": "text", "text": "still here"}]}
                self._send("application/json", head + json.dumps(text).encode() + b"}")
        except OSError:
            pass  # the proxy cut it off

    def do_DELETE(self) -> None:
        self._send("application/json", b"")

    def _send(self, ctype: str, data: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _endless(self, ctype: str, start: bytes) -> None:
        """``start``, then a megabyte of ``x`` at a time, up to 4 GB: no end in sight."""
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        chunk = b"x" * (1 << 20)
        self.wfile.write(b"%x\r\n%s\r\n" % (len(start), start))
        for _ in range(4096):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def hostile() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
async def capped(tmp_path: Path, hostile: str) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    """The proxy (the CLI) in front of ``hostile`` under ``RLIMIT_AS``; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proxy = [
        *PROXY,
        "--listen",
        f"127.0.0.1:{port}",
        "--upstream",
        hostile,
        "--episodes",
        str(tmp_path / "eps.jsonl"),
        "--max-message-bytes",
        str(LIMIT),
        "--timeout",
        "20",
    ]
    cap = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP})); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    process = await anyio.open_process(
        [sys.executable, "-c", cap, *proxy],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=None,
        cwd=tmp_path,
    )
    assert process.stderr is not None
    seen = b""
    with anyio.fail_after(30):
        while not re.search(rb"MCP proxy on (\S+)", seen):  # its own readiness line
            seen += await process.stderr.receive()
    url = re.search(rb"MCP proxy on (\S+)", seen)
    assert url is not None
    try:
        yield url.group(1).decode(), process
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()


def call(rid: int, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name}}


def answer(response: httpx.Response) -> Any:
    """The JSON-RPC answer a response carries (a JSON body, or its last event's data)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        datas = [
            line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")
        ]
        return json.loads(datas[-1])
    return response.json()


async def test_hostile_http_peers_never_take_the_capped_proxy_down(
    tmp_path: Path, capped: tuple[str, anyio.abc.Process]
) -> None:
    url, process = capped
    got: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=60) as client:

        async def post(session: str, data: bytes | dict[str, Any]) -> httpx.Response:
            headers = {**ACCEPT, "Mcp-Session-Id": session, "Content-Type": "application/json"}
            content = data if isinstance(data, bytes) else json.dumps(data).encode()
            return await client.post(url, content=content, headers=headers)

        for name in ("flood_json", "flood_event", "deep", "bad_utf8", "bad_utf8_event"):
            got[name] = await post(name, call(1, name))
        listed = await post("lists", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        flooded = await post("lists", {"jsonrpc": "2.0", "id": 3, "method": "resources/list"})
        nested = json.dumps(call(1, "echo")).encode()[:-2] + b',"x":' + DEEP + b"}}"
        got["client_deep"] = await post("client_deep", nested)
        big = json.dumps(call(1, "echo")).encode()[:-2] + b',"x":"' + b"y" * (LIMIT + 1) + b'"}}'
        got["client_big"] = await post("client_big", big)
        alive = answer(await post("alive", call(9, "echo")))  # it survived, and answers
        for session in [*got, "lists", "alive"]:
            await client.delete(url, headers={"Mcp-Session-Id": session})
    process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        assert await process.wait() == 130  # stopped by the signal, not by the peers
    assert alive["result"]["content"][0]["text"] == "still here"

    # The server broke a limit: cut off; the client gets a JSON-RPC error for its call.
    for name in ("flood_json", "flood_event", "deep"):
        error = answer(got[name])
        assert (error["id"], error["error"]["code"]) == (1, -32000), name
    assert answer(listed)["error"]["code"] == -32000  # a relayed request's answer too
    assert answer(flooded)["error"]["code"] == -32000
    # Invalid UTF-8 never reaches the client: the call fails, saying so.
    for name in ("bad_utf8", "bad_utf8_event"):
        error = answer(got[name])
        assert "invalid UTF-8" in error["error"]["message"], name
    # What the client sent over the limits: a JSON-RPC error, never relayed.
    assert got["client_deep"].status_code == 400
    assert got["client_deep"].json()["error"]["code"] == -32600
    assert got["client_big"].status_code == 413
    assert got["client_big"].json()["error"]["code"] == -32600
    # ... answered with the request's id (it comes first), so the client's call ends.
    assert got["client_deep"].json()["id"] == 1
    assert got["client_big"].json()["id"] == 1

    by_session = {
        ep.header.meta["mcp"]["session_id"]: ep for ep in episodes(tmp_path / "eps.jsonl")
    }
    reasons = {s: (ep.end.status, ep.end.reason or "") for s, ep in by_session.items() if ep.end}
    assert reasons["flood_json"] == (
        "aborted",
        f"the MCP server sent an answer over {LIMIT} bytes: cut off",
    )
    assert reasons["flood_event"] == (
        "aborted",
        f"the MCP server sent an event over {LIMIT} bytes: cut off",
    )
    assert reasons["deep"] == (
        "aborted",
        "the MCP server sent a message nested deeper than 128 levels",
    )
    assert reasons["lists"] == (
        "aborted",
        "the MCP server sent a message nested deeper than 128 levels",
    )
    assert reasons["client_deep"] == (
        "aborted",
        "the client sent a message nested deeper than 128 levels",
    )
    assert reasons["client_big"] == ("aborted", f"the client sent a message over {LIMIT} bytes")
    assert reasons["alive"] == ("complete", "")
    for name in ("bad_utf8", "bad_utf8_event"):
        assert reasons[name][0] == "complete"  # a failed call, as over stdio
        (step,) = calls(by_session[name])
        assert step.meta["mcp"]["invalid_utf8"] is True
        assert step.meta["mcp"]["outcome"] == "upstream_failed"
    for name in ("flood_json", "flood_event", "deep"):
        (step,) = calls(by_session[name])
        assert step.meta["mcp"]["outcome"] == "upstream_failed"
    end = by_session["client_big"].end
    assert end is not None
    assert end.meta["mcp"]["refused"][0]["bytes"] > LIMIT
