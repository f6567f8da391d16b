"""A scripted streamable-HTTP MCP upstream that hangs, crashes and drops connections,
even mid event stream, and the proxy in front of it (``test_mcp_http_failures.py``,
``test_mcp_http_sessions.py``)."""

from __future__ import annotations

import json
import socket
import threading
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx

RELEASE = threading.Event()
#: Methods answered on an event stream the server keeps open: prompts/list plainly,
#: prompts/get gzip-encoded; completion/complete sends half an event and stalls.
_STREAMS = ("prompts/list", "prompts/get", "completion/complete")


class _Upstream(BaseHTTPRequestHandler):
    """A stateless MCP endpoint: ``hang`` never answers (nor does an ``initialize`` asking
    for protocol version ``hang``), ``crash`` drops the connection; an ``initialize``
    asking for protocol version ``bogus`` gets a JSON-RPC error."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in body:  # a notification (the proxy cancels a call that timed out)
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        name = body.get("params", {}).get("name")
        method = body.get("method")
        if method in _STREAMS:
            self._stream(body["id"], method)
            return
        if method == "initialize" and body["params"].get("protocolVersion") == "bogus":
            error = {"code": -32602, "message": "Unsupported protocol version"}
            self._json({"jsonrpc": "2.0", "id": body["id"], "error": error})
            return
        if method == "resources/list":  # a large answer, sent at once
            self._json({"jsonrpc": "2.0", "id": body["id"], "result": {"blob": "b" * 2_000_000}})
            return
        version = body.get("params", {}).get("protocolVersion")
        if name == "hang" or method == "resources/read" or version == "hang":
            RELEASE.wait(10)
            return
        if name == "crash":  # the server dies mid-call: the connection goes, no answer
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if name == "stream_hold":  # answers on a stream it keeps open
            self._stream(body["id"], "prompts/list")
            return
        if name in ("stream_crash", "stream_end"):
            # A chunked event stream: one progress notification, then the server dies
            # in the middle of a chunk (a transport error for the proxy) or ends the
            # stream cleanly without an answer.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            progress = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "t", "progress": 1, "total": 2},
            }
            self._chunk(f"event: message\ndata: {json.dumps(progress)}\n\n".encode())
            if name == "stream_crash":
                self.close_connection = True
                self.wfile.write(b"40\r\nevent: message\ndata: {")  # half a chunk
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
            else:
                self._chunk(b"")
            return
        reply = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": body["id"],
                "result": {"content": [{"type": "text", "text": "ok"}]},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def do_DELETE(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _json(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, rid: Any, method: str) -> None:
        """An event stream that answers and stays open, plain or gzip; or half an event."""
        gzip = method == "prompts/get"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if gzip:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        squeeze = zlib.compressobj(wbits=31)
        answer = {"jsonrpc": "2.0", "id": rid, "result": {"prompts": []}}
        event = f"event: message\ndata: {json.dumps(answer)}\n\n".encode()
        if method == "completion/complete":
            event = event[: len(event) // 2]  # half an event, then nothing
        self._chunk(squeeze.compress(event) + squeeze.flush(zlib.Z_SYNC_FLUSH) if gzip else event)
        RELEASE.wait(10)  # the stream stays open
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        return None


@contextmanager
def failing_upstream() -> Iterator[str]:
    """Serve :class:`_Upstream` on a loopback port, for as long as the block runs: its URL."""
    RELEASE.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    finally:
        RELEASE.set()
        httpd.shutdown()
        httpd.server_close()


@asynccontextmanager
async def proxied(
    tmp_path: Path, upstream: str, limit: float
) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """The HTTP proxy in front of ``upstream`` (``limit``: its --timeout), and a client of
    it; stopped at the end."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=limit)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield proxy, client
        RELEASE.set()
        proxy.stop()


def call(rid: int, name: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": {"litmus/case_id": "c"}},
    }
