"""Strict egress mode: a subprocess whose only way out is the recording proxy.

Theory of operation
-------------------
A tool that ignores proxy variables (``httpx(trust_env=False)``, Node's ``fetch``,
``curl --noproxy '*'``) bypasses a proxy it is merely told about. Strict mode closes that
gap with an empty network namespace::

    unshare -n -p --fork --kill-child -- python -P _netns.py bridge --socket S --port P -- CMD...

Inside the namespace there is only ``lo``. The bridge (this file, run as a script so it
imports nothing but the standard library and anyio) then

1. brings ``lo`` up and adds ``local 0.0.0.0/0`` (and ``::/0``) routes on it, so a
   connection to *any* address is delivered locally instead of failing with "network
   unreachable" before a packet exists;
2. listens on ``127.0.0.1:P`` (the proxy variables point there) and hands the listening
   socket itself to the proxy over its Unix socket ``S`` (``SCM_RIGHTS``: the filesystem
   is shared, the network is not). The proxy accepts the tool's connections in this
   namespace as its own TCP connections, so an upstream that refuses or resets resets
   the tool's connection, as in ``proxy-env`` mode; it stops accepting when the bridge
   closes that Unix connection;
3. watches ``lo`` with a packet socket: a TCP SYN answered by a reset (nothing listens in
   the namespace) or a UDP datagram answered by "port unreachable" is a destination the
   tool tried to reach directly. Each is reported to the proxy (``POST /.litmus/blocked``
   over ``S``), which records it as an egress event with decision ``blocked`` (the queried
   name too, for DNS). Connections that reach a listener inside the namespace (a server
   the tool started itself) are local, not egress, and are not reported;
4. runs CMD with the proxy variables and waits for it; once its reports are sent, it
   exits with CMD's status, and as PID 1 of its own PID namespace its end (or unshare's,
   through ``--kill-child``) ends every process the tool left behind. Under a supervisor
   (``_runtime/_supervisor.py --wrapped``, which gives it a pipe, named by
   ``TOOL_EXIT_FD``) it writes CMD's status there instead, and stays, still reporting and
   the proxy still accepting, until what the tool left running has ended, as it would
   without strict mode (the supervisor kills it when the episode ends).

Limits: Unix sockets are filesystem objects, so a tool can still reach any Unix socket it
has permission for (a container runtime's, a resolver's); a mount namespace would close
that. The catch-all sees TCP and UDP over IPv4 and IPv6 without extension headers.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import suppress
from typing import Any, NamedTuple, TypeVar

import anyio

#: The bridge's port inside the namespace (any port is free in an empty namespace).
DEFAULT_BRIDGE_PORT = 3128
#: Exit status and stderr marker of a bridge that could not set the namespace up.
SETUP_FAILED = 125
MARKER = "litmus-sandbox strict mode:"
SETUP_MARKER = f"{MARKER} setup failed:"
#: Origin-form path of the bridge's reports to the proxy (never valid in forward-proxy
#: traffic); the proxy imports it from here, as this file imports nothing of the package.
REPORT_PATH = "/.litmus/blocked"
#: The byte that opens the bridge's hand-over of its listening socket to the proxy (with
#: the socket as ``SCM_RIGHTS``), and the proxy's answer once it accepts on it. A report
#: starts with ``POST``, so the proxy tells the two apart by the first byte.
HANDOFF = b"\0"
#: Where a supervisor (``_runtime/_supervisor.py --wrapped``, which names it too) gives the
#: bridge a pipe for the tool's exit status.
TOOL_EXIT_FD = "LITMUS_SANDBOX_TOOL_EXIT_FD"

T = TypeVar("T")

_ETH_P_ALL = 0x0003
_PACKET_OUTGOING = 4
_TCP_SYN, _TCP_RST, _TCP_ACK = 0x02, 0x04, 0x10


# ---------------------------------------------------------------- pure packet logic


class Packet(NamedTuple):
    """The fields of an IP packet the catch-all needs."""

    proto: int  # 6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6
    src: str
    dst: str
    sport: int
    dport: int
    flags: int  # TCP flags; ICMP type << 8 | code
    payload: bytes  # UDP payload, or the packet quoted by an ICMP error


class Attempt(NamedTuple):
    """A destination a tool tried to reach without the proxy."""

    proto: str  # "tcp", "udp" or "dns"
    host: str
    port: int
    name: str | None = None  # the queried name of a DNS attempt


def parse_packet(data: bytes) -> Packet | None:
    """Parse an IPv4 or IPv6 packet (no link header) into a :class:`Packet`; None if not TCP,
    UDP or ICMP, or truncated."""
    if not data:
        return None
    version = data[0] >> 4
    if version == 4:
        if len(data) < 20:
            return None
        ihl = (data[0] & 0x0F) * 4
        proto = data[9]
        src, dst = (
            socket.inet_ntop(socket.AF_INET, data[12:16]),
            socket.inet_ntop(socket.AF_INET, data[16:20]),
        )
        body = data[ihl:]
    elif version == 6:
        if len(data) < 40:
            return None
        proto = data[6]
        src = socket.inet_ntop(socket.AF_INET6, data[8:24])
        dst = socket.inet_ntop(socket.AF_INET6, data[24:40])
        body = data[40:]
    else:
        return None
    if proto == 6 and len(body) >= 14:
        sport, dport = int.from_bytes(body[0:2], "big"), int.from_bytes(body[2:4], "big")
        return Packet(proto, src, dst, sport, dport, body[13], b"")
    if proto == 17 and len(body) >= 8:
        sport, dport = int.from_bytes(body[0:2], "big"), int.from_bytes(body[2:4], "big")
        return Packet(proto, src, dst, sport, dport, 0, body[8:])
    if proto in (1, 58) and len(body) >= 8:
        return Packet(proto, src, dst, 0, 0, body[0] << 8 | body[1], body[8:])
    return None


def dns_query_name(payload: bytes) -> str | None:
    """The first question's name of a DNS query message, or None."""
    pos, labels = 12, []
    try:
        while True:
            size = payload[pos]
            if size == 0:
                break
            if size & 0xC0:  # compression pointers do not occur in a query's first name
                return None
            labels.append(payload[pos + 1 : pos + 1 + size].decode("ascii"))
            pos += 1 + size
    except (IndexError, UnicodeDecodeError):
        return None
    return ".".join(labels) or None


class BlockedTracker:
    """Turns packets seen on ``lo`` into :class:`Attempt` records (no I/O).

    TCP: a SYN later answered by a reset from the destination (nothing listened there).
    UDP: a datagram answered by ICMP port unreachable (the error quotes the datagram, so
    the destination and, for DNS, the queried name come from the quote). Each attempt is
    reported once per source port (DNS: once per queried name), so retransmissions and
    resolver retries do not repeat.
    """

    def __init__(self, limit: int = 4096) -> None:
        self._syns: OrderedDict[tuple[str, int, str, int], None] = OrderedDict()
        self._seen: set[tuple[str, str, int, int, str | None]] = set()
        self._limit = limit

    def feed(self, packet: Packet) -> Attempt | None:
        if packet.proto == 6:
            key = (packet.src, packet.sport, packet.dst, packet.dport)
            if packet.flags & _TCP_SYN and not packet.flags & _TCP_ACK:
                self._syns[key] = None
                if len(self._syns) > self._limit:
                    self._syns.popitem(last=False)
                return None
            back = (packet.dst, packet.dport, packet.src, packet.sport)
            if back not in self._syns:
                return None
            if packet.flags & _TCP_RST:
                del self._syns[back]
                return self._once("tcp", packet.src, packet.sport, packet.dport, None)
            if packet.flags & _TCP_SYN:  # SYN-ACK: something listens here, it is local
                del self._syns[back]
            return None
        if packet.proto == 1 and packet.flags == (3 << 8 | 3):  # ICMP port unreachable
            return self._quoted(packet.payload)
        if packet.proto == 58 and packet.flags == (1 << 8 | 4):  # ICMPv6 port unreachable
            return self._quoted(packet.payload)
        return None

    def _quoted(self, quote: bytes) -> Attempt | None:
        inner = parse_packet(quote)
        if inner is None or inner.proto != 17:
            return None
        name = dns_query_name(inner.payload) if inner.dport == 53 else None
        proto = "dns" if name is not None else "udp"
        return self._once(proto, inner.dst, inner.dport, inner.sport, name)

    def _once(
        self, proto: str, host: str, port: int, sport: int, name: str | None
    ) -> Attempt | None:
        # A resolver asks again from new sockets (and for A and AAAA): one record per name.
        key = (proto, host, port, -1 if name is not None else sport, name)
        if key in self._seen:
            return None
        self._seen.add(key)
        return Attempt(proto, host, port, name)


# ---------------------------------------------------------------- inside the namespace


class _SetupError(Exception):
    pass


def _setup_network(ip: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ip, *args], capture_output=True, text=True, check=False)

    for args in (("link", "set", "lo", "up"), ("route", "add", "local", "0.0.0.0/0", "dev", "lo")):
        done = run(*args)
        if done.returncode != 0:
            raise _SetupError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    run("-6", "route", "add", "local", "::/0", "dev", "lo")  # best effort: IPv6 may be off


def _open_sniffer() -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(_ETH_P_ALL))
    sock.bind(("lo", 0))
    sock.setblocking(False)
    return sock


def _drain(sock: socket.socket) -> Iterator[bytes]:
    while True:
        try:
            data, addr = sock.recvfrom(65535)
        except BlockingIOError:
            return
        # Every packet on lo is seen twice (sent, then received): keep one copy.
        if addr[2] == _PACKET_OUTGOING:
            yield data


async def _sniff(
    sock: socket.socket, tracker: BlockedTracker, found: Callable[[Attempt], None]
) -> None:
    while True:
        await anyio.wait_readable(sock)
        _feed(sock, tracker, found)


def _feed(sock: socket.socket, tracker: BlockedTracker, found: Callable[[Attempt], None]) -> None:
    for data in _drain(sock):
        packet = parse_packet(data)
        attempt = tracker.feed(packet) if packet is not None else None
        if attempt is not None:
            found(attempt)


async def _report(socket_path: str, attempt: Attempt) -> None:
    body = json.dumps(attempt._asdict()).encode()
    head = f"POST {REPORT_PATH} HTTP/1.1\r\nHost: litmus\r\nContent-Length: {len(body)}\r\n\r\n"
    try:
        with anyio.fail_after(5):
            async with await anyio.connect_unix(socket_path) as stream:
                await stream.send(head.encode() + body)
                with suppress(anyio.EndOfStream):
                    while True:  # the proxy answers 204 and closes once it has recorded it
                        await stream.receive()
    except (OSError, TimeoutError, anyio.BrokenResourceError) as exc:
        print(f"{MARKER} could not report {attempt}: {exc}", file=sys.stderr)


def _hand_over(socket_path: str, port: int) -> socket.socket:
    """Listen on ``127.0.0.1:port`` and give the listening socket to the proxy at
    ``socket_path``; the Unix connection it went over, which the proxy accepts on the
    listener for as long as it stays open.

    Raises:
        _SetupError: the proxy cannot be reached, or did not take the socket.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(socket.SOMAXCONN)
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            channel.settimeout(10)
            channel.connect(socket_path)
            socket.send_fds(channel, [HANDOFF], [listener.fileno()])
            answer = channel.recv(1)
        except OSError as exc:
            channel.close()
            raise _SetupError(f"proxy socket {socket_path}: {exc}") from None
    if answer != HANDOFF:
        channel.close()
        raise _SetupError(f"the proxy at {socket_path} did not take the bridge's listener")
    channel.setblocking(False)
    return channel


def _quiet_wakeup_race() -> None:
    """Drop asyncio's report of a reader callback firing on an already-cancelled wait.

    When the sniffer's ``wait_readable`` is cancelled at the moment its socket turns
    readable, asyncio logs ``InvalidStateError`` from ``Future.set_result``. It is harmless,
    but this process's stderr is the tool's stderr, which the agent is shown.
    """
    import asyncio

    loop = asyncio.get_running_loop()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), asyncio.InvalidStateError):
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


async def _bridge(
    socket_path: str, channel: socket.socket, cmd: list[str], catch_all: bool, exit_fd: int | None
) -> int:
    _quiet_wakeup_race()
    sniffer: socket.socket | None = None
    if catch_all:
        try:
            sniffer = _open_sniffer()
        except OSError as exc:
            print(
                f"{MARKER} catch-all unavailable ({exc}); direct attempts are blocked but not recorded",
                file=sys.stderr,
            )
    tracker = BlockedTracker()
    returncode = await _watching(sniffer, tracker, socket_path, functools.partial(_run, cmd))
    if exit_fd is not None:
        # The tool has exited and its attempts are told: its supervisor ends the call. What
        # it left running runs on in this namespace, still watched, until it ends (or the
        # supervisor kills it when the episode ends).
        with suppress(OSError):
            os.write(exit_fd, f"{returncode}\n".encode())
        os.close(exit_fd)
        if _left_running():
            await _watching(
                sniffer,
                tracker,
                socket_path,
                functools.partial(anyio.to_thread.run_sync, _reap_all),
            )
    channel.close()  # the proxy stops accepting in this namespace
    if sniffer is not None:
        sniffer.close()
    return returncode


async def _run(cmd: list[str]) -> int:
    """Run the tool; its exit status (128 + N when signal N ended it)."""
    try:
        process = await anyio.open_process(cmd, stdin=None, stdout=None, stderr=None)
    except OSError as exc:
        print(f"litmus-sandbox: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
        return 127
    status = await process.wait()
    return status if status >= 0 else 128 - status


def _left_running() -> bool:
    """Whether any process is still running in this PID namespace (those that have ended
    are reaped)."""
    try:
        while True:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return True
    except ChildProcessError:
        return False


def _reap_all() -> None:
    """Wait for every process of this PID namespace, whose init this is (what the tool
    left running comes back here when its parent exits)."""
    with suppress(ChildProcessError):
        while True:
            os.waitpid(-1, 0)


async def _watching(
    sniffer: socket.socket | None,
    tracker: BlockedTracker,
    socket_path: str,
    until: Callable[[], Awaitable[T]],
) -> T:
    """Report what the catch-all sees until ``until()`` returns; its result, once every
    attempt seen so far is reported."""
    async with anyio.create_task_group() as reports:

        def found(attempt: Attempt) -> None:
            reports.start_soon(_report, socket_path, attempt)

        async with anyio.create_task_group() as tg:
            if sniffer is not None:
                tg.start_soon(_sniff, sniffer, tracker, found)
            result = await until()
            tg.cancel_scope.cancel()
        if sniffer is not None:
            # The kernel answered every attempt before the process could exit: what is
            # queued now is complete.
            _feed(sniffer, tracker, found)
        reports.cancel_scope.deadline = anyio.current_time() + 10
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``bridge`` (run a command behind the proxy) or ``check`` (can this namespace be set up?)."""
    parser = argparse.ArgumentParser(prog="_netns.py", description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    check = sub.add_parser("check")
    check.add_argument("--ip", required=True)
    bridge = sub.add_parser("bridge")
    bridge.add_argument("--socket", required=True)
    bridge.add_argument("--port", type=int, default=DEFAULT_BRIDGE_PORT)
    bridge.add_argument("--ip", required=True)
    bridge.add_argument("--no-catch-all", dest="catch_all", action="store_false")
    bridge.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        _setup_network(args.ip)
        channel = _hand_over(args.socket, args.port) if args.mode == "bridge" else None
    except _SetupError as exc:
        print(f"{SETUP_MARKER} {exc}", file=sys.stderr)
        return SETUP_FAILED
    if channel is None:
        try:
            _open_sniffer().close()
        except OSError as exc:
            print(f"strict mode available; catch-all unavailable: {exc}")
        else:
            print("strict mode available, with the catch-all")
        return 0
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        channel.close()
        print(f"{SETUP_MARKER} no command given", file=sys.stderr)
        return SETUP_FAILED
    exit_fd = _tool_exit_fd()
    return anyio.run(_bridge, args.socket, channel, cmd, args.catch_all, exit_fd)


def _tool_exit_fd() -> int | None:
    """The pipe a supervisor gave for the tool's exit status (``_runtime/_supervisor.py
    --wrapped``), kept from the tool; None when run on its own (``run_strict``)."""
    value = os.environ.pop(TOOL_EXIT_FD, "")
    if not value.isdigit():
        return None
    fd = int(value)
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return None
    return fd


if __name__ == "__main__":
    sys.exit(main())
