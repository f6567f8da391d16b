"""The MCP proxy from the ``mcp`` profile: real npm servers, the Python SDK as client.

The SDK client (``tests/mcp_servers/clients/session_py.py``) runs on the profile's own
Python, so the SDK is the one the extra installed; the proxy is the profile's
``litmus-sandbox`` script. Over stdio the client's transcript through the proxy equals
the direct one; over streamable HTTP the calls are recorded in one complete episode.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from installed.profiles import ROOT
from installed.runner import Profile

#: A cold profile venv is made inside the first test that needs it (dev.py makes them
#: before pytest, so a warm run never waits here).
pytestmark = pytest.mark.timeout(900)

CLIENT = ROOT / "tests" / "mcp_servers" / "clients" / "session_py.py"
SERVERS = ROOT / "tests" / "mcp_servers" / "node_modules" / "@modelcontextprotocol"


def node_server(name: str) -> list[str]:
    node, script = shutil.which("node"), SERVERS / f"server-{name}" / "dist" / "index.js"
    if node is None or not script.exists():
        pytest.fail(f"server-{name} is not installed: `python3 dev.py test` runs npm ci")
    return [node, str(script)]


def session(profile: Profile, plan: list[dict[str, Any]], *target: str, root: Path) -> Any:
    """The transcript of the SDK client running ``plan`` against ``target``."""
    done = profile.run(
        CLIENT,
        json.dumps(plan),
        *target,
        program="python",
        timeout=90,
        env=profile.env(LITMUS_ROOT=str(root)),
    )
    return json.loads(done.stdout.replace(str(root), "<root>"))


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_stdio_proxy_is_transparent_to_the_sdk_client(
    installed: Callable[[str], Profile],
) -> None:
    profile = installed("mcp")
    root = profile.cwd / "root"
    root.mkdir()
    new = str(root / "new.txt")
    plan: list[dict[str, Any]] = [
        {"op": "tools/list"},
        {"op": "call", "name": "write_file", "arguments": {"path": new, "content": "hi"}},
        {"op": "call", "name": "read_text_file", "arguments": {"path": new}},
        {"op": "call", "name": "list_directory", "arguments": {"path": str(root)}},
        {"op": "ping"},
    ]
    server = [*node_server("filesystem"), str(root)]
    direct = session(profile, plan, "stdio", *server, root=root)
    (root / "new.txt").unlink()
    episodes = profile.cwd / "mcp.episodes.jsonl"
    proxy = [str(profile.bin / "litmus-sandbox"), "proxy", "mcp", "--episodes", str(episodes)]
    proxy += ["--root", str(root)]  # the filesystem oracle watches the root
    proxied = session(profile, plan, "stdio", *proxy, "--", *server, root=root)
    assert proxied == direct
    assert proxied["steps"][2]["result"]["content"][0]["text"] == "hi"
    kinds = [r["kind"] for r in records(episodes)]
    assert kinds[0] == "episode"
    assert kinds[-1] == "end"
    end = records(episodes)[-1]
    assert end["status"] == "complete", end
    calls = [r for r in records(episodes) if r.get("type") == "tool_call"]
    assert [c["tool"] for c in calls] == ["write_file", "read_text_file", "list_directory"]
    assert {c["fidelity"] for c in calls} == {"real"}
    effects = calls[0]["effects"]["fs"]
    assert [e["op"] for e in effects if e["path"] == "new.txt"] == ["created"], effects


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _started(process: subprocess.Popen[bytes], ready: bytes, limit: float = 30) -> bytes:
    """What ``process`` wrote to stderr up to ``ready`` (its own line, once ready)."""
    assert process.stderr is not None
    seen, deadline = b"", time.monotonic() + limit
    while ready not in seen:
        line = process.stderr.readline()
        if not line or time.monotonic() > deadline:
            pytest.fail(f"{process.args!r} not ready: {seen!r}")
        seen += line
    return seen


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_http_proxy_records_the_sdk_client_session(
    installed: Callable[[str], Profile],
) -> None:
    profile = installed("mcp")
    port = _free_port()
    episodes = profile.cwd / "http.episodes.jsonl"
    everything = [*node_server("everything"), "streamableHttp"]
    proxy: list[str | Path] = [
        profile.bin / "litmus-sandbox",
        "proxy",
        "mcp",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        f"http://127.0.0.1:{port}/mcp",
        "--episodes",
        episodes,
    ]
    plan: list[dict[str, Any]] = [
        {"op": "tools/list"},
        {"op": "call", "name": "echo", "arguments": {"message": "hi"}},
        {"op": "ping"},
    ]
    out, err = subprocess.DEVNULL, subprocess.PIPE
    with subprocess.Popen(
        everything, env=profile.env(PORT=str(port)), stdout=out, stderr=err
    ) as upstream:
        try:
            _started(upstream, b"listening on port")
            with subprocess.Popen(
                proxy, cwd=profile.cwd, env=profile.env(), stdout=out, stderr=err
            ) as relay:
                try:
                    found = re.search(
                        rb"MCP proxy on (http://\S+)", _started(relay, b"MCP proxy on")
                    )
                    assert found is not None
                    got = session(profile, plan, "http", found.group(1).decode(), root=profile.cwd)
                finally:
                    _stop(relay)
        finally:
            _stop(upstream)
    assert "hi" in json.dumps(got["steps"][1]["result"])
    recorded = records(episodes)
    calls = [r for r in recorded if r.get("type") == "tool_call"]
    assert [(c["tool"], c["fidelity"]) for c in calls] == [("echo", "real")]
    assert recorded[-1]["kind"] == "end"
    assert recorded[-1]["status"] == "complete"
