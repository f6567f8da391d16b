"""The floor of a relay that keeps the MCP proxy's contract on every ``tools/call``.

    python bench/contract_relay.py EPISODES -- SERVER COMMAND...

``bench/mcp_bench.py`` runs it beside the proxy and the minimal recording relay, on
uvloop, with the same I/O as that relay (reader callbacks, one parse per line, blocking
writes): what it adds over that relay is what the contract asks of each call, done the
cheapest sound way, and nothing else:

* the client's line: a nesting bound (a bracket count; a deeper scan would only run past
  it), a parse, the checks that make it a recordable call (an id JSON-RPC allows, not
  one in flight, a name, arguments that are an object), the tool's policy looked up;
* a request table entry (the step's id, tool, arguments, start) and an egress window
  opened for the call, before the request goes on unchanged;
* the server's line: a whole line, the nesting bound, a parse, the answer matched to
  its request; the window closed and the flows it holds claimed;
* the step, in the episode format (``ToolCallStep``: what the client is shown, and in
  ``meta["mcp"]`` the request id, the upstream envelope, its size and SHA-256, the
  reply), encoded and written to the episode file before the answer is relayed.

The episode's header and end record are written once, outside the calls.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import msgspec
import uvloop
from relay_io import relay

from litmus_sandbox._model.records import SCHEMA_VERSION, Shown, ToolCallStep

MAX_DEPTH = 64


def run(record_to: str, server_cmd: list[str]) -> None:
    decode = msgspec.json.Decoder()
    encode = msgspec.json.Encoder().encode
    server = subprocess.Popen(server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None
    assert server.stdout is not None
    server_in, server_out = server.stdin.fileno(), server.stdout.fileno()
    record_fd = os.open(record_to, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    episode_id = uuid.uuid4().hex
    modes: dict[str, str] = {}  # tool -> mode; every other tool "real"
    calls: dict[Any, tuple[str, str, dict[str, Any], float]] = {}
    windows: dict[str, float] = {}  # call id -> when its egress window opened
    flows: list[tuple[str | None, float]] = []  # (call id, started) the egress proxy saw
    count = 0

    def append(data: bytes) -> None:
        done = 0
        while done < len(data):
            done += os.write(record_fd, data[done:])

    def from_client(line: bytes) -> bool:
        """Whether the line goes on to the server (this floor drops a call it would refuse:
        the bench sends none)."""
        nonlocal count
        if line.count(b"{") + line.count(b"[") > MAX_DEPTH:
            return False  # the deeper scan, and the refusal, are not this floor's
        msg = decode.decode(line)
        if type(msg) is not dict or msg.get("method") != "tools/call":
            return True
        rid = msg.get("id")
        params = msg.get("params")
        if type(rid) not in (int, str) or type(params) is not dict or rid in calls:
            return False
        tool, args = params.get("name"), params.get("arguments", {})
        if type(tool) is not str or type(args) is not dict:
            return False
        if modes.get(tool, "real") != "real":
            return False
        count += 1
        call_id = f"{episode_id}:{count}"
        windows[call_id] = time.monotonic()
        calls[rid] = (call_id, tool, args, time.time())
        return True

    def from_server(line: bytes) -> bool:
        if not line.endswith(b"\n") or line.count(b"{") + line.count(b"[") > MAX_DEPTH:
            return True
        msg = decode.decode(line)
        if type(msg) is not dict or "method" in msg:
            return True
        rid = msg.get("id")
        if type(rid) not in (int, str) or (call := calls.pop(rid, None)) is None:
            return True
        call_id, tool, args, started = call
        opened = windows.pop(call_id)
        if flows:  # the flows tied to this call: its id, or started in its window
            flows[:] = [f for f in flows if f[0] != call_id and f[1] < opened]
        result = msg.get("result")
        if type(result) is not dict:
            result = {}
        content = result.get("content")
        raw = line.rstrip(b"\r\n")
        step = ToolCallStep(
            v=SCHEMA_VERSION,
            episode_id=episode_id,
            index=count - 1,
            call_id=call_id,
            tool=tool,
            args=args,
            fidelity="real",
            shown=Shown(
                content=tuple(content) if type(content) is list else (),
                is_error=result.get("isError") is True,
                structured=result.get("structuredContent"),
            ),
            started_at=started,
            ended_at=time.time(),
            meta={
                "mcp": {
                    "request_id": rid,
                    "forwarded": True,
                    "outcome": "error" if "error" in msg else "result",
                    "upstream_bytes": len(raw),
                    "upstream_sha256": hashlib.sha256(raw).hexdigest(),
                    "upstream": msg,
                    "reply": "relay",
                }
            },
        )
        append(encode(step) + b"\n")
        return True

    uvloop.run(relay(server_in, server_out, from_client, from_server))
    server.stdin.close()
    server.wait()
    os.close(record_fd)


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: contract_relay.py EPISODES -- SERVER COMMAND...")
    run(sys.argv[1], sys.argv[3:])
