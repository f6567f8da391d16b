"""Added latency of a ``tools/call`` through the MCP stdio proxy.

    python bench/mcp_bench.py [--calls 400] [--server filesystem git]

One official ``mcp`` client session talks to the real server directly, another to the
same server behind ``litmus-sandbox proxy mcp`` as run without ``--root`` (recording
every call to a file, the server's egress through the recording proxy, no filesystem
oracle; a plain real call is run inline, with no task of its own), a third behind the
proxy with the filesystem oracle watching the server's folder (``--root``: each call
runs in a task, between the probes), and a fourth behind ``bench/byte_relay.py``, which
copies bytes and parses nothing: the floor, what the two extra process hops alone cost.
Calls rotate between them (interleaved, so machine noise hits all alike) after a
warm-up. Reports the median call time of each, the median time added, and the ratio to
direct, for the relay (the goal's figure: ratio at most 1.10), with the filesystem
oracle, and for the floor. Written to bench/results/mcp.json.

Servers (both by default): ``filesystem`` (@modelcontextprotocol/server-filesystem,
``read_text_file`` of a small file, a sub-millisecond call; needs ``npm ci --prefix
tests/mcp_servers``) and ``git`` (mcp-server-git, ``git_status`` of a small repository,
a few milliseconds: it runs git). The added time is what matters: it is about the same
for both, so the ratio mostly says how fast the server is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
NODE_SCRIPT = (
    ROOT / "tests/mcp_servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
)


def server_and_call(kind: str, work: Path) -> tuple[list[str], str, dict[str, Any]]:
    if kind == "filesystem":
        if not NODE_SCRIPT.exists():
            sys.exit("mcp_bench: run `npm ci --prefix tests/mcp_servers` first")
        (work / "note.txt").write_text("hello\n" * 20)
        return (
            ["node", str(NODE_SCRIPT), str(work)],
            "read_text_file",
            {"path": str(work / "note.txt")},
        )
    git = ["git", "-C", str(work), "-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (work / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    exe = str(Path(sys.executable).parent / "mcp-server-git")
    return [exe, "--repository", str(work)], "git_status", {"repo_path": str(work)}


async def measure(kind: str, calls: int, work: Path, recordings: Path) -> dict[str, Any]:
    server, tool, args = server_and_call(kind, work)
    # Episodes go to a folder of their own: the watched root's parent is a tripwire, and
    # a recording written there would be seen by the oracle as effects.
    episodes = recordings / "bench.episodes.jsonl"
    watched = recordings / "bench.watched.jsonl"
    proxy = [sys.executable, "-m", "litmus_sandbox._cli.main", "proxy", "mcp"]
    relay = [*proxy, "--episodes", str(episodes), "--", *server]  # run in work (cwd)
    oracle = [*proxy, "--episodes", str(watched), "--root", str(work), "--", *server]
    floor = [sys.executable, str(ROOT / "bench" / "byte_relay.py"), *server]
    direct_params = StdioServerParameters(command=server[0], args=server[1:], cwd=work)
    relay_params = StdioServerParameters(command=relay[0], args=relay[1:], cwd=work)
    oracle_params = StdioServerParameters(command=oracle[0], args=oracle[1:])
    floor_params = StdioServerParameters(command=floor[0], args=floor[1:], cwd=work)
    direct_s: list[float] = []
    proxied_s: list[float] = []
    oracle_s: list[float] = []
    floor_s: list[float] = []
    async with (
        Client(direct_params, cache=None) as direct,
        Client(relay_params, cache=None) as proxied,
        Client(oracle_params, cache=None) as watching,
        Client(floor_params, cache=None) as copying,
    ):
        clients = [
            (direct, direct_s),
            (proxied, proxied_s),
            (watching, oracle_s),
            (copying, floor_s),
        ]
        for _ in range(max(20, calls // 10)):  # warm up every path
            for client, _out in clients:
                await client.call_tool(tool, args)
        for i in range(calls):
            # Rotate which goes first, so none always follows another.
            for client, out in clients[i % len(clients) :] + clients[: i % len(clients)]:
                t0 = time.perf_counter()
                result = await client.call_tool(tool, args)
                out.append(time.perf_counter() - t0)
                assert not result.is_error
    d, p = statistics.median(direct_s), statistics.median(proxied_s)
    o, f = statistics.median(oracle_s), statistics.median(floor_s)
    return {
        "server": kind,
        "tool": tool,
        "calls": calls,
        "direct_median_ms": d * 1e3,
        "proxied_median_ms": p * 1e3,
        "added_median_ms": (p - d) * 1e3,
        "ratio": p / d,
        "goal_ratio": 1.10,
        "with_fs_oracle_median_ms": o * 1e3,
        "with_fs_oracle_added_median_ms": (o - d) * 1e3,
        "with_fs_oracle_ratio": o / d,
        "byte_relay_added_median_ms": (f - d) * 1e3,
        "byte_relay_ratio": f / d,
        "recorded_steps_bytes": episodes.stat().st_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument(
        "--server", nargs="+", choices=["filesystem", "git"], default=["filesystem", "git"]
    )
    opts = parser.parse_args()
    results = []
    for kind in opts.server:
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as rec:
            work = Path(tmp) / "work"
            work.mkdir()
            figures = anyio.run(measure, kind, opts.calls, work, Path(rec))
        results.append(figures)
        for key, value in figures.items():
            print(f"{key:>22}: {value:.3f}" if isinstance(value, float) else f"{key:>22}: {value}")
    out = ROOT / "bench" / "results" / "mcp.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
