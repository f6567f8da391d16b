"""A loopback forward proxy that records subprocess tools' egress and applies the policy.

Theory of operation
-------------------
Tools started as subprocesses are pointed at the proxy by the variables of
:func:`proxy_env`. Each client connection carries either

* plain HTTP requests in absolute form (``GET http://host:port/path HTTP/1.1``): each is
  decided by the :class:`~litmus_sandbox.EgressPolicy`, recorded as a flow, and forwarded
  (HTTP/1.1; ``Content-Length``, chunked and close-delimited bodies relayed as they
  arrive, never buffered whole). Client and upstream connections are kept alive when the
  message framing allows, one upstream connection per client connection; or
* one ``CONNECT host:port`` tunnel: decided by the CONNECT target, recorded with the
  server name read from the TLS ClientHello's SNI extension (parsed from the first bytes,
  never decrypted), then relayed both ways and counted until both sides close.

Denied hosts get a 403 and a flow with decision ``deny``, and nothing is connected. A
``stub`` answers plain HTTP with the configured response; a tunnel cannot be stubbed
without decrypting it, so a CONNECT to a stubbed host is refused like a denied one and
recorded as ``deny``. Bytes counted are message payload bytes (after de-chunking) for
HTTP, and relayed bytes each way for tunnels.

When the proxy also listens on a Unix socket (strict mode), connections there may post
``/.litmus/blocked`` reports from the in-namespace bridge: destinations a tool tried to
reach directly, recorded with decision ``blocked``.

The parsing helpers (request/response heads, framing, SNI) are pure functions over
bytes; only :class:`ForwardProxy` does I/O.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from contextlib import suppress
from typing import Any, NamedTuple

import anyio
import msgspec
from anyio.abc import ByteSendStream, ByteStream, SocketAttribute, TaskGroup, TaskStatus
from anyio.streams.buffered import BufferedByteStream

from litmus_sandbox._config.egress import EgressPolicy, denied_body
from litmus_sandbox._model.errors import UpstreamError
from litmus_sandbox.oracles.egress._flow import EgressFlow, EgressSink
from litmus_sandbox.oracles.egress._http_wire import (
    NO_FRAMING,
    Abort,
    BadMessage,
    Framing,
    Head,
    UpstreamBad,
    canned_response,
    chunk_size,
    parse_head,
    parse_sni,
    proxy_env,
    report_decoder,
    request_framing,
    response_framing,
    split_authority,
    split_target,
)
from litmus_sandbox.oracles.egress._netns import REPORT_PATH

_log = logging.getLogger("litmus_sandbox.egress")

MAX_HEAD = 64 * 1024
CHUNK = 64 * 1024
# Hop-by-hop fields (RFC 9110 7.6.1) the proxy consumes rather than forwards. Bodies are
# relayed with their own framing, so Transfer-Encoding and Content-Length pass through.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"upgrade",
        b"expect",
    }
)
_RESPONSE_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection"})
_CLOSED = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)

# ---------------------------------------------------------------- I/O


def _ignore(flow: EgressFlow) -> None:
    """The sink of a proxy nobody listens to."""


def _close(flow: EgressFlow, sink: EgressSink) -> None:
    flow.done = True
    sink(flow)


class ForwardProxy:
    """An HTTP forward proxy on loopback that records egress and applies the policy.

    Use ``async with ForwardProxy(policy, sink) as proxy`` (then ``proxy.port``,
    ``proxy.env()``), or ``await tg.start(proxy.serve)`` in your own task group, which
    returns ``(host, port)`` once it accepts connections.

    Args:
        policy: the egress policy (everything allowed when None).
        sink: receives each flow when it opens and again when it closes.
        host: the loopback address to listen on.
        port: the port (0 picks a free one).
        unix_path: also listen on this Unix socket (strict mode's way in; a stale socket
            file there is replaced).
        connect_timeout: seconds to connect upstream before answering 502.
        idle_timeout: seconds a client connection may sit idle between requests.
    """

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        sink: EgressSink | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        unix_path: str | os.PathLike[str] | None = None,
        connect_timeout: float = 10.0,
        idle_timeout: float = 120.0,
    ) -> None:
        self.policy = policy or EgressPolicy()
        self.sink = sink or _ignore
        self.host = host
        self.port = port
        self.unix_path = os.fspath(unix_path) if unix_path is not None else None
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self._tg: TaskGroup | None = None

    @property
    def url(self) -> str:
        """``http://host:port``: what proxy variables point at."""
        return proxy_env(self.host, self.port)["HTTP_PROXY"]

    def env(self, *, no_proxy: str = "") -> dict[str, str]:
        """:func:`proxy_env` for this proxy."""
        return proxy_env(self.host, self.port, no_proxy=no_proxy)

    async def __aenter__(self) -> ForwardProxy:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        try:
            await tg.start(self.serve)
        except BaseException:
            # start() already raised the failure itself (an UpstreamError, not a group):
            # close the empty task group without handing it the exception again.
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            raise
        self._tg = tg
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        tg, self._tg = self._tg, None
        if tg is None:
            return None
        tg.cancel_scope.cancel()
        return await tg.__aexit__(*exc)

    async def serve(
        self, *, task_status: TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections until cancelled; ``task_status.started((host, port))`` when ready.

        Raises:
            UpstreamError: the proxy cannot listen (address in use, bad Unix path).
        """
        try:
            tcp = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        except OSError as exc:
            raise UpstreamError(
                f"egress proxy cannot listen on {self.host}:{self.port}: {exc}"
            ) from exc
        async with tcp:
            self.port = int(tcp.extra(SocketAttribute.local_port))
            if self.unix_path is None:
                task_status.started((self.host, self.port))
                await tcp.serve(self._serve_tcp)
                return
            _remove_stale_socket(self.unix_path)
            try:
                unix = await anyio.create_unix_listener(self.unix_path)
            except OSError as exc:
                raise UpstreamError(
                    f"egress proxy cannot listen on {self.unix_path}: {exc}"
                ) from exc
            try:
                async with unix, anyio.create_task_group() as tg:
                    tg.start_soon(tcp.serve, self._serve_tcp)
                    tg.start_soon(unix.serve, self._serve_unix)
                    task_status.started((self.host, self.port))
            finally:
                with suppress(OSError):
                    os.unlink(self.unix_path)

    async def _serve_tcp(self, stream: ByteStream) -> None:
        await self._connection(stream, trusted=False)

    async def _serve_unix(self, stream: ByteStream) -> None:
        await self._connection(stream, trusted=True)

    async def _connection(self, stream: ByteStream, *, trusted: bool) -> None:
        async with stream:
            try:
                await _ClientConnection(self, BufferedByteStream(stream), trusted).run()
            except (*_CLOSED, Abort):
                pass  # a peer went away mid-message; its flow was closed on the way out
            except Exception:
                # One connection's failure (a bug included) must not stop the proxy:
                # Listener.serve would cancel every other connection with it.
                _log.exception("egress proxy: connection failed")


def _remove_stale_socket(path: str) -> None:
    with suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)


class _Upstream(NamedTuple):
    key: tuple[str, int]
    stream: BufferedByteStream


class _ClientConnection:
    """One client connection: a sequence of requests, or one tunnel."""

    def __init__(self, proxy: ForwardProxy, conn: BufferedByteStream, trusted: bool) -> None:
        self.proxy = proxy
        self.conn = conn
        self.trusted = trusted
        self.upstream: _Upstream | None = None

    async def run(self) -> None:
        try:
            while True:
                head_bytes = None
                with anyio.move_on_after(self.proxy.idle_timeout):
                    try:
                        head_bytes = await self.conn.receive_until(b"\r\n\r\n", MAX_HEAD)
                    except anyio.IncompleteRead:
                        return  # the client closed, normally between requests
                    except anyio.DelimiterNotFound:
                        await self.conn.send(canned_response(431, b"request head too large\n"))
                        return
                if head_bytes is None:
                    return  # idle too long
                try:
                    head = parse_head(head_bytes)
                    method, target = head.start[0], head.start[1].decode("latin-1")
                    if method == b"CONNECT":
                        await self._tunnel(target)
                        return
                    if target.startswith("/"):
                        if self.trusted and method == b"POST" and target == REPORT_PATH:
                            await self._report(head)
                        else:
                            raise BadMessage(
                                400,
                                "this is a forward proxy: send absolute-form requests "
                                "(http://host/path) or CONNECT host:port",
                            )
                        return
                    if not await self._forward(head, method, target):
                        return
                except BadMessage as bad:
                    await self.conn.send(canned_response(bad.status, f"{bad.reason}\n".encode()))
                    return
        finally:
            await self._drop_upstream()

    async def _drop_upstream(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            with anyio.CancelScope(shield=True):
                await upstream.stream.aclose()

    async def _connect(self, host: str, port: int) -> ByteStream:
        with anyio.fail_after(self.proxy.connect_timeout):
            return await anyio.connect_tcp(host, port)

    # -- plain HTTP

    async def _forward(self, head: Head, method: bytes, target: str) -> bool:
        """Forward one request; True when the client connection can carry another."""
        host, port, path = split_target(target)
        proxy, conn = self.proxy, self.conn
        rule = proxy.policy.decide(host, port)
        flow = EgressFlow(
            method=method.decode("latin-1"),
            scheme="http",
            host=host,
            port=port,
            path=path,
            decision=rule.mode,
        )
        sink = proxy.sink
        sink(flow)
        try:
            framing = request_framing(head)
            keep = head.start[2] == b"HTTP/1.1" and b"close" not in head.tokens(b"connection")
            expects = b"100-continue" in head.tokens(b"expect")

            def sent(n: int) -> None:
                flow.request_bytes += n

            if rule.mode != "allow":
                if framing == NO_FRAMING or not expects:
                    # Read what the tool sends (it counts), so the connection stays usable.
                    await _relay_body(conn, None, framing, sent)
                else:
                    keep = False  # it waits for 100 Continue: answer now and close
                if rule.mode == "deny":
                    status, body = 403, denied_body(host, port)
                    headers = [("Content-Type", "text/plain; charset=utf-8")]
                    headers.append(("X-Litmus-Sandbox", "denied"))
                else:
                    status, body = rule.status, rule.body.encode()
                    headers = list(rule.headers.items())
                flow.status, flow.response_bytes = status, len(body)
                await conn.send(canned_response(status, body, headers, keep=keep))
                return keep

            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            request = _request_head(method, path, head, authority)
            upstream = await self._exchange(flow, (host, port), request, framing, expects, sent)
            if upstream is None:
                return False
            status_line, response = upstream
            status = flow.status or 0
            try:
                rframing = response_framing(method, status, response)
            except BadMessage:  # the upstream's fault, not the client's: 502, not 400
                await self._drop_upstream()
                flow.status = 502
                await conn.send(
                    canned_response(502, b"litmus-sandbox: malformed upstream response\n")
                )
                return False
            keep = keep and rframing[0] != "close"
            up_keep = (
                rframing[0] != "close"
                and status_line[0] == b"HTTP/1.1"
                and b"close" not in response.tokens(b"connection")
            )
            response_head = _response_head(status_line, response, keep=keep)
            assert self.upstream is not None
            up = self.upstream.stream
            if rframing[0] == "length" and len(up.buffer) >= rframing[1]:
                # The whole (small) body has arrived with the head: one send, not two.
                body = await up.receive_exactly(rframing[1])
                flow.response_bytes = len(body)
                await conn.send(response_head + body)
            else:
                await conn.send(response_head)

                def received(n: int) -> None:
                    flow.response_bytes += n

                try:
                    await _relay_body(up, conn, rframing, received)
                except BadMessage:
                    raise Abort from None  # bad upstream framing mid-response: just close
            if not up_keep:
                await self._drop_upstream()
            return keep
        finally:
            _close(flow, sink)

    async def _exchange(
        self,
        flow: EgressFlow,
        key: tuple[str, int],
        request: bytes,
        framing: Framing,
        expects: bool,
        sent: Callable[[int], None],
    ) -> tuple[tuple[bytes, bytes, bytes], Head] | None:
        """Send the request upstream and read the final response head (interim ones are
        relayed). A reused connection that turns out closed is retried once on a fresh one
        when no body was consumed. None when the client got a 502."""
        conn = self.conn
        if self.upstream is not None and self.upstream.key != key:
            await self._drop_upstream()
        for attempt in (0, 1):
            reused = self.upstream is not None
            if self.upstream is None:
                try:
                    stream = await self._connect(*key)
                except (OSError, TimeoutError) as exc:
                    reason = (
                        "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
                    )
                    flow.status = 502
                    body = f"litmus-sandbox: cannot reach {key[0]}:{key[1]}: {reason}\n".encode()
                    await conn.send(canned_response(502, body))
                    return None
                self.upstream = _Upstream(key, BufferedByteStream(stream))
            up = self.upstream.stream
            try:
                await up.send(request)
                if attempt == 0 and expects:
                    await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
                # A client's bad framing raises BadMessage past the handlers below (400).
                await _relay_body(conn, up, framing, sent)
                head, status = await self._final_head(up)
            except (anyio.IncompleteRead, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                await self._drop_upstream()
                if reused and attempt == 0 and framing == NO_FRAMING:
                    continue  # a kept-alive connection the server had closed: retry once
                flow.status = 502
                await conn.send(
                    canned_response(502, b"litmus-sandbox: upstream closed the connection\n")
                )
                return None
            except UpstreamBad:
                await self._drop_upstream()
                flow.status = 502
                await conn.send(
                    canned_response(502, b"litmus-sandbox: malformed upstream response\n")
                )
                return None
            if status == 101:  # Upgrade is not forwarded, so a switch cannot be relayed
                await self._drop_upstream()
                flow.status = 502
                await conn.send(
                    canned_response(502, b"litmus-sandbox: protocol upgrades are not relayed\n")
                )
                return None
            flow.status = status
            return head.start, head
        raise AssertionError("unreachable")  # pragma: no cover

    async def _final_head(self, up: BufferedByteStream) -> tuple[Head, int]:
        """Read the final response head, relaying interim (1xx) ones to the client.

        Raises:
            UpstreamBad: not an HTTP response.
        """
        while True:
            try:
                head = parse_head(await up.receive_until(b"\r\n\r\n", MAX_HEAD))
                status = _status(head)
            except (BadMessage, anyio.DelimiterNotFound):
                raise UpstreamBad from None
            if 100 <= status < 200 and status != 101:
                await self.conn.send(_response_head(head.start, head, keep=True))
                continue
            return head, status

    # -- tunnels

    async def _tunnel(self, target: str) -> None:
        host, port = split_authority(target)
        proxy, conn = self.proxy, self.conn
        mode = proxy.policy.decide(host, port).mode
        flow = EgressFlow(
            method="CONNECT",
            scheme="tcp",
            host=host,
            port=port,
            decision="allow" if mode == "allow" else "deny",
        )
        sink = proxy.sink
        sink(flow)
        try:
            if mode != "allow":
                flow.status = 403
                body = denied_body(host, port)
                if mode == "stub":
                    body += b"(a stub cannot answer inside a tunnel: use plain http or the in-process transport)\n"
                await conn.send(canned_response(403, body, [("X-Litmus-Sandbox", "denied")]))
                return
            try:
                upstream = await self._connect(host, port)
            except (OSError, TimeoutError) as exc:
                flow.status = 502
                reason = (
                    "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
                )
                await conn.send(
                    canned_response(
                        502, f"litmus-sandbox: cannot reach {target}: {reason}\n".encode()
                    )
                )
                return
            async with upstream:
                await conn.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
                flow.status = 200
                policy = proxy.policy

                def sni_denied(name: str) -> bool:
                    # Only a rule naming that host denies it: the CONNECT target decided
                    # everything else (an allowed address is not refused for its name
                    # merely falling under a deny-by-default).
                    rule = policy.decide(name, port)
                    return rule is not policy.default and rule.mode != "allow"

                async with anyio.create_task_group() as tg:
                    tg.start_soon(_pump_client, conn, upstream, flow, tg, sni_denied)
                    tg.start_soon(_pump_upstream, upstream, conn, flow, tg)
        finally:
            _close(flow, sink)

    # -- strict mode's reports

    async def _report(self, head: Head) -> None:
        framing = request_framing(head)
        if framing[0] != "length" or framing[1] > 4096:
            raise BadMessage(400, "a report needs a Content-Length of at most 4096")
        try:
            report = report_decoder.decode(await self.conn.receive_exactly(framing[1]))
        except msgspec.DecodeError as exc:
            raise BadMessage(400, f"bad report: {exc}") from None
        method = {"tcp": "CONNECT", "udp": "UDP", "dns": "DNS"}.get(
            report.proto, report.proto.upper()
        )
        flow = EgressFlow(
            method=method,
            scheme=report.proto,
            host=report.host,
            port=report.port,
            path=report.name or "",
            decision="blocked",
        )
        self.proxy.sink(flow)
        _close(flow, self.proxy.sink)
        await self.conn.send(canned_response(204))


def _status(head: Head) -> int:
    code = head.start[1]
    if len(code) != 3 or not code.isdigit():
        raise BadMessage(502, "bad status code")
    return int(code)


def _request_head(method: bytes, path: str, head: Head, authority: str) -> bytes:
    """The request as sent upstream: origin-form target, hop-by-hop fields removed."""
    drop = _HOP_BY_HOP | head.tokens(b"connection")
    lines = [method + b" " + path.encode("latin-1") + b" HTTP/1.1"]
    has_host = False
    for name, value in head.headers:
        lname = name.lower()
        if lname in drop:
            continue
        has_host = has_host or lname == b"host"
        lines.append(name + b": " + value)
    if not has_host:
        lines.append(b"Host: " + authority.encode("latin-1"))
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


def _response_head(start: tuple[bytes, bytes, bytes], head: Head, *, keep: bool) -> bytes:
    """The response head as sent to the client, with our own Connection field."""
    drop = _RESPONSE_HOP | head.tokens(b"connection")
    lines = [b"HTTP/1.1 " + start[1] + b" " + start[2]]
    lines += [n + b": " + v for n, v in head.headers if n.lower() not in drop]
    if not keep:
        lines.append(b"Connection: close")
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


async def _relay_body(
    src: BufferedByteStream,
    dst: ByteSendStream | None,
    framing: Framing,
    count: Callable[[int], None],
) -> None:
    """Relay one message body as it arrives (``dst`` None: read and discard it).

    ``count`` gets payload sizes (chunk framing excluded). Chunked bodies are relayed with
    their framing, one chunk per send, so a stream reaches the client as it is produced.

    Raises:
        BadMessage: bad chunk framing.
        anyio.EndOfStream, anyio.IncompleteRead: the sender closed before the body ended.
    """
    kind, size = framing
    if kind == "length":
        remaining = size
        while remaining:
            data = await src.receive(min(remaining, CHUNK))
            remaining -= len(data)
            count(len(data))
            if dst is not None:
                await dst.send(data)
    elif kind == "close":
        while True:
            try:
                data = await src.receive(CHUNK)
            except anyio.EndOfStream:
                return
            count(len(data))
            if dst is not None:
                await dst.send(data)
    elif kind == "chunked":
        while True:
            line = await _line(src, 4096)
            remaining = chunk_size(line)
            out = bytearray(line)
            out += b"\r\n"
            if remaining == 0:
                while True:  # trailer fields, up to the blank line
                    trailer = await _line(src, MAX_HEAD)
                    out += trailer + b"\r\n"
                    if not trailer:
                        break
                if dst is not None:
                    await dst.send(bytes(out))
                return
            while remaining:
                data = await src.receive(min(remaining, CHUNK))
                remaining -= len(data)
                count(len(data))
                out += data
                if len(out) >= CHUNK and dst is not None:
                    await dst.send(bytes(out))
                    out.clear()
            if await src.receive_exactly(2) != b"\r\n":
                raise BadMessage(400, "bad chunk framing")
            out += b"\r\n"
            if dst is not None:
                await dst.send(bytes(out))


async def _line(src: BufferedByteStream, limit: int) -> bytes:
    try:
        return await src.receive_until(b"\r\n", limit)
    except anyio.DelimiterNotFound:
        raise BadMessage(400, "chunk framing line too long") from None


async def _pump_client(
    src: BufferedByteStream,
    dst: ByteStream,
    flow: EgressFlow,
    tg: TaskGroup,
    sni_denied: Callable[[str], bool] | None = None,
) -> None:
    """Client to upstream, reading the SNI from the first bytes on the way.

    The first flight is held until the ClientHello is read whole; a server name the policy
    denies by name ends the tunnel before any of it reaches the upstream.
    """
    hello = bytearray()
    sniffing = True
    try:
        while True:
            try:
                data = await src.receive(CHUNK)
            except anyio.EndOfStream:
                if hello:  # the client ended before a whole ClientHello: pass what it sent
                    await dst.send(bytes(hello))
                break
            flow.request_bytes += len(data)
            if sniffing:
                hello += data
                seen = parse_sni(bytes(hello))
                if not (seen.complete or len(hello) > 4 * CHUNK):
                    continue  # hold it: the name decides whether it goes on
                sniffing = False
                flow.scheme = "https" if seen.tls else "tcp"
                flow.sni = seen.server_name
                if seen.server_name and sni_denied is not None and sni_denied(seen.server_name):
                    flow.decision = "deny"
                    tg.cancel_scope.cancel()
                    return
                data = bytes(hello)
                hello.clear()
            await dst.send(data)
        with suppress(*_CLOSED):
            await dst.send_eof()  # half-close: let the server finish its side
    except _CLOSED:
        tg.cancel_scope.cancel()  # a reset on either side ends the whole tunnel


async def _pump_upstream(
    src: ByteStream, dst: BufferedByteStream, flow: EgressFlow, tg: TaskGroup
) -> None:
    try:
        while True:
            try:
                data = await src.receive(CHUNK)
            except anyio.EndOfStream:
                break
            flow.response_bytes += len(data)
            await dst.send(data)
        with suppress(*_CLOSED):
            await dst.send_eof()
    except _CLOSED:
        tg.cancel_scope.cancel()
