"""Shared helpers of the MCP proxy tests (no tests here).

The npm reference servers are installed by ``python3 dev.py test`` into
``tests/mcp_servers/node_modules``; a missing install fails loudly, never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from factories import PROGRAMS, TESTS

from litmus_sandbox import Episode, ToolCallStep, read_episodes

SCRIPTED = [sys.executable, str(PROGRAMS / "mcp_scripted_server.py")]
NODE_MODULES = TESTS / "mcp_servers" / "node_modules" / "@modelcontextprotocol"
PROXY = [sys.executable, "-m", "litmus_sandbox._cli.main", "proxy", "mcp"]


def free_port() -> int:
    """A loopback port nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def everything_over_http() -> AsyncIterator[str]:
    """server-everything over streamable HTTP on a free loopback port; yields its URL."""
    port = free_port()
    command = [*node_server("everything"), "streamableHttp"]
    async with await anyio.open_process(
        command, env={**os.environ, "PORT": str(port)}, stdout=None
    ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(20):
            while b"listening on port" not in seen:  # its own readiness line
                seen += await process.stderr.receive()
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()


def node_server(name: str) -> list[str]:
    """The command line of an npm reference server (``filesystem``, ``everything``)."""
    script = NODE_MODULES / f"server-{name}" / "dist" / "index.js"
    node = shutil.which("node")
    if node is None or not script.exists():
        pytest.fail(
            f"the npm MCP server @modelcontextprotocol/server-{name} is not installed "
            f"(node: {node or 'missing'}; expected {script}); run `python3 dev.py test`, "
            "which runs `npm ci --prefix tests/mcp_servers`"
        )
    return [node, str(script)]


def git_server() -> list[str]:
    """The command line of ``mcp-server-git`` (PyPI, installed with the test extra)."""
    exe = Path(sys.executable).parent / "mcp-server-git"
    if not exe.exists():
        pytest.fail("mcp-server-git is not installed: `pip install -e '.[test]'` installs it")
    return [str(exe)]


def episodes(path: Path) -> list[Episode]:
    return read_episodes([path])


def one_episode(path: Path) -> Episode:
    (ep,) = episodes(path)
    return ep


def calls(ep: Episode) -> list[ToolCallStep]:
    return [s for s in ep.steps if isinstance(s, ToolCallStep)]


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def request(rid: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return line(msg)


def tool_call(rid: Any, name: str, args: dict[str, Any] | None = None, **params: Any) -> bytes:
    return request(rid, "tools/call", {"name": name, "arguments": args or {}, **params})


class RawClient:
    """Drives ``litmus-sandbox proxy mcp`` over its stdin/stdout with raw bytes."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self._buf = bytearray()

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def recv(self, limit: float = 10) -> bytes:
        """The next line the proxy wrote, exactly (b"" at end of stream)."""
        assert self.process.stdout is not None
        with anyio.fail_after(limit):
            while b"\n" not in self._buf:
                try:
                    self._buf += await self.process.stdout.receive()
                except anyio.EndOfStream:
                    data, self._buf = bytes(self._buf), bytearray()
                    return data
        i = self._buf.index(b"\n") + 1
        data = bytes(self._buf[:i])
        del self._buf[:i]
        return data

    async def recv_json(self, limit: float = 10) -> Any:
        return json.loads(await self.recv(limit))

    async def finish(self, limit: float = 20) -> int:
        """Hang up like an MCP client and wait for the proxy to exit."""
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        with anyio.fail_after(limit):
            return await self.process.wait()


def proxy_command(tmp_path: Path, *options: str, server: list[str] | None = None) -> list[str]:
    server = server if server is not None else [*SCRIPTED, str(tmp_path / "server")]
    return [*PROXY, "--episodes", str(tmp_path / "eps.jsonl"), *options, "--", *server]


async def open_proxy(tmp_path: Path, *options: str, server: list[str] | None = None) -> Process:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return await anyio.open_process(
        proxy_command(tmp_path, "--root", str(root), *options, server=server),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stderr=None,
    )


def server_log(tmp_path: Path, side: str) -> bytes:
    """What the scripted server read (``in``) or wrote (``out``)."""
    path = tmp_path / f"server.{side}"
    return path.read_bytes() if path.exists() else b""


#: An ``initialize`` naming its case in ``_meta`` (and a non-ASCII escape, relayed as is).
INIT = (
    b'{"jsonrpc":"2.0", "id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"raw","version":"\\u00e9"},'
    b'"_meta":{"litmus/case_id":"case-from-meta"}}}\n'
)


async def initialized(process: Process) -> RawClient:
    """A raw client of the proxy ``process``, past its ``initialize`` handshake."""
    client = RawClient(process)
    await client.send(INIT)
    await client.recv()
    return client
