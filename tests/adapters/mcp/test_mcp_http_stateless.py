"""Stateless MCP over streamable HTTP through the proxy: each exchange that names no
session and no case is an episode of its own, never folded into another.

The server is the official Python SDK's with ``stateless_http=True`` (no ``Mcp-Session-Id``
ever), the client the SDK's own ``Client``, both on loopback.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from factories import PROGRAMS
from test_mcp_helpers import calls, episodes, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def stateless_server() -> AsyncIterator[str]:
    """The SDK's stateless server on a free loopback port; yields its URL once it answers."""
    port = free_port()
    command = [sys.executable, str(PROGRAMS / "mcp_stateless_http_server.py"), str(port)]
    async with await anyio.open_process(command, stdout=None, stderr=None) as process:
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            with anyio.fail_after(30):
                while True:  # listening once a connection is accepted
                    try:
                        await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                        break
                    except OSError:
                        await anyio.sleep(0.1)
            yield url
        finally:
            process.terminate()


@asynccontextmanager
async def proxied(tmp_path: Path, upstream: str) -> AsyncIterator[tuple[object, str]]:
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=20)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        try:
            yield proxy, f"http://127.0.0.1:{port}/mcp"
        finally:
            proxy.stop()


async def test_each_stateless_exchange_is_its_own_episode(tmp_path: Path) -> None:
    from mcp import Client

    async with (
        stateless_server() as upstream,
        proxied(tmp_path, upstream) as (_, url),
        Client(url, cache=None) as client,
    ):
        said = []
        for text in ("one", "two", "three"):
            result = await client.call_tool("echo", {"text": text})
            said.append(result.content[0].text)  # type: ignore[union-attr]
        assert said == ["one", "two", "three"]
        # While the client (and its connection pool) is still there, each exchange's
        # episode has ended: nothing can come back to it.
        for _ in range(200):
            if len([e for e in episodes(tmp_path / "eps.jsonl") if e.complete]) == 3:
                break
            await anyio.sleep(0.05)
        assert len([e for e in episodes(tmp_path / "eps.jsonl") if e.complete]) == 3
    eps = episodes(tmp_path / "eps.jsonl")
    # The client's discovery and listing exchanges called no tool: no episode of theirs.
    assert len(eps) == 3
    assert [[c.args for c in calls(ep)] for ep in eps] == [
        [{"text": "one"}],
        [{"text": "two"}],
        [{"text": "three"}],
    ]
    assert all(ep.complete for ep in eps)
    assert len({ep.header.episode_id for ep in eps}) == 3
    assert all("session_id" not in ep.header.meta["mcp"] for ep in eps)


async def test_stateless_exchanges_that_name_a_case_share_its_episode(tmp_path: Path) -> None:
    """A client that names its case in ``_meta`` ties its exchanges together itself."""
    from mcp import Client

    async with (
        stateless_server() as upstream,
        proxied(tmp_path, upstream) as (_, url),
        Client(url, cache=None) as client,
    ):
        case: Any = {"litmus/case_id": "case-7"}  # a key of ours: not in the SDK's type
        for text in ("a", "b"):
            await client.call_tool("echo", {"text": text}, meta=case)
        await client.call_tool("echo", {"text": "loose"})
    eps = episodes(tmp_path / "eps.jsonl")
    by_case = {ep.header.case_id: [c.args["text"] for c in calls(ep)] for ep in eps}
    assert by_case == {"case-7": ["a", "b"], "mcp-session": ["loose"]}
