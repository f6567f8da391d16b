"""A scripted stdio MCP server for the proxy's tests (handshake era, no SDK).

Usage: mcp_scripted_server.py LOG

Appends every byte it reads to ``LOG.in`` and every byte it writes to ``LOG.out``, so a
test can check that the proxy relayed each side byte for byte. Its answers are written
with deliberately odd formatting (spacing, key order, escapes) that a re-encoding proxy
would change. Tools:

* ``echo`` - returns its ``text``; ``empty`` - an empty result; ``fail`` - ``isError``;
* ``proto`` - a JSON-RPC error; ``ask`` - sends the client a ``sampling/createMessage``
  request and returns the client's answer; ``progress`` - two progress notifications
  (when the call has a progress token), then a result;
* ``fetch`` - GETs ``url`` with urllib (which honours the proxy variables) and returns
  the body;
* ``task`` - asked for a task (``params.task``), answers ``CreateTaskResult`` (task
  ``task-<id>``), then ``tasks/get`` (completed) and ``tasks/result`` (its result, the
  text ``task done``); asked plainly, returns that result at once;
* ``crash`` - exits with status 3 without answering; ``hang`` and ``stall`` - never
  answer (and log the ``notifications/cancelled`` they then receive); ``freeze`` - stops
  reading its stdin for good (its pipe fills up).

With ``$LITMUS_TEST_LINGER`` set, it lingers that many seconds after its stdin closes
before it exits (as server-everything does when it has just sent a request).

Requests other than ``tools/call``: ``initialize``, ``tools/list`` (after
``$LITMUS_TEST_LIST_DELAY`` seconds) and ``ping`` are answered, ``resources/read`` never is (a server hung on a request), anything else gets
"Method not found".
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

LOG = sys.argv[1]
_in = open(LOG + ".in", "ab", buffering=0)  # noqa: SIM115 - held for the process's life
_out = open(LOG + ".out", "ab", buffering=0)  # noqa: SIM115 - held for the process's life

TOOLS = [
    "echo",
    "empty",
    "fail",
    "proto",
    "ask",
    "progress",
    "fetch",
    "crash",
    "hang",
    "stall",
    "freeze",
    "task",
]
#: Task id -> its result, for tasks/result.
TASKS: dict[str, dict[str, Any]] = {}


def send(line: bytes) -> None:
    _out.write(line)
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()


def result(rid: Any, result: dict[str, Any]) -> None:
    # Odd but valid spacing and key order: a proxy that re-encodes would normalize it.
    body = json.dumps(result, ensure_ascii=True, separators=(" ,", ": "))
    send(
        b'{"result" : '
        + body.encode()
        + b', "jsonrpc":"2.0",  "id" : '
        + json.dumps(rid).encode()
        + b"}\n"
    )


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def call(rid: Any, params: dict[str, Any], lines: Any) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    if name == "echo":
        result(rid, text(str(args.get("text", ""))))
    elif name == "big":  # a result of ``size`` bytes of text
        result(rid, text("b" * int(args.get("size", 0))))
    elif name == "empty":
        result(rid, {"content": []})
    elif name == "fetch":
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(str(args["url"]), timeout=10) as response:
                result(rid, text(response.read().decode()))
        except urllib.error.URLError as exc:
            result(rid, {**text(f"fetch failed: {exc}"), "isError": True})
    elif name == "fail":
        result(rid, {**text("it failed"), "isError": True})
    elif name == "proto":
        send(
            b'{"jsonrpc":"2.0","id":'
            + json.dumps(rid).encode()
            + b',"error":{"code":-32602,"message":"bad arguments"}}\n'
        )
    elif name == "ask":
        send(
            b'{"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}\n'
        )
        answer = json.loads(next(lines))
        result(rid, text(json.dumps(answer.get("result"))))
    elif name == "progress":
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None:
            for i in (1, 2):
                note = {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": i, "total": 2},
                }
                send(json.dumps(note).encode() + b"\n")
        result(rid, text("done"))
    elif name == "task":
        done = text("task done")
        if isinstance(params.get("task"), dict):
            task_id = f"task-{rid}"
            TASKS[task_id] = done
            at = "2026-01-01T00:00:00Z"
            task = {"taskId": task_id, "status": "working", "createdAt": at}
            result(rid, {"task": {**task, "lastUpdatedAt": at, "ttl": None}})
        else:
            result(rid, done)
    elif name == "crash":
        os._exit(3)
    elif name in ("hang", "stall"):
        pass
    elif name == "freeze":
        time.sleep(3600)
    else:
        result(rid, {**text(f"unknown tool {name}"), "isError": True})


def main() -> None:
    def lines() -> Any:
        for line in sys.stdin.buffer:
            _in.write(line)
            yield line

    it = lines()
    for line in it:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or "method" not in msg or msg.get("id") is None:
            continue
        rid, method = msg["id"], msg["method"]
        if method == "initialize":
            info = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scripted", "version": "1 \u00e9"},
            }
            result(rid, info)
        elif method == "tools/list":
            time.sleep(float(os.environ.get("LITMUS_TEST_LIST_DELAY", "0")))
            result(rid, {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]})
        elif method == "ping":
            send(b'{"jsonrpc":"2.0","id":' + json.dumps(rid).encode() + b',"result":{}}   \n')
        elif method == "tools/call":
            call(rid, msg.get("params") or {}, it)
        elif method in ("tasks/get", "tasks/result"):
            task_id = (msg.get("params") or {}).get("taskId")
            if method == "tasks/get":
                result(rid, {"taskId": task_id, "status": "completed", "ttl": None})
            else:
                related = {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
                result(rid, {**TASKS.get(str(task_id), text("no such task")), "_meta": related})
        elif method == "resources/read":
            pass  # hung: never answered
        else:
            send(
                b'{"jsonrpc":"2.0","id":'
                + json.dumps(rid).encode()
                + b',"error":{"code":-32601,"message":"Method not found"}}\n'
            )


if __name__ == "__main__":
    main()
    time.sleep(float(os.environ.get("LITMUS_TEST_LINGER", "0")))
