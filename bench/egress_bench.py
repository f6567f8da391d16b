"""Cost of the egress forward proxy, against direct loopback and against mitmproxy.

    python bench/egress_bench.py [--requests 2000] [--clients 8] [--seconds 3]
                                 [--backend asyncio|trio] [--mitmdump PATH]

Three processes serve the same workload: a minimal keep-alive HTTP server (asyncio,
fixed 2-byte answer), our :class:`ForwardProxy` recording into an :class:`EgressProbe`,
and ``mitmdump --mode regular`` (when found: ``--mitmdump``, ``.venv/bin/mitmdump`` or
PATH). The client (this process, raw asyncio streams, so it is not the bottleneck) sends
small GETs over kept-alive connections:

* latency: sequential requests, interleaved in rounds across direct / ours / mitmproxy so
  machine noise hits all alike; median milliseconds, and milliseconds added over direct.
  Goal: under 0.5 ms added.
* throughput: ``--clients`` concurrent connections for ``--seconds`` each target;
  requests per second. Goal: at least 3x mitmproxy's.

Prints a summary and writes ``bench/results/egress.json``.

mitmproxy is a benchmark-only tool and must not share the project's virtualenv:
mitmproxy 11 (the last for Python 3.11) pins ``h11<0.15``, which would break httpx's
``httpcore``. Give it its own::

    python -m venv /tmp/mitm && /tmp/mitm/bin/pip install mitmproxy
    python bench/egress_bench.py --mitmdump /tmp/mitm/bin/mitmdump
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


# ---------------------------------------------------------------- child roles


class _Upstream(asyncio.Protocol):
    """Answers every request head with RESPONSE (GETs only: no bodies to read)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        count = self.buffer.count(b"\r\n\r\n")
        if count:
            self.buffer = self.buffer[self.buffer.rindex(b"\r\n\r\n") + 4 :]
            self.transport.write(RESPONSE * count)


async def _run_upstream() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Upstream, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def _run_proxy(backend: str) -> None:
    import anyio

    from litmus_sandbox.oracles.egress import EgressProbe, ForwardProxy

    async def serve() -> None:
        probe = EgressProbe()  # a real sink: every flow is recorded, as in an episode
        await probe.start()
        async with ForwardProxy(probe.policy, probe.sink) as proxy:
            print(proxy.port, flush=True)
            await anyio.sleep_forever()

    anyio.run(serve, backend=backend)


# ---------------------------------------------------------------- client


class Target:
    def __init__(self, name: str, port: int, request: bytes) -> None:
        self.name, self.port, self.request = name, port, request


async def _open(target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", target.port)


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> None:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected response: {head[:60]!r}")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)


async def latency(targets: Sequence[Target], requests: int, rounds: int) -> dict[str, float]:
    """Median ms per sequential request, each target measured in interleaved rounds."""
    conns = {t.name: await _open(t) for t in targets}
    samples: dict[str, list[float]] = {t.name: [] for t in targets}
    per_round = max(1, requests // rounds)
    for t in targets:  # warm up each path (connections, upstream pools, caches)
        for _ in range(200):
            await _one(*conns[t.name], t.request)
    for _ in range(rounds):
        for t in targets:
            reader, writer = conns[t.name]
            for _ in range(per_round):
                t0 = time.perf_counter()
                await _one(reader, writer, t.request)
                samples[t.name].append(time.perf_counter() - t0)
    for _, writer in conns.values():
        writer.close()
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


async def throughput(target: Target, clients: int, seconds: float) -> float:
    """Requests per second with ``clients`` concurrent kept-alive connections."""
    conns = [await _open(target) for _ in range(clients)]
    for reader, writer in conns:
        await _one(reader, writer, target.request)
    deadline = time.perf_counter() + seconds
    counts = [0] * clients

    async def loop(i: int) -> None:
        reader, writer = conns[i]
        while time.perf_counter() < deadline:
            await _one(reader, writer, target.request)
            counts[i] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(clients)))
    elapsed = time.perf_counter() - t0
    for _, writer in conns:
        writer.close()
    return sum(counts) / elapsed


# ---------------------------------------------------------------- orchestration


def _start(cmd: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """Start a child role that prints its port on its first line (ready when printed)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise RuntimeError(f"{cmd[:3]} did not start")
    return proc, int(line)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_mitmdump(exe: str) -> tuple[subprocess.Popen[bytes], int]:
    """mitmdump has no readiness signal: wait (bounded) until its port accepts."""
    import socket

    port = _free_port()
    cmd = [exe, "--mode", "regular", "--listen-host", "127.0.0.1", "--listen-port", str(port), "-q"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mitmdump exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)  # polling an external process's port: it cannot tell us
    proc.kill()
    raise RuntimeError("mitmdump did not start listening within 30 s")


def _find_mitmdump(given: str | None) -> str | None:
    if given:
        return given
    local = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "mitmdump"
    return str(local) if local.exists() else shutil.which("mitmdump")


def _mitm_version(exe: str) -> str:
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0] if done.stdout else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests per target")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--mitmdump", default=None, help="path to mitmdump")
    parser.add_argument("--role", choices=["upstream", "proxy"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "upstream":
        asyncio.run(_run_upstream())
        return
    if args.role == "proxy":
        _run_proxy(args.backend)
        return

    me = [sys.executable, os.path.abspath(__file__)]
    children: list[subprocess.Popen[bytes]] = []
    try:
        upstream, up_port = _start([*me, "--role", "upstream"])
        children.append(upstream)
        ours, our_port = _start([*me, "--role", "proxy", "--backend", args.backend])
        children.append(ours)
        absolute = f"GET http://127.0.0.1:{up_port}/ HTTP/1.1\r\nHost: 127.0.0.1:{up_port}\r\n\r\n"
        targets = [
            Target(
                "direct", up_port, f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{up_port}\r\n\r\n".encode()
            ),
            Target("litmus", our_port, absolute.encode()),
        ]
        exe = _find_mitmdump(args.mitmdump)
        mitm_version = None
        if exe is not None:
            mitm, mitm_port = _start_mitmdump(exe)
            children.append(mitm)
            targets.append(Target("mitmproxy", mitm_port, absolute.encode()))
            mitm_version = _mitm_version(exe)
        lat = asyncio.run(latency(targets, args.requests, args.rounds))
        rps = {t.name: asyncio.run(throughput(t, args.clients, args.seconds)) for t in targets}
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(timeout=10)

    result: dict[str, Any] = {
        "benchmark": "egress_bench",
        "params": {
            "requests": args.requests,
            "rounds": args.rounds,
            "clients": args.clients,
            "seconds": args.seconds,
            "proxy_backend": args.backend,
        },
        "python": platform.python_version(),
        "mitmproxy": mitm_version,
        "latency_ms": lat,
        "added_ms": {name: ms - lat["direct"] for name, ms in lat.items() if name != "direct"},
        "requests_per_s": rps,
        "goal_added_ms": 0.5,
        "goal_throughput_ratio": 3.0,
    }
    result["goal_added_met"] = result["added_ms"]["litmus"] < 0.5
    if "mitmproxy" in rps:
        result["throughput_ratio_vs_mitmproxy"] = rps["litmus"] / rps["mitmproxy"]
        result["goal_throughput_met"] = result["throughput_ratio_vs_mitmproxy"] >= 3.0
    out = Path(__file__).parent / "results" / "egress.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"latency, median of {args.requests} sequential GETs (ms):")
    for name, ms in lat.items():
        added = "" if name == "direct" else f"  (+{ms - lat['direct']:.3f} ms)"
        print(f"  {name:10s} {ms:.3f}{added}")
    print(f"throughput, {args.clients} clients x {args.seconds:g} s (requests/s):")
    for name, value in rps.items():
        print(f"  {name:10s} {value:,.0f}")
    if "throughput_ratio_vs_mitmproxy" in result:
        print(f"litmus / mitmproxy throughput: {result['throughput_ratio_vs_mitmproxy']:.1f}x")
    else:
        print("mitmdump not found: no comparison (pass --mitmdump PATH)")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
