"""A stdio MCP server that misbehaves on request, for the proxy's hostile-peer tests.

Usage: mcp_hostile_server.py LOG

Logs every byte it reads to ``LOG.in`` (so a test can tell what reached it). Answers
``initialize``, ``ping`` and ``tools/list``; a ``tools/call`` does what its tool's name
says:

* ``echo`` - returns its ``text`` (a well-behaved call);
* ``flood`` - writes bytes without a newline until it is killed (up to 4 GiB);
* ``deep`` - answers with a result nested 100,000 levels deep;
* ``halfline`` - writes half of its answer, then exits with status 2;
* ``badutf8`` - answers with invalid UTF-8 in its text;
* ``junk`` - writes a log line on stdout, then answers;
* ``big`` - answers with ``size`` bytes of text (default 1 MiB);
* ``slow`` - answers after ``seconds`` (default 1), reading nothing meanwhile.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

LOG = sys.argv[1]
_in = open(LOG + ".in", "ab", buffering=0)  # noqa: SIM115 - held for the process's life
out = sys.stdout.buffer


def send(data: bytes) -> None:
    out.write(data)
    out.flush()


def result(rid: Any, value: dict[str, Any]) -> None:
    send(json.dumps({"jsonrpc": "2.0", "id": rid, "result": value}).encode() + b"\n")


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def call(rid: Any, name: Any, args: dict[str, Any]) -> None:
    prefix = b'{"jsonrpc":"2.0","id":' + json.dumps(rid).encode()
    if name == "echo":
        result(rid, text(str(args.get("text", ""))))
    elif name == "flood":
        chunk = b"x" * (1 << 20)
        for _ in range(4096):
            send(chunk)
    elif name == "deep":
        send(prefix + b',"result":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}}\n")
    elif name == "halfline":
        send(prefix + b',"result":{"content":[{"type":"te')
        os._exit(2)
    elif name == "badutf8":
        send(prefix + b',"result":{"content":[{"type":"text","text":"caf\xe9"}]}}\n')
    elif name == "junk":
        send(b"a log line the server should have written to stderr\n")
        result(rid, text("after junk"))
    elif name == "big":
        result(rid, text("b" * int(args.get("size", 1 << 20))))
    elif name == "slow":
        time.sleep(float(args.get("seconds", 1)))
        result(rid, text("late"))
    else:
        result(rid, {**text(f"unknown tool {name}"), "isError": True})


def main() -> None:
    for line in sys.stdin.buffer:
        _in.write(line)
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or msg.get("id") is None or "method" not in msg:
            continue
        rid, method, params = msg["id"], msg["method"], msg.get("params") or {}
        if method == "initialize":
            info = {"name": "hostile", "version": "1"}
            result(rid, {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": info})
        elif method == "tools/call":
            args = params.get("arguments")
            call(rid, params.get("name"), args if isinstance(args, dict) else {})
        elif method in ("ping", "tools/list"):
            result(rid, {"tools": []} if method == "tools/list" else {})


if __name__ == "__main__":
    main()
