"""Task-augmented calls over streamable HTTP, against server-everything's task tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_mcp_helpers import calls, one_episode

# server-everything over HTTP and the proxy in front of it (fixtures, imported to be used).
from test_mcp_http import everything, proxy_url  # noqa: F401

pytestmark = pytest.mark.anyio
TOOL = "simulate-research-query"  # taskSupport "required": it only runs as a task
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def answer(response: httpx.Response) -> Any:
    """The JSON-RPC answer a response carries (a JSON body, or the last event's data)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        datas = [
            line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")
        ]
        return json.loads([d for d in datas if d][-1])
    return response.json()


async def session(client: httpx.AsyncClient, url: str) -> dict[str, str]:
    """Initialize a session; the headers its requests carry."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tasks": {}},
            "clientInfo": {"name": "raw", "version": "1"},
            "_meta": {"litmus/case_id": "tasks"},
        },
    }
    response = await client.post(url, json=init, headers=ACCEPT)
    assert answer(response)["result"]["protocolVersion"] == "2025-11-25"
    headers = {
        **ACCEPT,
        "Mcp-Session-Id": response.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    await client.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    return headers


def request(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def task_call(rid: int) -> dict[str, Any]:
    params = {"name": TOOL, "arguments": {"topic": "tides"}, "task": {"ttl": 60000}}
    return request(rid, "tools/call", params)


async def test_a_task_call_over_http_is_recorded_with_its_final_result(
    tmp_path: Path,
    proxy_url: str,  # noqa: F811
) -> None:
    """The client gets the task at once and goes on on the same connection; the step
    waits for the result tasks/result brings, records it, then the client gets it."""
    one_connection = httpx.Limits(max_connections=1)
    async with httpx.AsyncClient(timeout=30, limits=one_connection) as client:
        headers = await session(client, proxy_url)
        created = answer(await client.post(proxy_url, json=task_call(1), headers=headers))
        task_id = created["result"]["task"]["taskId"]
        status = answer(
            await client.post(
                proxy_url, json=request(2, "tasks/get", {"taskId": task_id}), headers=headers
            )
        )
        assert status["result"]["taskId"] == task_id
        final = answer(
            await client.post(
                proxy_url, json=request(3, "tasks/result", {"taskId": task_id}), headers=headers
            )
        )
        await client.delete(proxy_url, headers=headers)
    text = final["result"]["content"][0]["text"]
    assert text.startswith("# Research Report: tides")
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.complete
    (step,) = calls(ep)
    assert step.fidelity == "real"
    assert step.shown.text() == text
    mcp = step.meta["mcp"]
    assert mcp["task"] == {"task_id": task_id, "result_request_id": 3, "result_later": True}
    assert mcp["outcome"] == "result"
    assert mcp["upstream"] == final  # the step holds what the client was given


@pytest.mark.parametrize(
    ("proxy_url", "fidelity", "shown"),
    [
        ({TOOL: {"mode": "stub", "result": "stubbed report"}}, "stubbed", "stubbed report"),
        ({TOOL: {"mode": "deny"}}, "denied", None),
    ],
    indirect=["proxy_url"],
)
async def test_a_stubbed_or_denied_task_tool_is_answered_as_a_task(
    tmp_path: Path,
    proxy_url: str,  # noqa: F811
    fidelity: str,
    shown: str | None,
) -> None:
    """A tool that only runs as a task is answered in that shape: a task of the proxy's
    own, done, whose tasks/get and tasks/result the proxy answers with the stand-in."""
    async with httpx.AsyncClient(timeout=30) as client:
        headers = await session(client, proxy_url)
        created = answer(await client.post(proxy_url, json=task_call(1), headers=headers))
        task = created["result"]["task"]
        assert task["status"] == "completed"
        got = answer(
            await client.post(
                proxy_url, json=request(2, "tasks/get", {"taskId": task["taskId"]}), headers=headers
            )
        )
        assert got["result"]["status"] == "completed"
        result = answer(
            await client.post(
                proxy_url,
                json=request(3, "tasks/result", {"taskId": task["taskId"]}),
                headers=headers,
            )
        )["result"]
        await client.delete(proxy_url, headers=headers)
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert step.fidelity == fidelity
    assert step.meta["mcp"]["forwarded"] is False
    assert step.meta["mcp"]["task"] == {"task_id": task["taskId"], "proxy_task": True}
    # The step records what the client was shown, through tasks/result.
    assert result["content"] == [{"type": "text", "text": step.shown.text()}]
    assert result.get("isError", False) == step.shown.is_error
    if shown is not None:
        assert step.shown.text() == shown
    else:
        assert step.shown.is_error
