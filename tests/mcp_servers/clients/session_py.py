"""A scripted session with the Python SDK (``mcp``) as client: plan.mjs's twin.

    python session_py.py PLAN_JSON stdio COMMAND ARGS...
    python session_py.py PLAN_JSON http URL

Runs the plan (see plan.mjs for the steps and the transcript's format) and prints the
transcript once the client has closed cleanly: over stdio the SDK closes the server's
stdin, waits 2 s, then sends SIGTERM. The client connects in the SDK's default mode
(``auto``: a ``server/discover`` probe, then ``initialize`` on a legacy server).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import ListRootsResult, Root
from pydantic import FileUrl

DROPPED = frozenset({"_meta", "taskId", "createdAt", "lastUpdatedAt", "requestId"})


def normalise(value: Any) -> Any:
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: normalise(value[k]) for k in sorted(value) if k not in DROPPED}
    return value


def dump(result: Any) -> Any:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def roots(context: ClientRequestContext) -> ListRootsResult:
    """One root (LITMUS_ROOT, a folder), as plan.mjs answers."""
    root = os.environ.get("LITMUS_ROOT", "/tmp")
    return ListRootsResult(roots=[Root(uri=FileUrl(f"file://{root}"), name="root")])


async def raw(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request sent as is: SDK 2.3 validates a tools/call result as a CallToolResult,
    and a task-augmented call answers a CreateTaskResult, so this goes below that."""
    result: dict[str, Any] = await client.session._dispatcher.send_raw_request(
        method, params, {"timeout": 30}
    )
    return result


async def run_step(client: Client, step: dict[str, Any]) -> dict[str, Any]:
    op = step["op"]
    name, args = step.get("name", ""), step.get("arguments")
    if op == "tools/list":
        return {"result": dump(await client.list_tools())}
    if op == "resources/list":
        return {"result": dump(await client.list_resources())}
    if op == "resources/templates/list":
        return {"result": dump(await client.list_resource_templates())}
    if op == "prompts/list":
        return {"result": dump(await client.list_prompts())}
    if op == "ping":
        return {"result": dump(await client.send_ping())}
    if op == "call":
        return {"result": dump(await client.call_tool(name, args, read_timeout_seconds=30))}
    if op == "read":
        return {"result": dump(await client.read_resource(step["uri"]))}
    if op == "prompt":
        return {"result": dump(await client.get_prompt(name, args))}
    if op == "progress":
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        result = await client.call_tool(name, args, 30, on_progress)
        return {"result": dump(result), "progressed": bool(seen)}  # as plan.mjs says
    if op == "cancel":
        with anyio.CancelScope() as scope:

            async def cancel(progress: float, total: float | None, message: str | None) -> None:
                scope.cancel()

            await client.call_tool(name, args, 30, cancel)
        return {"cancelled": scope.cancelled_caught}
    if op == "task":
        params = {"name": name, "arguments": args or {}, "task": {"ttl": 60000}}
        created = await raw(client, "tools/call", params)
        task = created["task"]
        final = await raw(client, "tasks/result", {"taskId": task["taskId"]})
        return {"created": {"status": task["status"]}, "result": final}
    raise ValueError(f"unknown step {op}")


async def run_plan(client: Client, plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    steps = []
    for step in plan:
        started = time.monotonic()
        try:
            steps.append({"op": step["op"], **await run_step(client, step)})
        except MCPError as err:
            steps.append({"op": step["op"], "error": {"code": err.code, "message": err.message}})
        if os.environ.get("LITMUS_TIMING"):
            print(f"{step['op']}: {(time.monotonic() - started) * 1000:.0f} ms", file=sys.stderr)
    return steps


async def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("stdio", "http"):
        print(__doc__, file=sys.stderr)
        return 2
    plan = json.loads(argv[0])
    target: Any = argv[2]
    if argv[1] == "stdio":
        target = StdioServerParameters(command=argv[2], args=argv[3:])
    async with Client(target, cache=None, list_roots_callback=roots) as client:
        initialize = {
            "protocolVersion": client.protocol_version,
            "serverInfo": dump(client.server_info) if client.server_info else None,
            "capabilities": dump(client.server_capabilities),
        }
        steps = await run_plan(client, plan)
    print(json.dumps({"initialize": normalise(initialize), "steps": normalise(steps)}))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
