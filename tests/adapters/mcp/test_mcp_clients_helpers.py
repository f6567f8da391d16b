"""Shared helpers of the real-client tests (test_mcp_clients*.py; no tests here).

The clients are the scripted sessions in ``tests/mcp_servers/clients``: the Python SDK
(``session_py.py``), TS SDK v1 (``session-v1.mjs``) and v2 (``session-v2.mjs``, with
version negotiation on: its ``server/discover`` probe runs on a sibling process). Each
runs a plan, then closes the way its SDK does, and prints what it received. A session
runs *direct* (the client spawns or dials the server) and *proxied* (through
``litmus-sandbox proxy mcp``); the proxy is transparent when the two transcripts match.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from factories import TESTS
from test_mcp_helpers import PROXY, calls, episodes

from litmus_sandbox import Episode, ToolCallStep

CLIENT_DIR = TESTS / "mcp_servers" / "clients"
NODE_MODULES = TESTS / "mcp_servers" / "node_modules"
CLIENTS = ("py", "v1", "v2")
#: The steps of a plan that are a ``tools/call`` (see plan.mjs).
CALL_OPS = frozenset({"call", "progress", "cancel", "task"})


def node() -> str:
    exe = shutil.which("node")
    if exe is None or not (NODE_MODULES / "@modelcontextprotocol" / "client").exists():
        pytest.fail(
            "the npm MCP clients are not installed (node: "
            f"{exe or 'missing'}); run `python3 dev.py test`, which runs "
            "`npm ci --prefix tests/mcp_servers`"
        )
    return exe


def client_command(client: str) -> list[str]:
    if client == "py":
        return [sys.executable, str(CLIENT_DIR / "session_py.py")]
    return [node(), str(CLIENT_DIR / f"session-{client}.mjs")]


def client_env(client: str, root: Path) -> dict[str, str]:
    env = {**os.environ, "LITMUS_ROOT": str(root)}
    if client == "v2":
        env["LITMUS_NEGOTIATION"] = "auto"  # the probe a modern client makes
    return env


@dataclass
class Session:
    """One client session: its transcript, with the root it was given written ``<root>``."""

    client: str
    proxied: bool
    transcript: dict[str, Any] = field(default_factory=dict)
    episodes: list[Episode] = field(default_factory=list)


async def run_session(
    client: str, plan: list[dict[str, Any]], target: list[str], root: Path, limit: float = 60
) -> dict[str, Any]:
    """Run ``client`` through ``plan`` against ``target`` (``stdio CMD...`` or ``http URL``)."""
    command = [*client_command(client), json.dumps(plan), *target]
    with anyio.fail_after(limit):
        done = await anyio.run_process(command, env=client_env(client, root), check=False)
    stderr = done.stderr.decode(errors="replace")[-3000:]
    said = f"{client} {' '.join(target[:3])}... exited {done.returncode}"
    # A Node client whose awaited promise never settles exits 0 having printed nothing.
    assert done.returncode == 0, f"{said}:\n{stderr}"
    assert done.stdout.strip(), f"{said}, printing nothing:\n{stderr}"
    text = done.stdout.decode().replace(str(root), "<root>")
    try:
        transcript: dict[str, Any] = json.loads(text)
    except ValueError:
        pytest.fail(f"{said}, printing no transcript: {text[:300]!r}\n{stderr}")
    return transcript


def proxy_args(tmp: Path, *options: str) -> list[str]:
    return [*PROXY, "--episodes", str(tmp / "eps.jsonl"), *options]


def read_episodes(tmp: Path) -> list[Episode]:
    path = tmp / "eps.jsonl"
    return episodes(path) if path.exists() else []


@asynccontextmanager
async def background(
    command: list[str], ready: bytes, **kw: Any
) -> AsyncIterator[tuple[Process, bytes]]:
    """Run ``command`` until the block ends (SIGTERM); yields it and its stderr up to
    ``ready``."""
    async with await anyio.open_process(command, stdout=None, **kw) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(30):
            while ready not in seen:
                try:
                    seen += await process.stderr.receive()
                except anyio.EndOfStream:
                    pytest.fail(f"{command[:4]} exited before it was ready: {seen!r}")
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, process)
            try:
                yield process, seen
            finally:
                await terminate(process)
                tg.cancel_scope.cancel()


async def drain(process: Process) -> None:
    assert process.stderr is not None
    async for _ in process.stderr:
        pass


async def terminate(process: Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        await process.wait()


def bound_url(stderr: bytes) -> str:
    """The URL the HTTP proxy says it serves on (``--listen 127.0.0.1:0``)."""
    found = re.search(rb"MCP proxy on (http://\S+)", stderr)
    assert found is not None, stderr
    return found.group(1).decode()


def check_recording(
    session: Session, plan: list[dict[str, Any]], outcomes: dict[int, str]
) -> list[ToolCallStep]:
    """One episode, ``complete``, every tools/call of the plan recorded once as ``real``
    with the outcome the client saw (``outcomes``: plan index -> outcome)."""
    who = f"{session.client} proxied"
    assert len(session.episodes) == 1, f"{who}: {len(session.episodes)} episodes"
    (ep,) = session.episodes
    assert ep.complete, f"{who}: {ep.end}"
    steps = calls(ep)
    order = [i for i, s in enumerate(plan) if s["op"] in CALL_OPS]
    assert [s.tool for s in steps] == [plan[i]["name"] for i in order], who
    assert all(s.fidelity == "real" for s in steps), who
    seen = {i: steps[order.index(i)].meta["mcp"]["outcome"] for i in outcomes}
    assert seen == outcomes, who
    version = session.transcript["initialize"]["protocolVersion"]
    if version is not None:  # TS SDK v1 does not tell
        assert ep.header.meta["mcp"]["protocol_version"] == version, who
    return steps
