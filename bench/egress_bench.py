"""Cost of the egress forward proxy, against direct loopback, an h11 floor and mitmproxy.

    python bench/egress_bench.py [--requests 2000] [--clients 8] [--seconds 3]
                                 [--throughput-rounds 3] [--backend asyncio|trio]
                                 [--mitmdump PATH] [--baseline [NAME=]TREE ...]

Child processes serve the same workload: a minimal keep-alive HTTP server (asyncio,
fixed 2-byte answer); our :class:`ForwardProxy` recording into an :class:`EgressProbe`;
the **h11 floor**, a relay written here (h11 parses the request, frames it upstream,
parses the response and frames it back: the events the proxy itself handles, with no
policy, no recording, no checks, all from asyncio's protocol callbacks, with no task),
which tells how much of our cost is h11 itself; ``mitmdump --mode regular`` (when found: ``--mitmdump``,
``.venv/bin/mitmdump`` or PATH); and with ``--baseline [NAME=]TREE`` the proxy of another
source tree (a checkout of an earlier commit, imported through ``PYTHONPATH``), so that
before and after are measured in the same rounds. The client (this process, raw asyncio
streams, so it is not the bottleneck) sends small GETs over kept-alive connections:

* latency: sequential requests, interleaved in rounds across all targets so machine
  noise hits all alike; median milliseconds, and milliseconds added over direct.
  Goal: under 0.5 ms added.
* throughput: ``--clients`` concurrent connections for ``--seconds``, each target in
  turn, ``--throughput-rounds`` times; the median requests per second, and the CPU time
  the serving process spent per request (from ``/proc``: what load on the machine
  disturbs least). Goal: at least 3x mitmproxy's.

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

import h11

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


class _FloorClient(asyncio.Protocol):
    """The h11 floor, client side: what no h11-based proxy can go below. h11 parses each
    request and frames it upstream, and frames back the response :class:`_FloorUpstream`
    parses, all from the loop's callbacks (no task, no await); absolute-form GETs to one
    upstream, kept alive on both sides."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.h11 = h11.Connection(h11.SERVER)
        self.upstream: _FloorUpstream | None = None
        self.pending = b""  # what goes upstream once it is connected

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        self.process()

    def process(self) -> None:
        conn = self.h11
        out = b""
        while isinstance(event := conn.next_event(), h11.Event):  # until NEED_DATA or PAUSED
            if type(event) is h11.Request:
                authority, _, path = event.target.removeprefix(b"http://").partition(b"/")
                target = b"/" + path
                event = h11.Request(method=event.method, target=target, headers=event.headers)
                if self.upstream is None:
                    self.upstream = self.connect(authority)
            elif type(event) is h11.ConnectionClosed:
                break
            assert self.upstream is not None
            out += self.upstream.h11.send(event) or b""
        if out:
            self.upstream_write(out)

    def connect(self, authority: bytes) -> _FloorUpstream:
        host, _, port = authority.rpartition(b":")
        upstream = _FloorUpstream(self)
        loop = asyncio.get_running_loop()
        connecting = loop.create_connection(lambda: upstream, host.decode(), int(port))
        self.connecting = loop.create_task(connecting)
        return upstream

    def upstream_write(self, data: bytes) -> None:
        assert self.upstream is not None
        if self.upstream.transport is None:
            self.pending += data
        else:
            self.upstream.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


class _FloorUpstream(asyncio.Protocol):
    """The h11 floor, upstream side: parses the response and has the client side frame it."""

    def __init__(self, client: _FloorClient) -> None:
        self.client = client
        self.h11 = h11.Connection(h11.CLIENT)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.client.pending:
            transport.write(self.client.pending)
            self.client.pending = b""

    def data_received(self, data: bytes) -> None:
        conn, down = self.h11, self.client.h11
        conn.receive_data(data)
        out = b""
        while isinstance(event := conn.next_event(), h11.Event):  # until NEED_DATA or PAUSED
            out += down.send(event) or b""
        self.client.transport.write(out)
        if conn.our_state is conn.their_state is h11.DONE:
            conn.start_next_cycle()
            down.start_next_cycle()
            self.client.process()  # a request that came before this response ended


async def _run_floor() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_FloorClient, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


# ---------------------------------------------------------------- client


class Target:
    """Where requests go, and the process that serves them (whose CPU time is read)."""

    def __init__(self, name: str, port: int, request: bytes, pid: int) -> None:
        self.name, self.port, self.request, self.pid = name, port, request, pid


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` so far (None where there is no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


async def throughput(target: Target, clients: int, seconds: float) -> tuple[float, float | None]:
    """Requests per second with ``clients`` concurrent kept-alive connections, and the
    serving process's CPU microseconds per request."""
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

    cpu0 = cpu_seconds(target.pid)
    t0 = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(clients)))
    elapsed = time.perf_counter() - t0
    cpu1 = cpu_seconds(target.pid)
    for _, writer in conns:
        writer.close()
    done = sum(counts)
    cpu = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) * 1e6 / done
    return done / elapsed, cpu


# ---------------------------------------------------------------- orchestration


def _start(
    cmd: list[str], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start a child role that prints its port on its first line (ready when printed)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
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
    parser.add_argument("--throughput-rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--mitmdump", default=None, help="path to mitmdump")
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="[NAME=]TREE",
        help="also measure the proxy of this source tree (repeatable)",
    )
    parser.add_argument("--role", choices=["upstream", "proxy", "floor"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "upstream":
        asyncio.run(_run_upstream())
        return
    if args.role == "proxy":
        _run_proxy(args.backend)
        return
    if args.role == "floor":
        asyncio.run(_run_floor())
        return

    load_before = os.getloadavg()
    me = [sys.executable, os.path.abspath(__file__)]
    proxy = [*me, "--role", "proxy", "--backend", args.backend]
    children: list[subprocess.Popen[bytes]] = []

    def start(name: str, cmd: list[str], request: str, env: dict[str, str] | None = None) -> Target:
        child, port = _start(cmd, env)
        children.append(child)
        return Target(name, port, request.format(port=up_port).encode(), child.pid)

    absolute = "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    try:
        upstream, up_port = _start([*me, "--role", "upstream"])
        children.append(upstream)
        origin = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{up_port}\r\n\r\n"
        targets = [Target("direct", up_port, origin.encode(), upstream.pid)]
        for i, given in enumerate(args.baseline):
            name, _, tree = given.rpartition("=")
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            targets.append(start(name or f"baseline{i or ''}", proxy, absolute, env))
        targets.append(start("litmus", proxy, absolute))
        targets.append(start("h11 floor", [*me, "--role", "floor"], absolute))
        exe = _find_mitmdump(args.mitmdump)
        mitm_version = None
        if exe is not None:
            mitm, mitm_port = _start_mitmdump(exe)
            children.append(mitm)
            targets.append(
                Target("mitmproxy", mitm_port, absolute.format(port=up_port).encode(), mitm.pid)
            )
            mitm_version = _mitm_version(exe)
        lat = asyncio.run(latency(targets, args.requests, args.rounds))
        runs: dict[str, list[tuple[float, float | None]]] = {t.name: [] for t in targets}
        for _ in range(args.throughput_rounds):  # alternated, like the latency rounds
            for t in targets:
                runs[t.name].append(asyncio.run(throughput(t, args.clients, args.seconds)))
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(timeout=10)

    rps = {name: statistics.median(r for r, _ in got) for name, got in runs.items()}
    cpu = {
        name: statistics.median(c for _, c in got if c is not None)
        for name, got in runs.items()
        if all(c is not None for _, c in got)
    }
    result: dict[str, Any] = {
        "benchmark": "egress_bench",
        "params": {
            "requests": args.requests,
            "rounds": args.rounds,
            "clients": args.clients,
            "seconds": args.seconds,
            "throughput_rounds": args.throughput_rounds,
            "proxy_backend": args.backend,
            "baseline": args.baseline,
        },
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_averages_at_start": list(load_before),
        "load_averages_at_end": list(os.getloadavg()),
        "mitmproxy": mitm_version,
        "latency_ms": lat,
        "added_ms": {name: ms - lat["direct"] for name, ms in lat.items() if name != "direct"},
        "requests_per_s": rps,
        "requests_per_s_rounds": {name: [r for r, _ in got] for name, got in runs.items()},
        "cpu_us_per_request": cpu,
        "goal_added_ms": 0.5,
        "goal_throughput_ratio": 3.0,
    }
    result["goal_added_met"] = result["added_ms"]["litmus"] < 0.5
    if "mitmproxy" in rps:
        result["throughput_ratio_vs_mitmproxy"] = rps["litmus"] / rps["mitmproxy"]
        result["goal_throughput_met"] = result["throughput_ratio_vs_mitmproxy"] >= 3.0
    # Same-run ratios against each baseline tree (after / before).
    result["vs_baseline"] = {
        name: {
            "added_ms_ratio": result["added_ms"]["litmus"] / result["added_ms"][name],
            "requests_per_s_ratio": rps["litmus"] / rps[name],
            "cpu_us_per_request_ratio": (
                cpu["litmus"] / cpu[name] if "litmus" in cpu and name in cpu else None
            ),
        }
        for name in (t.name for t in targets[1 : 1 + len(args.baseline)])
    }
    out = Path(__file__).parent / "results" / "egress.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"latency, median of {args.requests} sequential GETs (ms):")
    for name, ms in lat.items():
        added = "" if name == "direct" else f"  (+{ms - lat['direct']:.3f} ms)"
        print(f"  {name:10s} {ms:.3f}{added}")
    print(
        f"throughput, {args.clients} clients x {args.seconds:g} s, median of "
        f"{args.throughput_rounds} (requests/s; CPU of the serving process per request):"
    )
    for name, value in rps.items():
        each = ", ".join(f"{r:,.0f}" for r, _ in runs[name])
        used = f"  {cpu[name]:5.0f} us/req" if name in cpu else ""
        print(f"  {name:10s} {value:7,.0f}{used}  ({each})")
    if "throughput_ratio_vs_mitmproxy" in result:
        print(f"litmus / mitmproxy throughput: {result['throughput_ratio_vs_mitmproxy']:.1f}x")
    else:
        print("mitmdump not found: no comparison (pass --mitmdump PATH)")
    for name, ratio in result["vs_baseline"].items():
        each = ratio["cpu_us_per_request_ratio"]
        print(
            f"litmus / {name}: added latency {ratio['added_ms_ratio']:.2f}x, throughput "
            f"{ratio['requests_per_s_ratio']:.2f}x"
            + (f", CPU per request {each:.2f}x" if each is not None else "")
        )
    load = result["load_averages_at_start"][0], result["load_averages_at_end"][0]
    print(f"load average {load[0]:.2f} at the start, {load[1]:.2f} at the end")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
