"""The streamable-HTTP proxy when its upstream hangs or drops the connection mid-call."""

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
from test_mcp_helpers import calls, one_episode

pytestmark = pytest.mark.anyio

RELEASE = threading.Event()


class _Upstream(BaseHTTPRequestHandler):
    """A stateless MCP endpoint: ``hang`` never answers, ``crash`` drops the connection."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in body:  # a notification (the proxy cancels a call that timed out)
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        name = body.get("params", {}).get("name")
        if name == "hang":
            RELEASE.wait(10)
            return
        if name == "crash":  # the server dies mid-call: the connection goes, no answer
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
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

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def upstream() -> Iterator[str]:
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


def call(rid: int, name: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": {"litmus/case_id": "c"}},
    }


async def test_hang_and_crash_get_json_rpc_errors_and_are_recorded(
    tmp_path: Path, upstream: str
) -> None:
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=0.5)
    headers = {"Accept": "application/json, text/event-stream"}
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            ok = (await client.post("/mcp", json=call(1, "echo"), headers=headers)).json()
            with anyio.fail_after(5):  # the proxy never hangs the client
                hung = (await client.post("/mcp", json=call(2, "hang"), headers=headers)).json()
                crashed = (await client.post("/mcp", json=call(3, "crash"), headers=headers)).json()
        proxy.stop()
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
