"""The egress oracle: policy, in-process transports, the forward proxy and strict mode.

Every server here is started by the test on a loopback address and stops with it; no
traffic leaves the machine (denied hosts are refused before any connection).
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import trustme
from anyio.abc import ByteStream, SocketAttribute, TaskStatus
from anyio.streams.buffered import BufferedByteStream
from anyio.streams.tls import TLSListener, TLSStream

from litmus_sandbox import ConfigError, Effects, EgressEvent, UpstreamError
from litmus_sandbox.oracles._probe import Probe
from litmus_sandbox.oracles.egress import (
    EgressFlow,
    EgressPolicy,
    EgressProbe,
    EgressRule,
    EgressTransport,
    ForwardProxy,
    SyncEgressTransport,
    calling,
    denied_body,
    parse_sni,
    proxy_env,
    run_strict,
    strict_available,
)
from litmus_sandbox.oracles.egress import _http_wire as wire
from litmus_sandbox.oracles.egress import _netns as _netns

pytestmark = pytest.mark.anyio

STRICT, STRICT_WHY = strict_available()
needs_strict = pytest.mark.skipif(
    not STRICT, reason=f"strict egress mode unavailable: {STRICT_WHY}"
)


# ---------------------------------------------------------------- helpers


Responder = Callable[[BufferedByteStream], Awaitable[None]]


class Server:
    """A loopback HTTP/1.1 server (keep-alive, Content-Length and chunked request bodies)
    that records every connection, request and head it sees. ``routes`` maps a path to a
    responder that writes its own response and ends the connection."""

    def __init__(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.tls = tls
        self.port = 0
        self.connections = 0
        self.requests: list[tuple[str, str, bytes]] = []
        self.heads: list[dict[str, str]] = []  # the header fields of each request
        self.routes: dict[str, Responder] = {}

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        tcp = await anyio.create_tcp_listener(local_host=self.host)
        self.port = int(tcp.extra(SocketAttribute.local_port))
        listener: Any = TLSListener(tcp, self.tls, standard_compatible=False) if self.tls else tcp
        async with listener:
            task_status.started(self.port)
            await listener.serve(self._handle)

    async def _handle(self, stream: ByteStream) -> None:
        self.connections += 1
        async with stream:
            buf = BufferedByteStream(stream)
            while True:
                try:
                    head = await buf.receive_until(b"\r\n\r\n", 65536)
                except (anyio.IncompleteRead, anyio.BrokenResourceError, ssl.SSLError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ")
                headers = {
                    k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])
                }
                body = await _read_body(buf, headers)
                self.requests.append((method, target, body))
                self.heads.append(headers)
                route = self.routes.get(target)
                if route is not None:
                    await route(buf)
                    return
                reply = b"hello " + target.encode() + b" " + body
                await buf.send(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(reply), b"" if method == "HEAD" else reply)
                )


async def _read_body(buf: BufferedByteStream, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await buf.receive_until(b"\r\n", 100)).split(b";")[0], 16)
            if size == 0:
                await buf.receive_until(b"\r\n", 100)
                return body
            body += await buf.receive_exactly(size)
            await buf.receive_exactly(2)
    return await buf.receive_exactly(int(headers.get("content-length", "0")))


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[Server]:
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        yield server
        tg.cancel_scope.cancel()


class Log:
    """A sink that keeps flows and lets a test wait until they have all closed."""

    def __init__(self) -> None:
        self.flows: list[EgressFlow] = []
        self._changed: anyio.Event | None = None

    def __call__(self, flow: EgressFlow) -> None:
        if not flow.done:
            self.flows.append(flow)
        if self._changed is not None:
            self._changed.set()

    async def settled(self, count: int) -> list[EgressFlow]:
        """Wait until ``count`` flows have opened and all are closed (proxy tasks see a
        client's close a little after the client exits)."""
        with anyio.fail_after(5):
            while not (len(self.flows) >= count and all(f.done for f in self.flows)):
                self._changed = anyio.Event()
                await self._changed.wait()
        return self.flows


async def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` to a loopback port as is; what comes back until the peer closes."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(data)
        out = b""
        with suppress(anyio.EndOfStream):
            while True:
                out += await stream.receive()
    return out


def free_port() -> int:
    """A loopback port with nothing listening (for connection-refused cases)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def curl(*args: str, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    full = {**os.environ, **(env or {})}
    done = await anyio.run_process(
        ["curl", "-sS", "--max-time", "10", *args], env=full, check=False
    )
    return done.returncode, done.stdout, done.stderr


# ---------------------------------------------------------------- policy


def test_policy_precedence_exact_port_then_exact_then_glob_then_default() -> None:
    policy = EgressPolicy(
        {
            "api.example.com:8443": "deny",
            "api.example.com": "allow",
            "*.example.com": "stub",
            "*.internal:5432": "allow",
        },
        default="deny",
    )
    assert policy.decide("api.example.com", 8443).mode == "deny"
    assert policy.decide("API.Example.COM.", 443).mode == "allow"
    assert policy.decide("www.example.com", 80).mode == "stub"
    assert policy.decide("example.com", 80).mode == "deny"  # a glob needs its dot
    assert policy.decide("db.internal", 5432).mode == "allow"
    assert policy.decide("db.internal", 5433).mode == "deny"


def test_policy_from_mapping_reads_the_egress_table() -> None:
    policy = EgressPolicy.from_mapping(
        {
            "default": "deny",
            "*.example.com": "allow",
            "api.stub.test": {"mode": "stub", "status": 201, "body": "{}"},
            "[::1]:8080": "allow",
        }
    )
    stub = policy.decide("api.stub.test", 443)
    assert (stub.mode, stub.status, stub.body) == ("stub", 201, "{}")
    assert policy.decide("::1", 8080).mode == "allow"
    assert policy.decide("other.test", 80).mode == "deny"
    assert policy.describe()["default"] == "deny"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"h.test": {"mode": "stub", "stauts": 200}}, "stauts"),
        ({"h.test": "block"}, "unknown egress mode"),
        ({"default": "stub"}, "default must be"),
        ({"defualt": "deny"}, "did you mean 'default'"),
        ({"h.test:99999": "allow"}, "port must be"),
        ({"h.test": {"mode": "stub", "status": 99}}, "between 100 and 599"),
        ({"h test": "allow"}, "not a host"),
        ({"h.test": 3}, "expected a mode or a table"),
    ],
)
def test_policy_rejects_bad_tables(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EgressPolicy.from_mapping(table, source="policy.toml")


def test_default_is_not_a_host_rule() -> None:
    with pytest.raises(ConfigError, match="default="):
        EgressPolicy({"default": "deny"})


def test_egress_probe_satisfies_the_probe_protocol() -> None:
    probe: Probe = EgressProbe()  # checked by mypy
    assert probe.name == "egress"
    assert EgressProbe(EgressPolicy({}, default="deny")).describe() == {
        "policy": {"default": "deny", "rules": {}}
    }


def test_the_header_says_a_stubs_response_only_on_a_stub() -> None:
    """A deny answers 403: the header never lists it with the 200 a rule defaults to."""
    policy = EgressPolicy.from_mapping(
        {
            "default": "allow",
            "127.0.0.3": "deny",
            "api.test": {"mode": "stub", "status": 201, "body": "ok"},
        },
        source="policy.toml",
    )
    assert policy.describe()["rules"] == {
        "127.0.0.3": {"mode": "deny"},
        "api.test": {"mode": "stub", "status": 201, "headers": {}, "body": "ok"},
    }


# ---------------------------------------------------------------- SNI parser


def _client_hello(name: str | None, *, extra_ext: bytes = b"") -> bytes:
    """A handcrafted TLS 1.2-style ClientHello handshake message (no record header)."""
    exts = extra_ext
    if name is not None:
        entry = b"\x00" + struct.pack("!H", len(name)) + name.encode()
        sni = struct.pack("!H", len(entry)) + entry
        exts += struct.pack("!HH", 0, len(sni)) + sni
    body = b"\x03\x03" + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    body += struct.pack("!H", len(exts)) + exts
    return b"\x01" + len(body).to_bytes(3, "big") + body


def _records(handshake: bytes, *sizes: int) -> bytes:
    out, pos = b"", 0
    for size in (*sizes, len(handshake)):
        part = handshake[pos : pos + size]
        if part:
            out += b"\x16\x03\x01" + struct.pack("!H", len(part)) + part
        pos += size
    return out


def test_sni_from_a_handcrafted_client_hello() -> None:
    hello = _records(_client_hello("API.Example.test", extra_ext=b"\x00\x0a\x00\x02\x00\x00"))
    assert parse_sni(hello) == wire.TLSHello(True, True, "api.example.test")


def test_sni_reassembles_a_hello_split_across_records() -> None:
    hello = _records(_client_hello("split.example.test"), 7, 20)
    assert parse_sni(hello).server_name == "split.example.test"


def test_sni_prefixes_ask_for_more_and_other_protocols_are_not_tls() -> None:
    hello = _records(_client_hello("x.test"))
    for cut in range(len(hello)):
        assert not parse_sni(hello[:cut]).complete, cut
    assert parse_sni(b"GET / HTTP/1.1\r\n") == wire.TLSHello(True, False, None)
    assert parse_sni(b"SSH-2.0-OpenSSH\r\n").tls is False
    assert parse_sni(_records(_client_hello(None))) == wire.TLSHello(True, True, None)
    garbage = b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\xff"
    assert parse_sni(garbage) == wire.TLSHello(True, True, None)


def _real_hello(server_hostname: str | None) -> bytes:
    """The first flight of a real ``ssl`` client handshake, captured with a MemoryBIO."""
    ctx = ssl.create_default_context()
    if server_hostname is None:
        ctx.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_sni_from_a_real_ssl_handshake() -> None:
    hello = _real_hello("service.litmus.test")
    assert parse_sni(hello) == wire.TLSHello(True, True, "service.litmus.test")
    assert not parse_sni(hello[: len(hello) // 2]).complete
    assert parse_sni(_real_hello(None)) == wire.TLSHello(True, True, None)


# ---------------------------------------------------------------- HTTP parsing


@pytest.mark.parametrize(
    "head",
    [
        b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost : a\r\n\r\n",
        b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n",
        b"POST http://127.0.0.1:%d/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST http://127.0.0.1:%d/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
        b"Content-Length: 4\r\n\r\nabcd",
    ],
    ids=["space-before-colon", "obs-fold", "length-and-chunked", "two-lengths"],
)
async def test_proxy_refuses_smuggling_vectors(head: bytes) -> None:
    """Heads two parsers could read differently are answered 400, and nothing goes upstream."""
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, Log()) as proxy:
            out = await exchange(proxy.port, head % srv.port)
    assert out.startswith(b"HTTP/1.1 400 "), out
    assert b"Connection: close\r\n" in out
    assert srv.connections == 0


async def test_proxy_frames_responses_as_rfc9112_says() -> None:
    """Content-Length, HEAD, 204 and chunked responses reach the client whole, counted as
    payload; a transfer coding h11 cannot frame is the upstream's fault (502)."""

    def answer(raw: bytes) -> Responder:
        async def respond(buf: BufferedByteStream) -> None:
            await buf.send(raw)

        return respond

    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, log) as proxy:
            srv.routes["/empty"] = answer(b"HTTP/1.1 204 No Content\r\n\r\n")
            srv.routes["/chunked"] = answer(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"3\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n"
            )
            srv.routes["/gzip"] = answer(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"
            )
            base = f"http://127.0.0.1:{srv.port}"
            async with httpx.AsyncClient(proxy=proxy.url) as client:
                plain = await client.get(f"{base}/plain")
                head = await client.head(f"{base}/plain")
                empty = await client.get(f"{base}/empty")
                chunked = await client.get(f"{base}/chunked")
                gzip = await client.get(f"{base}/gzip")
            flows = await log.settled(5)
    assert (plain.status_code, plain.content) == (200, b"hello /plain ")
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == str(len(b"hello /plain "))
    assert (empty.status_code, empty.content) == (204, b"")
    assert (chunked.status_code, chunked.content) == (200, b"abcde")
    assert chunked.headers["transfer-encoding"] == "chunked"
    assert gzip.status_code == 502
    assert b"malformed upstream response" in gzip.content
    assert [(f.method, f.status, f.response_bytes) for f in flows] == [
        ("GET", 200, len(b"hello /plain ")),
        ("HEAD", 200, 0),
        ("GET", 204, 0),
        ("GET", 200, 5),
        ("GET", 502, 0),
    ]


async def test_proxy_supplies_the_host_a_client_left_out() -> None:
    """h11 refuses an HTTP/1.1 request without Host; the proxy takes the target's authority."""
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, Log()) as proxy:
            request = b"GET http://127.0.0.1:%d/nohost HTTP/1.1\r\nConnection: close\r\n\r\n"
            out = await exchange(proxy.port, request % srv.port)
    assert out.startswith(b"HTTP/1.1 200 ")
    assert out.endswith(b"hello /nohost ")
    assert srv.heads[0]["host"] == f"127.0.0.1:{srv.port}"
    assert "connection" not in srv.heads[0]  # hop by hop: the proxy's own business


async def test_proxy_answers_431_to_a_head_too_large() -> None:
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, Log()) as proxy:
            head = b"GET http://127.0.0.1:%d/ HTTP/1.1\r\nX: " % srv.port + b"a" * 70_000
            out = await exchange(proxy.port, head + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431 ")
    assert out.endswith(b"request head too large\n")
    assert srv.connections == 0


async def test_proxy_relays_expect_100_continue() -> None:
    """A client waiting for 100 Continue gets it from the proxy; the server sees no Expect."""
    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, log) as proxy:
            async with await anyio.connect_tcp("127.0.0.1", proxy.port) as raw:
                stream = BufferedByteStream(raw)
                await stream.send(
                    b"POST http://127.0.0.1:%d/up HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                    b"Expect: 100-continue\r\n\r\n" % srv.port
                )
                interim = await stream.receive_until(b"\r\n\r\n", 1024)
                await stream.send(b"abc")
                final = await stream.receive_until(b"\r\n\r\n", 1024)
            [flow] = await log.settled(1)
    assert interim == b"HTTP/1.1 100 Continue"
    assert final.startswith(b"HTTP/1.1 200 ")
    assert srv.requests == [("POST", "/up", b"abc")]
    assert "expect" not in srv.heads[0]
    assert (flow.request_bytes, flow.status) == (3, 200)


async def test_proxy_retries_a_kept_alive_upstream_that_closed() -> None:
    """A server that closes a kept-alive connection without saying so: the next request
    (no body) is sent again on a fresh connection, once."""

    async def then_close(buf: BufferedByteStream) -> None:
        await buf.send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nonce")

    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, log) as proxy:
            srv.routes["/once"] = then_close
            async with httpx.AsyncClient(proxy=proxy.url) as client:
                first = await client.get(f"http://127.0.0.1:{srv.port}/once")
                second = await client.get(f"http://127.0.0.1:{srv.port}/again")
            await log.settled(2)
    assert (first.text, second.text) == ("once", "hello /again ")
    assert srv.connections == 2


async def test_proxy_does_not_relay_protocol_switches() -> None:
    """Upgrade is hop by hop and not forwarded, so a 101 cannot be relayed: 502."""

    async def switch(buf: BufferedByteStream) -> None:
        await buf.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")

    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, log) as proxy:
            srv.routes["/ws"] = switch
            async with httpx.AsyncClient(proxy=proxy.url) as client:
                r = await client.get(
                    f"http://127.0.0.1:{srv.port}/ws",
                    headers={"Connection": "Upgrade", "Upgrade": "websocket"},
                )
            [flow] = await log.settled(1)
    assert r.status_code == 502
    assert b"protocol upgrades are not relayed" in r.content
    assert "upgrade" not in srv.heads[0]
    assert flow.status == 502


def test_targets_and_authorities() -> None:
    assert wire.split_target("http://Example.COM/a?b=1") == ("example.com", 80, "/a?b=1")
    assert wire.split_target("http://[::1]:8080") == ("::1", 8080, "/")
    assert wire.split_authority("[::1]:443") == ("::1", 443)
    with pytest.raises(wire.BadMessage):
        wire.split_target("https://example.com/")
    with pytest.raises(wire.BadMessage):
        wire.split_authority("example.com")


def test_proxy_env_covers_standard_and_tool_specific_variables() -> None:
    env = proxy_env("127.0.0.1", 3128)
    for name in ("HTTP_PROXY", "https_proxy", "ALL_PROXY", "npm_config_https_proxy"):
        assert env[name] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == ""
    assert proxy_env("::1", 8080)["http_proxy"] == "http://[::1]:8080"


# ---------------------------------------------------------------- in-process transport


async def test_transport_records_an_allowed_request() -> None:
    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv:
            transport = EgressTransport(EgressPolicy(), log)
            async with httpx.AsyncClient(transport=transport) as client:
                r = await client.post(f"http://127.0.0.1:{srv.port}/up?x=1", content=b"12345")
            assert r.text == "hello /up?x=1 12345"
    [flow] = await log.settled(1)
    assert flow.event() == EgressEvent(
        method="POST",
        scheme="http",
        host="127.0.0.1",
        port=srv.port,
        path="/up?x=1",
        request_bytes=5,
        response_bytes=len(r.content),
        status=200,
        decision="allow",
        url=f"http://127.0.0.1:{srv.port}/up?x=1",
    )


async def test_transport_denies_without_connecting() -> None:
    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv:
            policy = EgressPolicy({"127.0.0.1": "deny"})
            async with httpx.AsyncClient(transport=EgressTransport(policy, log)) as client:
                r = await client.get(f"http://127.0.0.1:{srv.port}/secret")
    assert r.status_code == 403
    assert "litmus-sandbox" in r.text
    assert "denied" in r.text
    assert srv.connections == 0
    [flow] = await log.settled(1)
    assert (flow.decision, flow.status) == ("deny", 403)


async def test_transport_stubs_with_the_configured_response() -> None:
    log = Log()
    policy = EgressPolicy.from_mapping(
        {
            "api.stub.test": {
                "mode": "stub",
                "status": 201,
                "body": '{"ok": true}',
                "headers": {"content-type": "application/json"},
            }
        }
    )
    async with httpx.AsyncClient(transport=EgressTransport(policy, log)) as client:
        r = await client.post("https://api.stub.test/v1/send", json={"to": "x"})
    assert (r.status_code, r.json(), r.headers["content-type"]) == (
        201,
        {"ok": True},
        "application/json",
    )
    [flow] = await log.settled(1)
    event = flow.event()
    assert (event.decision, event.scheme, event.port, event.status) == ("stub", "https", 443, 201)
    assert event.request_bytes == len(b'{"to":"x"}')
    assert event.response_bytes == 12


def test_sync_transport_records_and_denies() -> None:
    seen: list[EgressFlow] = []

    def sink(flow: EgressFlow) -> None:
        if not flow.done:
            seen.append(flow)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * 100)

    policy = EgressPolicy({"blocked.test": "deny"})
    transport = SyncEgressTransport(policy, sink, transport=httpx.MockTransport(handler))
    with httpx.Client(transport=transport) as client:
        assert client.get("http://ok.test/a").content == b"x" * 100
        assert client.get("http://blocked.test/b").status_code == 403
    assert [(f.host, f.decision, f.response_bytes, f.done) for f in seen] == [
        ("ok.test", "allow", 100, True),
        ("blocked.test", "deny", len(denied_body("blocked.test", 80)), True),
    ]


def _streaming_route(srv: Server, release: anyio.Event, finished: anyio.Event, total: int) -> None:
    async def respond(buf: BufferedByteStream) -> None:
        await buf.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await release.wait()  # the client has the first chunk: only now produce the rest
        block = b"y" * 65536
        sent = 5
        while sent < total:
            part = block[: total - sent]
            await buf.send(b"%x\r\n%s\r\n" % (len(part), part))
            sent += len(part)
        await buf.send(b"0\r\n\r\n")
        finished.set()

    srv.routes["/stream"] = respond


async def _consume_stream(
    client: httpx.AsyncClient, url: str, release: anyio.Event, finished: anyio.Event
) -> int:
    async with client.stream("GET", url) as r:
        chunks = r.aiter_raw()
        first = await chunks.__anext__()
        assert first.startswith(b"first")
        assert not finished.is_set()  # streamed through, not buffered until the end
        release.set()
        size = len(first)
        async for chunk in chunks:
            size += len(chunk)
    return size


async def test_transport_streams_and_counts_the_body() -> None:
    total = 1_000_000
    log = Log()
    release, finished = anyio.Event(), anyio.Event()
    with anyio.fail_after(10):
        async with serving(Server()) as srv:
            _streaming_route(srv, release, finished, total)
            async with httpx.AsyncClient(transport=EgressTransport(None, log)) as client:
                size = await _consume_stream(
                    client, f"http://127.0.0.1:{srv.port}/stream", release, finished
                )
    assert size == total
    [flow] = await log.settled(1)
    assert flow.response_bytes == total


# ---------------------------------------------------------------- the probe


async def test_probe_attributes_by_call_id_even_when_calls_overlap() -> None:
    probe = EgressProbe(EgressPolicy({"stub.test": {"mode": "stub", "body": "ok"}}))
    await probe.start()
    effects: dict[str, Effects] = {}
    both_sent = [anyio.Event(), anyio.Event()]

    async def call(i: int) -> None:
        call_id = f"c{i}"
        await probe.before_call(call_id)
        async with probe.client() as client:
            await client.get(f"http://stub.test/{call_id}")
        both_sent[i].set()
        await both_sent[1 - i].wait()  # the windows overlap
        effects[call_id] = await probe.after_call(call_id)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, 0)
            tg.start_soon(call, 1)
    assert [e.path for e in effects["c0"].egress] == ["/c0"]
    assert [e.path for e in effects["c1"].egress] == ["/c1"]
    assert not await probe.finish()


def _proxy_flow(probe: EgressProbe, path: str) -> None:
    """A flow as the forward proxy reports it: no call id, opened then done."""
    flow = EgressFlow(method="GET", scheme="http", host="h.test", port=80, path=path)
    probe.sink(flow)
    flow.done = True
    probe.sink(flow)


async def test_probe_attributes_proxy_flows_by_time_window() -> None:
    """Flows without a call id go to the only call in flight; overlapping calls make
    them ambiguous, and finish() reports them as unattributed."""
    probe = EgressProbe()
    await probe.start()

    _proxy_flow(probe, "/before")
    await probe.before_call("a")
    _proxy_flow(probe, "/alone")
    effects_a = await probe.after_call("a")
    await probe.before_call("b")
    await probe.before_call("c")
    _proxy_flow(probe, "/overlap")
    effects_b = await probe.after_call("b")
    effects_c = await probe.after_call("c")
    assert [e.path for e in effects_a.egress] == ["/alone"]
    assert not effects_b
    assert not effects_c
    assert [e.path for e in (await probe.finish()).egress] == ["/before", "/overlap"]


async def test_closed_windows_are_kept_while_they_can_matter_and_no_longer() -> None:
    """A closed window still makes a flow ambiguous for a call that overlapped it; once
    no call in flight overlaps it, it is dropped: a long session keeps no window a call."""
    probe = EgressProbe()
    await probe.start()

    await probe.before_call("a")
    await probe.before_call("b")
    _proxy_flow(probe, "/both")  # started while a and b were in flight
    assert not await probe.after_call("a")
    assert not await probe.after_call("b")  # a's window, closed, still covers the start
    for i in range(1000):
        await probe.before_call(f"c{i}")
        _proxy_flow(probe, f"/c{i}")
        assert [e.path for e in (await probe.after_call(f"c{i}")).egress] == [f"/c{i}"]
    assert len(probe._windows) <= 1
    assert [e.path for e in (await probe.finish()).egress] == ["/both"]


async def test_calling_scopes_in_process_requests() -> None:
    probe = EgressProbe(EgressPolicy({}, default="deny"))
    await probe.start()
    await probe.before_call("x")
    with calling("y"):
        async with probe.client() as client:
            await client.get("http://nowhere.test/")
    assert not await probe.after_call("x")
    [event] = (await probe.finish()).egress
    assert (event.host, event.decision) == ("nowhere.test", "deny")


# ---------------------------------------------------------------- forward proxy


async def test_proxy_forwards_curl_through_env_vars() -> None:
    log = Log()
    with anyio.fail_after(20):
        async with serving(Server()) as srv, ForwardProxy(EgressPolicy(), log) as proxy:
            base = f"http://127.0.0.1:{srv.port}"
            rc, out, err = await curl(f"{base}/one", env=proxy.env())
            assert (rc, out) == (0, b"hello /one "), err
            rc, out, err = await curl("--data-binary", "abc", f"{base}/post", env=proxy.env())
            assert (rc, out) == (0, b"hello /post abc"), err
            rc, out, err = await curl(
                "-H",
                "Transfer-Encoding: chunked",
                "--data-binary",
                "chunky",
                f"{base}/chunked",
                env=proxy.env(),
            )
            assert (rc, out) == (0, b"hello /chunked chunky"), err
            flows = await log.settled(3)
    events = [f.event() for f in flows]
    assert [(e.method, e.path, e.request_bytes, e.status, e.decision) for e in events] == [
        ("GET", "/one", 0, 200, "allow"),
        ("POST", "/post", 3, 200, "allow"),
        ("POST", "/chunked", 6, 200, "allow"),
    ]
    assert events[0].response_bytes == len(b"hello /one ")
    assert srv.requests[2] == ("POST", "/chunked", b"chunky")


async def test_proxy_keeps_connections_alive() -> None:
    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, log) as proxy:
            async with httpx.AsyncClient(proxy=proxy.url) as client:
                for i in range(5):
                    r = await client.get(f"http://127.0.0.1:{srv.port}/k{i}")
                    assert r.text == f"hello /k{i} "
            await log.settled(5)
    assert srv.connections == 1  # one upstream connection served all five


async def test_proxy_denies_a_host_without_connecting() -> None:
    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv:
            policy = EgressPolicy({"127.0.0.1": "allow"}, default="deny")
            async with ForwardProxy(policy, log) as proxy:
                url = f"http://localhost:{srv.port}/leak"
                rc, out, _ = await curl("-i", url, env=proxy.env())
                assert rc == 0
                assert out.startswith(b"HTTP/1.1 403")
                assert b"denied by the sandbox policy" in out
                rc, out, _ = await curl(
                    "-i", "-k", f"https://localhost:{srv.port}/", env=proxy.env()
                )
                assert rc != 0  # the CONNECT was refused
                flows = await log.settled(2)
    assert srv.connections == 0
    assert srv.requests == []
    assert [(f.method, f.host, f.status, f.decision) for f in flows] == [
        ("GET", "localhost", 403, "deny"),
        ("CONNECT", "localhost", 403, "deny"),
    ]


async def test_proxy_serves_a_stub() -> None:
    log = Log()
    policy = EgressPolicy(
        {"api.stub.test": {"mode": "stub", "status": 202, "body": "{}"}}, default="deny"
    )
    with anyio.fail_after(10):
        async with ForwardProxy(policy, log) as proxy:
            rc, out, _ = await curl("-i", "http://api.stub.test/v1/x", env=proxy.env())
            flows = await log.settled(1)
    assert rc == 0
    assert out.startswith(b"HTTP/1.1 202")
    assert out.endswith(b"\r\n\r\n{}")
    assert (flows[0].decision, flows[0].status, flows[0].response_bytes) == ("stub", 202, 2)


async def test_proxy_reaches_ip_literals() -> None:
    log = Log()
    policy = EgressPolicy({"127.0.0.2": "allow"}, default="deny")
    with anyio.fail_after(10):
        async with serving(Server(host="127.0.0.2")) as srv, ForwardProxy(policy, log) as proxy:
            rc, out, _ = await curl(f"http://127.0.0.2:{srv.port}/lit", env=proxy.env())
            assert (rc, out) == (0, b"hello /lit ")
            flows = await log.settled(1)
    assert (flows[0].host, flows[0].port, flows[0].decision) == ("127.0.0.2", srv.port, "allow")


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")
async def test_proxy_reaches_ipv6_literals() -> None:
    log = Log()
    with anyio.fail_after(10):
        async with serving(Server(host="::1")) as srv, ForwardProxy(None, log) as proxy:
            rc, out, _ = await curl(f"http://[::1]:{srv.port}/six", env=proxy.env())
            assert (rc, out) == (0, b"hello /six ")
            flows = await log.settled(1)
    assert (flows[0].host, flows[0].port) == ("::1", srv.port)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def test_proxy_tunnels_tls_and_records_sni(ca: trustme.CA, tmp_path: Path) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    log = Log()
    with anyio.fail_after(20):
        async with serving(Server(tls=server_ctx)) as srv, ForwardProxy(None, log) as proxy:
            rc, out, err = await curl(
                "--cacert",
                str(tmp_path / "ca.pem"),
                f"https://localhost:{srv.port}/tls",
                env=proxy.env(),
            )
            assert (rc, out) == (0, b"hello /tls "), err
            flows = await log.settled(1)
    [flow] = flows
    assert (flow.method, flow.host, flow.port, flow.status) == (
        "CONNECT",
        "localhost",
        srv.port,
        200,
    )
    assert (flow.scheme, flow.sni) == ("https", "localhost")
    assert flow.request_bytes > 200
    assert flow.response_bytes > 500


async def test_proxy_records_sni_that_differs_from_the_connect_target(ca: trustme.CA) -> None:
    """A client may CONNECT to an address and name another host in its ClientHello."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("service.litmus.test").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    log = Log()
    with anyio.fail_after(10):
        async with serving(Server(tls=server_ctx)) as srv, ForwardProxy(None, log) as proxy:
            stream = BufferedByteStream(await anyio.connect_tcp("127.0.0.1", proxy.port))
            await stream.send(f"CONNECT 127.0.0.1:{srv.port} HTTP/1.1\r\n\r\n".encode())
            assert (await stream.receive_until(b"\r\n\r\n", 1024)).startswith(b"HTTP/1.1 200")
            tls = await TLSStream.wrap(
                stream,
                hostname="service.litmus.test",
                ssl_context=client_ctx,
                standard_compatible=False,
            )
            await tls.send(b"GET /named HTTP/1.1\r\nHost: service.litmus.test\r\n\r\n")
            assert (await tls.receive()).endswith(b"hello /named ")
            await tls.aclose()
            [flow] = await log.settled(1)
    assert (flow.host, flow.sni) == ("127.0.0.1", "service.litmus.test")


async def test_proxy_streams_a_large_chunked_response() -> None:
    total = 1_000_000
    log = Log()
    release, finished = anyio.Event(), anyio.Event()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, log) as proxy:
            _streaming_route(srv, release, finished, total)
            async with httpx.AsyncClient(proxy=proxy.url) as client:
                size = await _consume_stream(
                    client, f"http://127.0.0.1:{srv.port}/stream", release, finished
                )
            [flow] = await log.settled(1)
    assert size == total
    assert (flow.response_bytes, flow.status) == (total, 200)


async def test_an_unreachable_upstream_looks_the_same_through_the_proxy() -> None:
    """A refused connection is not turned into an HTTP 502 the server never sent: the
    client's connection is reset (curl: "Recv failure: Connection reset by peer", or for a
    tunnel, the CONNECT aborted), and the flow records why."""
    log = Log()
    port = free_port()
    with anyio.fail_after(10):
        async with ForwardProxy(None, log) as proxy:
            rc, out, err = await curl("-i", f"http://127.0.0.1:{port}/", env=proxy.env())
            tunnel_rc, _, tunnel_err = await curl(
                "-k", f"https://127.0.0.1:{port}/", env=proxy.env()
            )
            async with httpx.AsyncClient(proxy=proxy.url) as client:
                with pytest.raises(httpx.TransportError):
                    await client.get(f"http://127.0.0.1:{port}/")
            flows = await log.settled(3)
    assert (rc, out) == (56, b"")
    assert b"reset" in err.lower()
    assert tunnel_rc in (35, 56)  # curl says which: CONNECT aborted, or recv failure
    assert b"502" not in tunnel_err
    assert [(f.method, f.decision, f.status, f.error) for f in flows] == [
        ("GET", "allow", None, "Connection refused"),
        ("CONNECT", "allow", None, "Connection refused"),
        ("GET", "allow", None, "Connection refused"),
    ]


def _linger_zero(stream: ByteStream) -> None:
    """Make closing ``stream`` send a reset."""
    sock = stream.extra(SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def test_a_reset_inside_a_tunnel_resets_the_other_side() -> None:
    """An upstream that resets an open tunnel resets the client's connection (not a clean
    close, which would read as a complete answer), and the flow says so; a client that
    resets its side has the upstream's reset in turn."""
    log = Log()
    upstream_saw: list[str] = []
    saw = anyio.Event()

    async def resetting(stream: ByteStream) -> None:
        async with stream:
            first = await stream.receive()
            if first == b"reset me":
                _linger_zero(stream)
                return
            try:
                await stream.receive()
                upstream_saw.append("eof")
            except anyio.EndOfStream:
                upstream_saw.append("eof")
            except anyio.BrokenResourceError:
                upstream_saw.append("reset")
            saw.set()

    async def through(proxy: ForwardProxy, port: int) -> ByteStream:
        stream = await anyio.connect_tcp("127.0.0.1", proxy.port)
        await stream.send(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % port)
        assert (await stream.receive()).startswith(b"HTTP/1.1 200")
        return stream

    with anyio.fail_after(10):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = int(listener.extra(SocketAttribute.local_port))
        async with listener, anyio.create_task_group() as tg, ForwardProxy(None, log) as proxy:
            tg.start_soon(listener.serve, resetting)
            client = await through(proxy, port)
            await client.send(b"reset me")
            with pytest.raises(anyio.BrokenResourceError):
                await client.receive()
            await client.aclose()
            client = await through(proxy, port)
            await client.send(b"then I reset")
            await anyio.sleep(0.1)  # the upstream has it, and waits for more
            _linger_zero(client)
            await client.aclose()
            flows = await log.settled(2)
            await saw.wait()
            tg.cancel_scope.cancel()
    assert upstream_saw == ["reset"]
    assert [(f.status, f.error) for f in flows] == [
        (200, "Connection reset by peer"),
        (200, None),  # the client's own reset is no failure of the upstream
    ]


async def test_a_client_that_gives_up_on_a_silent_upstream_is_recorded() -> None:
    """An upstream that accepts and never answers: the client's close reaches it, as it
    would without the proxy, and the flow says the client gave up, whether the upstream
    then closes or stays silent until the proxy's idle time limit."""
    log = Log()
    upstream_saw_eof: list[str] = []

    async def silent(stream: ByteStream) -> None:
        async with stream:
            buf = BufferedByteStream(stream)
            target = (await buf.receive_until(b"\r\n\r\n", 65536)).split(b" ")[1]
            with suppress(anyio.EndOfStream):
                await buf.receive()
            upstream_saw_eof.append(target.decode())
            if target == b"/silent":
                await anyio.sleep(30)  # closes only when the test ends

    async def give_up(proxy: ForwardProxy, port: int, path: str) -> bytes:
        async with await anyio.connect_tcp("127.0.0.1", proxy.port) as stream:
            await stream.send(b"GET http://127.0.0.1:%d%s HTTP/1.1\r\n\r\n" % (port, path.encode()))
            await anyio.sleep(0.8)  # past the proxy's patience: it watches the client
            await stream.send_eof()
            out = b""
            with suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    out += await stream.receive()
        return out

    with anyio.fail_after(15):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = int(listener.extra(SocketAttribute.local_port))
        async with (
            listener,
            anyio.create_task_group() as tg,
            ForwardProxy(None, log, idle_timeout=1.0) as proxy,
        ):
            tg.start_soon(listener.serve, silent)
            assert await give_up(proxy, port, "/closes") == b""
            assert await give_up(proxy, port, "/silent") == b""
            flows = await log.settled(2)
            tg.cancel_scope.cancel()
    assert upstream_saw_eof == ["/closes", "/silent"]
    assert [(f.path, f.status, f.error) for f in flows] == [
        ("/closes", None, "the client closed the connection before a response"),
        ("/silent", None, "the client closed the connection before a response"),
    ]


async def test_a_slow_answer_reaches_a_client_that_waits() -> None:
    """Watching the client while the upstream is slow changes nothing for one that waits."""

    async def slow(buf: BufferedByteStream) -> None:
        await anyio.sleep(0.8)
        await buf.send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow")

    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, log) as proxy:
            srv.routes["/slow"] = slow
            async with httpx.AsyncClient(proxy=proxy.url) as client:
                first = await client.get(f"http://127.0.0.1:{srv.port}/slow")
                again = await client.get(f"http://127.0.0.1:{srv.port}/fast")
            flows = await log.settled(2)
    assert (first.status_code, first.text, again.text) == (200, "slow", "hello /fast ")
    assert [(f.status, f.error) for f in flows] == [(200, None), (200, None)]


async def test_proxy_relays_close_delimited_responses() -> None:
    """An HTTP/1.0-style body that ends when the server closes is relayed to the end, and
    the client is told the connection closes too."""

    async def old_style(buf: BufferedByteStream) -> None:
        await buf.send(b"HTTP/1.0 200 OK\r\nServer: old\r\n\r\nuntil close")

    log = Log()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(None, log) as proxy:
            srv.routes["/old"] = old_style
            rc, out, _ = await curl("-i", f"http://127.0.0.1:{srv.port}/old", env=proxy.env())
            [flow] = await log.settled(1)
    assert rc == 0
    assert b"Connection: close\r\n" in out
    assert out.endswith(b"\r\n\r\nuntil close")
    assert (flow.status, flow.response_bytes) == (200, len(b"until close"))


async def test_subprocess_egress_is_attributed_to_the_call_in_flight() -> None:
    probe = EgressProbe()
    await probe.start()
    with anyio.fail_after(10):
        async with serving(Server()) as srv, ForwardProxy(probe.policy, probe.sink) as proxy:
            await probe.before_call("ep:1")
            rc, _, _ = await curl(f"http://127.0.0.1:{srv.port}/tool", env=proxy.env())
            effects = await probe.after_call("ep:1")
    assert rc == 0
    assert [(e.path, e.status) for e in effects.egress] == [("/tool", 200)]
    assert not await probe.finish()


async def test_proxy_reports_listen_failures_as_upstream_errors() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(UpstreamError, match="cannot listen"):
            async with ForwardProxy(port=taken.getsockname()[1]):
                pass


async def test_proxy_refuses_origin_form_and_reports_over_tcp() -> None:
    """Only the Unix socket (strict mode's bridge) may post blocked reports."""
    log = Log()
    with anyio.fail_after(10):
        async with ForwardProxy(None, log) as proxy:
            stream = BufferedByteStream(await anyio.connect_tcp("127.0.0.1", proxy.port))
            body = b'{"proto": "tcp", "host": "127.0.0.9", "port": 1}'
            await stream.send(
                b"POST /.litmus/blocked HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            assert (await stream.receive_until(b"\r\n", 100)).startswith(b"HTTP/1.1 400")
            await stream.aclose()
    assert log.flows == []


async def test_proxy_records_reports_from_its_unix_socket(tmp_path: Path) -> None:
    log = Log()
    path = str(tmp_path / "proxy.sock")
    with anyio.fail_after(10):
        async with ForwardProxy(None, log, unix_path=path):
            attempt = _netns.Attempt("dns", "127.0.0.53", 53, "example.test")
            await _netns._report(path, attempt)
    [flow] = log.flows
    assert flow.event() == EgressEvent(
        method="DNS",
        scheme="dns",
        host="127.0.0.53",
        port=53,
        path="example.test",
        decision="blocked",
    )
    assert not await anyio.Path(path).exists()  # removed when the proxy stops


# ---------------------------------------------------------------- strict mode: packets


def _ipv4(proto: int, src: str, dst: str, body: bytes) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 0, 0, 64, proto, 0,
                         socket.inet_aton(src), socket.inet_aton(dst))  # fmt: skip
    return header + body


def _tcp(sport: int, dport: int, flags: int) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 0, 0, 5 << 4, flags, 0, 0, 0)


def _dns_query(name: str) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + labels + b"\x00\x00\x01\x00\x01"


def _feed(tracker: _netns.BlockedTracker, data: bytes) -> _netns.Attempt | None:
    packet = _netns.parse_packet(data)
    assert packet is not None
    return tracker.feed(packet)


def test_tracker_reports_refused_syns_not_local_connections() -> None:
    tracker = _netns.BlockedTracker()
    assert _feed(tracker, _ipv4(6, "127.0.0.1", "127.0.0.7", _tcp(40000, 443, 0x02))) is None
    attempt = _feed(tracker, _ipv4(6, "127.0.0.7", "127.0.0.1", _tcp(443, 40000, 0x14)))
    assert attempt == _netns.Attempt("tcp", "127.0.0.7", 443)
    # A SYN answered by a SYN-ACK reached a listener inside the namespace: not egress.
    _feed(tracker, _ipv4(6, "127.0.0.1", "127.0.0.7", _tcp(40001, 8000, 0x02)))
    _feed(tracker, _ipv4(6, "127.0.0.7", "127.0.0.1", _tcp(8000, 40001, 0x12)))
    assert _feed(tracker, _ipv4(6, "127.0.0.7", "127.0.0.1", _tcp(8000, 40001, 0x14))) is None


def test_tracker_reads_dns_names_from_port_unreachable_errors() -> None:
    tracker = _netns.BlockedTracker()
    query = _dns_query("files.example.test")
    quoted = _ipv4(
        17, "127.0.0.1", "127.0.0.53", struct.pack("!HHHH", 5353, 53, 8 + len(query), 0) + query
    )
    icmp = _ipv4(1, "127.0.0.53", "127.0.0.1", b"\x03\x03\x00\x00\x00\x00\x00\x00" + quoted)
    assert _feed(tracker, icmp) == _netns.Attempt("dns", "127.0.0.53", 53, "files.example.test")
    assert _feed(tracker, icmp) is None  # reported once


# ---------------------------------------------------------------- strict mode: end to end


def test_strict_available_says_why() -> None:
    ok, why = strict_available()
    assert isinstance(ok, bool)
    assert why


@needs_strict
async def test_strict_mode_routes_proxy_aware_clients_through_the_bridge(tmp_path: Path) -> None:
    log = Log()
    with anyio.fail_after(20):
        async with (
            serving(Server()) as srv,
            ForwardProxy(None, log, unix_path=str(tmp_path / "p.sock")) as proxy,
        ):
            done = await run_strict(
                ["curl", "-sS", "--max-time", "5", f"http://127.0.0.1:{srv.port}/inside"],
                proxy=proxy,
            )
            assert (done.returncode, done.stdout) == (0, b"hello /inside "), done.stderr
            [flow] = await log.settled(1)
    assert (flow.path, flow.decision, flow.status) == ("/inside", "allow", 200)


@needs_strict
async def test_strict_mode_blocks_and_records_clients_that_ignore_the_proxy(tmp_path: Path) -> None:
    log = Log()
    with anyio.fail_after(20):
        async with (
            serving(Server()) as srv,
            ForwardProxy(None, log, unix_path=str(tmp_path / "p.sock")) as proxy,
        ):
            done = await run_strict(
                [
                    "curl",
                    "-sS",
                    "--max-time",
                    "5",
                    "--noproxy",
                    "*",
                    f"http://127.0.0.1:{srv.port}/bypass",
                ],
                proxy=proxy,
            )
            assert done.returncode == 7, done.stderr  # curl: could not connect
            script = (
                f"import socket; socket.create_connection(('127.0.0.2', {srv.port}), timeout=5)"
            )
            done = await run_strict([sys.executable, "-c", script], proxy=proxy)
            assert b"ConnectionRefusedError" in done.stderr
            flows = await log.settled(2)
    assert srv.connections == 0
    assert [(f.method, f.host, f.port, f.decision) for f in flows] == [
        ("CONNECT", "127.0.0.1", srv.port, "blocked"),
        ("CONNECT", "127.0.0.2", srv.port, "blocked"),
    ]


@needs_strict
async def test_strict_mode_resets_the_connection_of_an_unreachable_upstream(
    tmp_path: Path,
) -> None:
    """As through the proxy's own port, and as without any proxy: the tool's connection
    fails (reset), never with an empty reply, for a refused port and for a tunnel."""
    log = Log()
    port = free_port()
    script = (
        "import socket, sys\n"
        f"for head in (b'GET http://127.0.0.1:{port}/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n',\n"
        f"             b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'):\n"
        "    s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
        "    s.sendall(head)\n"
        "    try:\n"
        "        print(s.recv(100) or 'EOF')\n"
        "    except ConnectionResetError:\n"
        "        print('reset')\n"
    )
    with anyio.fail_after(20):
        async with ForwardProxy(None, log, unix_path=str(tmp_path / "p.sock")) as proxy:
            done = await run_strict([sys.executable, "-c", script], proxy=proxy)
            flows = await log.settled(2)
    assert done.stdout.split() == [b"reset", b"reset"], done.stderr
    assert [(f.method, f.error) for f in flows] == [
        ("GET", "Connection refused"),
        ("CONNECT", "Connection refused"),
    ]


@needs_strict
async def test_strict_mode_applies_the_policy_inside(tmp_path: Path) -> None:
    log = Log()
    policy = EgressPolicy({}, default="deny")
    with anyio.fail_after(20):
        async with (
            serving(Server()) as srv,
            ForwardProxy(policy, log, unix_path=str(tmp_path / "p.sock")) as proxy,
        ):
            done = await run_strict(
                [
                    "curl",
                    "-sS",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    f"http://127.0.0.1:{srv.port}/",
                ],
                proxy=proxy,
            )
            [flow] = await log.settled(1)
    assert done.stdout == b"403"
    assert srv.connections == 0
    assert flow.decision == "deny"


@needs_strict
async def test_cancelling_run_strict_ends_every_process_it_started(tmp_path: Path) -> None:
    """The tool and whatever it left running hold a FIFO open; its EOF says they are gone."""
    fifo = tmp_path / "alive"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    script = f"exec 3>{fifo}; echo up >&3; sleep 30 & sleep 30"
    try:
        with anyio.fail_after(10):
            proxy = ForwardProxy(unix_path=str(tmp_path / "p.sock"))
            async with proxy, anyio.create_task_group() as tg:
                tg.start_soon(lambda: run_strict(["sh", "-c", script], proxy=proxy))
                await anyio.wait_readable(fd)
                assert os.read(fd, 10) == b"up\n"
                tg.cancel_scope.cancel()
            await anyio.wait_readable(fd)
            assert os.read(fd, 10) == b""  # no writer is left: both sleeps were killed
    finally:
        os.close(fd)


def test_bridge_reports_a_failed_setup(capsys: pytest.CaptureFixture[str]) -> None:
    """``/bin/false`` stands in for ``ip``: nothing here touches this process's network."""
    assert _netns.main(["check", "--ip", "/bin/false"]) == _netns.SETUP_FAILED
    assert _netns.SETUP_MARKER in capsys.readouterr().err


async def test_run_strict_needs_a_unix_socket() -> None:
    with pytest.raises(ConfigError, match="Unix socket"):
        await run_strict(["true"], proxy=ForwardProxy())


def test_egress_rule_defaults_to_allow() -> None:
    assert EgressRule().mode == "allow"


async def test_a_tunnel_whose_server_name_the_policy_denies_is_closed(ca: trustme.CA) -> None:
    """CONNECT to an allowed address naming a host a rule denies in its ClientHello: the
    tunnel ends before the hello reaches the server, and the flow says deny with the name.
    A name no rule covers (deny by default) is not refused: the address was allowed."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("service.litmus.test", "evil.test").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    policy = EgressPolicy.from_mapping(
        {"default": "deny", "127.0.0.1": "allow", "evil.test": "deny"}
    )
    log = Log()
    with anyio.fail_after(10):
        async with serving(Server(tls=server_ctx)) as srv, ForwardProxy(policy, log) as proxy:
            for name in ("evil.test", "service.litmus.test"):
                stream = BufferedByteStream(await anyio.connect_tcp("127.0.0.1", proxy.port))
                await stream.send(f"CONNECT 127.0.0.1:{srv.port} HTTP/1.1\r\n\r\n".encode())
                head = await stream.receive_until(b"\r\n\r\n", 1024)
                assert head.startswith(b"HTTP/1.1 200")
                if name == "evil.test":
                    closed = (ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)
                    with pytest.raises(closed):
                        await TLSStream.wrap(
                            stream, hostname=name, ssl_context=client_ctx, standard_compatible=False
                        )
                    await stream.aclose()
                    continue
                tls = await TLSStream.wrap(
                    stream, hostname=name, ssl_context=client_ctx, standard_compatible=False
                )
                await tls.send(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
                assert (await tls.receive()).endswith(b"hello /ok ")
                await tls.aclose()
            flows = await log.settled(2)
    by_name = {f.sni: f for f in flows}
    assert by_name["evil.test"].decision == "deny"
    assert by_name["evil.test"].response_bytes == 0  # the server never answered it
    assert by_name["service.litmus.test"].decision == "allow"


async def test_client_connection_options_reach_its_transport(ca: trustme.CA) -> None:
    """``verify=`` (and the other options httpx gives only its own transport) still apply
    to a client the probe observes."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    probe = EgressProbe()
    with anyio.fail_after(20):
        async with serving(Server(tls=server_ctx)) as srv:
            url = f"https://127.0.0.1:{srv.port}/tls"
            async with probe.client() as strict:
                with pytest.raises(httpx.ConnectError):  # the CA is not trusted
                    await strict.get(url)
            async with probe.client(verify=False) as lax:
                assert (await lax.get(url)).status_code == 200
            trusted = ssl.create_default_context()
            ca.configure_trust(trusted)
            async with probe.client(verify=trusted) as trusting:
                assert (await trusting.get(url)).status_code == 200


def test_an_observed_client_refuses_options_that_would_bypass_it() -> None:
    probe = EgressProbe()
    with pytest.raises(ConfigError, match="bypass"):
        probe.client(proxy="http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="bypass"):
        probe.client(mounts={"all://": httpx.AsyncHTTPTransport()})
