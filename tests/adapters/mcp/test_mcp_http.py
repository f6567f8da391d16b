"""The streamable-HTTP proxy in front of @modelcontextprotocol/server-everything."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from test_mcp_helpers import calls, episodes, everything_over_http, free_port, one_episode

from litmus_sandbox import Policy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def everything() -> AsyncIterator[str]:
    """server-everything over streamable HTTP (``everything_over_http``); yields its URL."""
    async with everything_over_http() as url:
        yield url


@pytest.fixture
async def proxy_url(
    request: pytest.FixtureRequest, tmp_path: Path, everything: str
) -> AsyncIterator[str]:
    """The proxy in front of ``everything``, in process; ``policy`` by indirect param."""
    # Imported here, not at collection (see test_mcp_sansio.py for why).
    from litmus_sandbox.adapters.mcp import HttpProxy

    policy = getattr(request, "param", None)
    proxy = HttpProxy(
        everything,
        episodes=tmp_path / "eps.jsonl",
        root=tmp_path,
        policy=Policy(policy) if policy else None,
        timeout=20,
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        yield f"http://127.0.0.1:{port}/mcp"
        proxy.stop()


def dump(result: Any) -> Any:
    return result.model_dump(mode="json", exclude_none=True)


async def test_everything_works_through_the_proxy_and_streams(
    tmp_path: Path, everything: str, proxy_url: str
) -> None:
    async with Client(everything, cache=None) as client:
        tools_direct = dump(await client.list_tools())
        echo_direct = dump(await client.call_tool("echo", {"message": "hi"}))
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(proxy_url, cache=None) as client:
        assert dump(await client.list_tools()) == tools_direct
        meta: Any = {"litmus/case_id": "everything-1"}
        assert dump(await client.call_tool("echo", {"message": "hi"}, meta=meta)) == echo_direct
        long = await client.call_tool(
            "trigger-long-running-operation",
            {"duration": 0.3, "steps": 3},
            progress_callback=on_progress,
        )
        structured = await client.call_tool("get-structured-content", {"location": "New York"})
    assert seen == [1, 2, 3]  # streamed through as they came
    assert "completed" in long.content[0].text  # type: ignore[union-attr]
    assert structured.structured_content is not None
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.case_id == "everything-1"
    assert ep.complete  # the client's DELETE ended the session and its episode
    assert ep.header.meta["mcp"]["transport"] == "streamable-http"
    assert "session_id" in ep.header.meta["mcp"]
    echo, op, struct = calls(ep)
    assert [s.fidelity for s in (echo, op, struct)] == ["real"] * 3
    notes = op.meta["mcp"]["notifications"]
    assert [n["params"]["progress"] for n in notes] == [1, 2, 3]
    assert struct.shown.structured == structured.structured_content
    assert echo.meta["mcp"]["reply"] == "relay"


@pytest.mark.parametrize(
    "proxy_url",
    [
        {
            "get-structured-content": {"mode": "stub", "result": "stubbed weather"},
            "echo": {"mode": "stub", "result": "stubbed echo"},
            "get-sum": {"mode": "deny"},
        }
    ],
    indirect=True,
)
async def test_policy_applies_over_http(tmp_path: Path, proxy_url: str) -> None:
    async with Client(proxy_url, cache=None) as client:
        # First, before the client has listed the tools: a tool with an output schema,
        # which the official client checks the stand-in result against.
        weather = await client.call_tool("get-structured-content", {"location": "New York"})
        stub = await client.call_tool("echo", {"message": "hi"})
        denied = await client.call_tool("get-sum", {"a": 1, "b": 2})
    assert not weather.is_error
    assert weather.structured_content is not None
    assert stub.content[0].text == "stubbed echo"  # type: ignore[union-attr]
    assert denied.is_error
    steps = calls(one_episode(tmp_path / "eps.jsonl"))
    assert [s.fidelity for s in steps] == ["stubbed", "stubbed", "denied"]
    assert [s.meta["mcp"]["forwarded"] for s in steps] == [False, False, False]
    assert steps[0].meta["mcp"]["structured_placeholder"] is True


async def test_an_unreachable_upstream_gets_json_rpc_errors(tmp_path: Path) -> None:
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(
        f"http://127.0.0.1:{free_port()}/mcp", episodes=tmp_path / "eps.jsonl", root=tmp_path
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {"accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient() as http:
            call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x"}}
            r1 = await http.post(url, json=call, headers=headers)
            ping = {"jsonrpc": "2.0", "id": 4, "method": "ping"}
            r2 = await http.post(url, json=ping, headers=headers)
        proxy.stop()
    assert r1.status_code == 200
    assert r1.json()["id"] == 3
    assert r1.json()["error"]["code"] == -32000
    assert r2.status_code == 502
    assert r2.json()["id"] == 4
    (ep,) = episodes(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert "unreachable" in (ep.end.reason or "")
    (step,) = calls(ep)
    assert step.meta["mcp"]["forwarded"] is False


async def test_a_session_that_only_initialized_then_left_is_complete_at_a_signal(
    tmp_path: Path, everything: str
) -> None:
    """The server names the session in its initialize answer; the client leaves with no
    other request (no ``notifications/initialized``, no DELETE): its client is gone once
    the connection that carried the initialize closes, and a signal then ends the
    episode complete, not aborted."""
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(
        everything, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=20, session_grace=None
    )
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "one-shot", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            answered = await client.post("/mcp", json=init, headers=accept)
            sid = answered.headers["mcp-session-id"]
        with anyio.fail_after(10):
            # ASYNC110: the proxy's view of its connections; no event to wait on.
            while not proxy.gone(f"session:{sid}"):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        proxy.stop("the proxy was stopped by SIGTERM")
        with anyio.fail_after(10):
            await proxy.stopped.wait()
    (ep,) = episodes(tmp_path / "eps.jsonl")
    assert ep.complete
    assert calls(ep) == []
