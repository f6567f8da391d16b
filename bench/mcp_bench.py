"""Added latency of a ``tools/call`` through the MCP stdio proxy.

    python bench/mcp_bench.py [--calls 400] [--server filesystem git] [--baseline [NAME=]TREE ...]

One official ``mcp`` client session talks to the real server directly, another to the
same server behind ``litmus-sandbox proxy mcp`` as run without ``--root`` (recording
every call to a file, the server's egress through the recording proxy, no filesystem
oracle; a plain real call is run inline, with no task of its own), a third behind the
proxy with the filesystem oracle watching the server's folder (``--root``: each call
runs in a task, between the probes), a fourth behind ``bench/byte_relay.py``, which
copies bytes and parses nothing (what the two extra process hops alone cost), and a
fifth behind the minimal recording relay written here (``--recording-relay``: it parses
each line, and appends a record of each answered ``tools/call`` before it relays the
answer): the floor for a relay that records; a sixth behind ``bench/contract_relay.py``,
which also does, the cheapest sound way, what the proxy's contract asks of each call (the
limits, the checks that make a call recordable, the policy, the request table, the
egress window, the step in the episode format with the upstream envelope and its hash,
written before the answer is relayed): the floor for a relay that keeps the contract.
The proxy runs on its default loop (``--loop auto``: uvloop when installed); the same
proxy on the standard library's loop (``--loop asyncio``) and the recording relay on
uvloop join the rotation too, so that each loop is compared like with like. Calls
rotate between them after a warm-up: interleaved, so that machine noise hits all alike,
and in a fresh random order each round, so that none always follows another (whose
traces in the caches it would always find). Reports the median call time of each, the
median time added, and the ratio to direct, for the proxy (the goal: at most 0.2 ms
added, and a ratio of at most 1.15 on the filesystem server), with the filesystem
oracle, and for the floors, and the CPU time per call of each relay process
(``*_cpu_us_per_call``, from ``/proc``: each relay waits while the others are called, so
its caches are cold, as a proxy's are between an agent's calls). Written to
bench/results/mcp.json.

Servers (both by default): ``filesystem`` (@modelcontextprotocol/server-filesystem,
``read_text_file`` of a small file, a sub-millisecond call; needs ``npm ci --prefix
tests/mcp_servers``) and ``git`` (mcp-server-git, ``git_status`` of a small repository,
a few milliseconds: it runs git). The added time is what matters: it is about the same
for both, so the ratio mostly says how fast the server is.

With ``--baseline [NAME=]TREE``, the proxy of another source tree (a checkout of an
earlier commit: its ``litmus_sandbox`` and its ``adapters``) joins the rotation as one
more client, run like the proxy, so that before and after are measured in the same
rounds (``baselines`` in the results).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from relay_io import relay

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


async def measure(
    kind: str, calls: int, work: Path, recordings: Path, baselines: list[tuple[str, str]]
) -> dict[str, Any]:
    server, tool, args = server_and_call(kind, work)
    # Episodes go to a folder of their own: the watched root's parent is a tripwire, and
    # a recording written there would be seen by the oracle as effects.
    episodes = recordings / "bench.episodes.jsonl"
    watched = recordings / "bench.watched.jsonl"
    proxy = [sys.executable, "-m", "litmus_sandbox._cli.main", "proxy", "mcp"]
    relay = [*proxy, "--episodes", str(episodes), "--", *server]  # run in work (cwd)
    on_asyncio = recordings / "bench.asyncio.episodes.jsonl"
    stdlib = [*proxy, "--loop", "asyncio", "--episodes", str(on_asyncio), "--", *server]
    oracle = [*proxy, "--episodes", str(watched), "--root", str(work), "--", *server]
    floor = [sys.executable, str(ROOT / "bench" / "byte_relay.py"), *server]
    minimal = recordings / "bench.minimal.jsonl"
    recorder = [sys.executable, __file__, "--recording-relay", str(minimal), "--", *server]
    minimal_uv = recordings / "bench.minimal-uvloop.jsonl"
    recorder_uv = [sys.executable, __file__, "--recording-relay-uvloop", str(minimal_uv), "--"]
    recorder_uv += server
    contract = recordings / "bench.contract.jsonl"
    keeper = [sys.executable, str(ROOT / "bench" / "contract_relay.py"), str(contract), "--"]
    keeper += server
    direct_params = StdioServerParameters(command=server[0], args=server[1:], cwd=work)
    relay_params = StdioServerParameters(command=relay[0], args=relay[1:], cwd=work)
    oracle_params = StdioServerParameters(command=oracle[0], args=oracle[1:])
    floor_params = StdioServerParameters(command=floor[0], args=floor[1:], cwd=work)
    recorder_params = StdioServerParameters(command=recorder[0], args=recorder[1:], cwd=work)
    stdlib_params = StdioServerParameters(command=stdlib[0], args=stdlib[1:], cwd=work)
    recorder_uv_params = StdioServerParameters(
        command=recorder_uv[0], args=recorder_uv[1:], cwd=work
    )
    keeper_params = StdioServerParameters(command=keeper[0], args=keeper[1:], cwd=work)
    baseline_params = [
        StdioServerParameters(
            command=sys.executable,
            args=[
                __file__,
                "--proxy-from",
                tree,
                "proxy",
                "mcp",
                "--episodes",
                str(recordings / f"baseline{i}.episodes.jsonl"),
                "--",
                *server,
            ],
            cwd=work,
        )
        for i, (_, tree) in enumerate(baselines)
    ]
    baseline_s: list[list[float]] = [[] for _ in baselines]
    direct_s: list[float] = []
    proxied_s: list[float] = []
    oracle_s: list[float] = []
    floor_s: list[float] = []
    minimal_s: list[float] = []
    stdlib_s: list[float] = []
    minimal_uv_s: list[float] = []
    contract_s: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        # Sessions are opened in a random order too: one opened later measured up to
        # 0.03 ms faster than its twin opened earlier (the same proxy, twice).
        sessions = [
            (direct_params, direct_s),
            (relay_params, proxied_s),
            (oracle_params, oracle_s),
            (floor_params, floor_s),
            (recorder_params, minimal_s),
            (stdlib_params, stdlib_s),
            (recorder_uv_params, minimal_uv_s),
            (keeper_params, contract_s),
            *zip(baseline_params, baseline_s, strict=True),
        ]
        order = random.Random()
        order.shuffle(sessions)
        clients = [
            (await stack.enter_async_context(Client(params, cache=None)), out)
            for params, out in sessions
        ]
        for _ in range(max(20, calls // 10)):  # warm up every path
            for client, _out in clients:
                await client.call_tool(tool, args)
        # CPU time of the relays themselves (the proxy, the floors; not their servers),
        # which a loaded machine's wall clock blurs.
        relays = {
            name: _child_pid(marker)
            for name, marker in (
                ("proxy", str(episodes)),
                ("asyncio_loop", str(on_asyncio)),
                ("recording_relay", str(minimal)),
                ("recording_relay_uvloop", str(minimal_uv)),
                ("contract_relay", str(contract)),
                ("byte_relay", "byte_relay.py"),
                *((f"baseline{i}", f"baseline{i}.episodes") for i in range(len(baselines))),
            )
        }
        cpu_before = {name: _cpu_seconds(pid) for name, pid in relays.items()}
        for _ in range(calls):
            # A fresh order each round: none always follows another (a process called
            # right after another finds the caches as that one left them).
            order.shuffle(clients)
            for client, out in clients:
                t0 = time.perf_counter()
                result = await client.call_tool(tool, args)
                out.append(time.perf_counter() - t0)
                assert not result.is_error
        cpu_us = {
            name: (_cpu_seconds(pid) - cpu_before[name]) * 1e6 / calls
            for name, pid in relays.items()
        }
    d, p = statistics.median(direct_s), statistics.median(proxied_s)
    o, f = statistics.median(oracle_s), statistics.median(floor_s)
    m = statistics.median(minimal_s)
    a, mu = statistics.median(stdlib_s), statistics.median(minimal_uv_s)
    k = statistics.median(contract_s)
    return {
        "server": kind,
        "tool": tool,
        "calls": calls,
        "direct_median_ms": d * 1e3,
        "proxied_median_ms": p * 1e3,
        "added_median_ms": (p - d) * 1e3,
        "ratio": p / d,
        "goal_added_ms": 0.2,
        "goal_ratio": 1.15 if kind == "filesystem" else None,
        "with_fs_oracle_median_ms": o * 1e3,
        "with_fs_oracle_added_median_ms": (o - d) * 1e3,
        "with_fs_oracle_ratio": o / d,
        "byte_relay_added_median_ms": (f - d) * 1e3,
        "byte_relay_ratio": f / d,
        "recording_relay_added_median_ms": (m - d) * 1e3,
        "recording_relay_ratio": m / d,
        "asyncio_loop_added_median_ms": (a - d) * 1e3,
        "asyncio_loop_ratio": a / d,
        "recording_relay_uvloop_added_median_ms": (mu - d) * 1e3,
        "recording_relay_uvloop_ratio": mu / d,
        "contract_relay_added_median_ms": (k - d) * 1e3,
        "contract_relay_ratio": k / d,
        "recorded_steps_bytes": episodes.stat().st_size,
        "contract_relay_steps_bytes": contract.stat().st_size,
        # CPU per call (user + system, from /proc) of each relay process.
        "proxy_cpu_us_per_call": cpu_us["proxy"],
        "asyncio_loop_cpu_us_per_call": cpu_us["asyncio_loop"],
        "recording_relay_cpu_us_per_call": cpu_us["recording_relay"],
        "recording_relay_uvloop_cpu_us_per_call": cpu_us["recording_relay_uvloop"],
        "contract_relay_cpu_us_per_call": cpu_us["contract_relay"],
        "byte_relay_cpu_us_per_call": cpu_us["byte_relay"],
        "baselines": {
            name or f"baseline{i or ''}": {
                "added_median_ms": (statistics.median(times) - d) * 1e3,
                "ratio": statistics.median(times) / d,
                "cpu_us_per_call": cpu_us[f"baseline{i}"],
            }
            for i, ((name, _), times) in enumerate(zip(baselines, baseline_s, strict=True))
        },
    }


async def _ready_line(process: anyio.abc.Process, stream: str, pattern: bytes) -> bytes:
    """Read ``process``'s stdout or stderr until a line matches ``pattern``; its match."""
    source = process.stdout if stream == "stdout" else process.stderr
    assert source is not None
    seen = b""
    with anyio.fail_after(30):
        while (found := re.search(pattern, seen)) is None:
            seen += await source.receive()
    return found.group(1)


async def measure_http(calls: int, recordings: Path) -> dict[str, Any]:
    """server-everything's ``echo`` over streamable HTTP: direct, behind ``proxy mcp
    --listen`` (recording, no filesystem oracle), and behind the minimal recording relay
    (``bench/http_recording_relay.py``), in one rotation."""
    script = NODE_SCRIPT.parent.parent.parent / "server-everything" / "dist" / "index.js"
    if not script.exists():
        sys.exit("mcp_bench: run `npm ci --prefix tests/mcp_servers` first")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PORT": str(port)}
    episodes = recordings / "bench.http.jsonl"
    proxy = [sys.executable, "-m", "litmus_sandbox._cli.main", "proxy", "mcp"]
    upstream = f"http://127.0.0.1:{port}/mcp"
    minimal = [sys.executable, str(ROOT / "bench" / "http_recording_relay.py")]
    async with (
        await anyio.open_process(["node", str(script), "streamableHttp"], env=env) as server,
        await anyio.open_process(
            [
                *proxy,
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                upstream,
                "--episodes",
                str(episodes),
            ],
            cwd=recordings,
        ) as proxied_process,
        await anyio.open_process([*minimal, str(recordings / "minimal.jsonl"), upstream]) as floor,
    ):
        try:
            await _ready_line(server, "stderr", rb"(listening on port)")
            proxy_url = (
                await _ready_line(proxied_process, "stderr", rb"MCP proxy on (\S+)")
            ).decode()
            floor_port = (await _ready_line(floor, "stdout", rb"port (\d+)")).decode()
            floor_url = f"http://127.0.0.1:{floor_port}/mcp"
            pids = (proxied_process.pid, floor.pid)
            figures = await _rotate(calls, upstream, proxy_url, floor_url, cpu_of=pids)
        finally:
            for process in (floor, proxied_process, server):
                process.terminate()
    d, p, m, proxy_cpu, floor_cpu = figures
    return {
        "server": "everything (streamable HTTP)",
        "tool": "echo",
        "calls": calls,
        "direct_median_ms": d * 1e3,
        "proxied_median_ms": p * 1e3,
        "added_median_ms": (p - d) * 1e3,
        "ratio": p / d,
        "goal_added_ms": 0.5,
        "recording_relay_added_median_ms": (m - d) * 1e3,
        "recording_relay_ratio": m / d,
        # CPU time per call (user + system): what a loaded machine does not blur.
        "proxy_cpu_ms_per_call": proxy_cpu * 1e3 / calls,
        "recording_relay_cpu_ms_per_call": floor_cpu * 1e3 / calls,
        "recorded_steps_bytes": episodes.stat().st_size if episodes.exists() else 0,
    }


def _child_pid(marker: str) -> int:
    """The process this one started whose command line holds ``marker`` (Linux ``/proc``)."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue  # gone meanwhile
        if ppid == me and marker in cmdline:
            return int(entry.name)
    raise RuntimeError(f"mcp_bench: no child process running {marker!r}")


def _cpu_seconds(pid: int) -> float:
    """The CPU time a process has used, all its threads (Linux ``/proc``): the
    scheduler's nanosecond count where it keeps one, else user + system time (clock
    ticks, too coarse for a few hundred calls)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total / 1e9


async def _rotate(calls: int, *urls: str, cpu_of: tuple[int, ...] = ()) -> tuple[float, ...]:
    """The median ``tools/call`` time of one client session per URL, calls rotated; then
    the CPU seconds each process of ``cpu_of`` spent on the measured calls."""
    times: list[list[float]] = [[] for _ in urls]
    cpu: list[float] = []
    args = {"message": "hi"}
    async with contextlib.AsyncExitStack() as stack:
        shuffled = random.Random()
        opening = list(range(len(urls)))
        shuffled.shuffle(opening)  # opened in a random order, as in measure()
        opened = {j: await stack.enter_async_context(Client(urls[j], cache=None)) for j in opening}
        clients = [opened[j] for j in range(len(urls))]
        for _ in range(max(20, calls // 10)):  # warm up every path
            for client in clients:
                await client.call_tool("echo", args)
        order = list(range(len(clients)))
        cpu = [-_cpu_seconds(pid) for pid in cpu_of]
        for _ in range(calls):
            shuffled.shuffle(order)  # a fresh order each round, as in measure()
            for j in order:
                t0 = time.perf_counter()
                result = await clients[j].call_tool("echo", args)
                times[j].append(time.perf_counter() - t0)
                assert not result.is_error
        cpu = [c + _cpu_seconds(pid) for c, pid in zip(cpu, cpu_of, strict=True)]
    return (*(statistics.median(t) for t in times), *cpu)


def recording_relay(record_to: str, server_cmd: list[str], *, uvloop: bool = False) -> None:
    """The floor of a relay that records: asyncio reader callbacks, one parse per line,
    and for each answered ``tools/call`` one record appended (written, not fsynced)
    before the answer is relayed. Nothing else: no policy, no probes, no timeouts.
    ``uvloop``: the same on uvloop's event loop (the proxy's, when installed). The I/O
    (``relay_io.py``) is the contract floor's too."""
    import asyncio

    decode = msgspec.json.Decoder()
    encode = msgspec.json.Encoder()
    server = subprocess.Popen(server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None
    assert server.stdout is not None
    server_in, server_out = server.stdin.fileno(), server.stdout.fileno()
    out = open(record_to, "ab")  # noqa: SIM115 - held for the relay's life
    calls: dict[Any, tuple[str, float]] = {}

    def from_client(line: bytes) -> None:
        msg = decode.decode(line)
        if isinstance(msg, dict) and msg.get("method") == "tools/call":
            calls[msg.get("id")] = (msg["params"]["name"], time.time())

    def from_server_line(line: bytes) -> None:
        msg = decode.decode(line)
        if isinstance(msg, dict) and "method" not in msg and (rid := msg.get("id")) in calls:
            tool, started = calls.pop(rid)
            record = {"kind": "step", "tool": tool, "at": started, "result": msg.get("result")}
            out.write(encode.encode(record) + b"\n")
            out.flush()

    pumps = relay(server_in, server_out, from_client, from_server_line)
    if uvloop:
        import uvloop as uv

        uv.run(pumps)
    else:
        asyncio.run(pumps)
    server.stdin.close()
    server.wait()


def proxy_from(tree: str, argv: list[str]) -> None:
    """Run the command line of another source tree: its ``litmus_sandbox`` first on the
    path, and its ``adapters`` as ``litmus_sandbox.adapters`` (which an editable install
    of this tree would otherwise map to this tree's own)."""
    import importlib.util
    import runpy

    sys.path.insert(0, tree)
    adapters = os.path.join(tree, "adapters")
    spec = importlib.util.spec_from_file_location(
        "litmus_sandbox.adapters",
        os.path.join(adapters, "__init__.py"),
        submodule_search_locations=[adapters],
    )
    assert spec is not None
    assert spec.loader is not None
    import litmus_sandbox

    if not str(litmus_sandbox.__file__).startswith(tree):
        sys.exit(f"mcp_bench: {tree} holds no litmus_sandbox")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    sys.argv = ["litmus-sandbox", *argv]
    runpy.run_module("litmus_sandbox._cli.main", run_name="__main__")


def main() -> None:
    if sys.argv[1:2] == ["--recording-relay"]:
        recording_relay(sys.argv[2], sys.argv[4:])
        return
    if sys.argv[1:2] == ["--recording-relay-uvloop"]:
        recording_relay(sys.argv[2], sys.argv[4:], uvloop=True)
        return
    if sys.argv[1:2] == ["--proxy-from"]:
        proxy_from(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument(
        "--server", nargs="+", choices=["filesystem", "git"], default=["filesystem", "git"]
    )
    parser.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="http: server-everything over streamable HTTP (results in mcp_http.json)",
    )
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="[NAME=]TREE",
        help="also time the stdio proxy of another source tree, in the same rotation",
    )
    opts = parser.parse_args()
    results = []
    baselines = [
        (name, os.path.abspath(tree))
        for name, _, tree in (given.rpartition("=") for given in opts.baseline)
    ]
    if opts.transport == "http":
        with tempfile.TemporaryDirectory() as rec:
            figures = anyio.run(measure_http, opts.calls, Path(rec))
        for key, value in figures.items():
            print(f"{key:>32}: {value:.3f}" if isinstance(value, float) else f"{key:>32}: {value}")
        out = ROOT / "bench" / "results" / "mcp_http.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([figures], indent=2) + "\n")
        print(f"written to {out.relative_to(ROOT)}")
        return
    for kind in opts.server:
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as rec:
            work = Path(tmp) / "work"
            work.mkdir()
            figures = anyio.run(measure, kind, opts.calls, work, Path(rec), baselines)
        results.append(figures)
        for key, value in figures.items():
            if key == "baselines":
                for name, got in value.items():
                    for k, v in got.items():
                        print(f"{name + ' ' + k:>32}: {v:.3f}")
                continue
            print(f"{key:>32}: {value:.3f}" if isinstance(value, float) else f"{key:>32}: {value}")
    out = ROOT / "bench" / "results" / "mcp.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
