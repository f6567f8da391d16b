"""Secrets in a ``tools/call``'s arguments never reach the disk through the MCP proxies.

@modelcontextprotocol/server-everything's ``get-sum`` ignores arguments it does not know,
so a call can carry a canary secret in every form the ``[record]`` defaults know while
its answer holds none: then any hit is the recorder's. Through the stdio proxy (the
official client), its server-less replay (the same call, with the plain secret, is
served from the redacted recording), and the streamable-HTTP proxy.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_mcp_helpers import PROXY, calls, everything_over_http, node_server, one_episode

from litmus_sandbox._cli.main import main

pytestmark = pytest.mark.anyio

CANARY = "CANARYmcp5Jv8w"
ARGS: dict[str, Any] = {
    "a": 1,
    "b": 2,
    "api_key": f"{CANARY}-a",
    "password": f"{CANARY}-b",
    "request": {"headers": {"Authorization": f"Bearer {CANARY}c"}},
    "dsn": f"postgres://app:{CANARY}d@db/prod",
    "pem": f"-----BEGIN EC PRIVATE KEY-----\nMHc{CANARY}\n-----END EC PRIVATE KEY-----",
    "jwt": "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJDQU5BUlltY3A1SnY4dyJ9.Q0FOQVJZbWNwNUp2OHc",
}
SUM = "The sum of 1 and 2 is 3."


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def no_canary(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            assert CANARY.encode() not in p.read_bytes(), f"the canary is in {p}"


def text_of(result: Any) -> str:
    return str(result.content[0].text)


def assert_redacted(eps: Path) -> None:
    (step,) = calls(one_episode(eps))
    assert step.args["a"] == 1
    assert step.args["api_key"].startswith("<redacted 16 chars sha256:")
    assert step.args["dsn"].startswith("postgres://app:<redacted ")
    shapes = {f["shape"] for f in step.meta["redacted"]}
    assert shapes == {"key", "userinfo", "pem", "jwt"}


async def test_the_stdio_proxy_and_its_replay_record_no_secret(tmp_path: Path) -> None:
    eps = tmp_path / "eps.jsonl"
    args = [*PROXY[1:], "--episodes", str(eps), "--", *node_server("everything")]
    async with Client(StdioServerParameters(command=sys.executable, args=args), cache=None) as c:
        assert text_of(await c.call_tool("get-sum", ARGS)) == SUM
    (step,) = calls(one_episode(eps))
    assert step.fidelity == "real"
    assert step.meta["mcp"]["reply"] == "relay"
    assert_redacted(eps)
    # Served from the redacted recording, with no server: the live call carries the plain
    # secret, and matches.
    replayed = tmp_path / "replayed.jsonl"
    args = [*PROXY[1:], "--episodes", str(replayed), "--replay", str(eps)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=tmp_path)
    async with Client(params, cache=None) as c:
        assert text_of(await c.call_tool("get-sum", ARGS)) == SUM
        missed = await c.call_tool("get-sum", {**ARGS, "b": 3})
    assert missed.is_error
    hit, miss = calls(one_episode(replayed))
    assert hit.fidelity == "replayed"
    assert miss.meta["replay"]["divergence"]["closest"][0]["differs"] == ["$.b"]
    assert main(["show", "--redactions", str(replayed)]) == 0
    no_canary(tmp_path)


@pytest.fixture
async def everything() -> AsyncIterator[str]:
    """server-everything over streamable HTTP (``everything_over_http``); yields its URL."""
    async with everything_over_http() as url:
        yield url


async def test_the_http_proxy_records_no_secret(tmp_path: Path, everything: str) -> None:
    from litmus_sandbox.adapters.mcp import HttpProxy

    eps = tmp_path / "eps.jsonl"
    proxy = HttpProxy(everything, episodes=eps, root=tmp_path / "root", timeout=20)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with Client(f"http://127.0.0.1:{port}/mcp", cache=None) as c:
            assert text_of(await c.call_tool("get-sum", ARGS)) == SUM
        proxy.stop()
    assert_redacted(eps)
    no_canary(tmp_path)
