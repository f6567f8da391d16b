"""A loopback forward proxy that records subprocess tools' egress and applies the policy.

Theory of operation
-------------------
Tools started as subprocesses are pointed at the proxy by the variables of
:func:`proxy_env`. Each client connection carries either

* plain HTTP requests in absolute form (``GET http://host:port/path HTTP/1.1``): each is
  decided by the :class:`~litmus_sandbox.EgressPolicy`, recorded as a flow, and
  forwarded (HTTP/1.1; ``Content-Length``, chunked and close-delimited bodies relayed as
  they arrive, never buffered whole). Client and upstream connections are kept alive
  when the message framing allows, one upstream connection per client connection; or
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
reach directly, recorded with decision ``blocked``. The bridge also hands over its
listening socket there (a connection whose first byte is ``HANDOFF``, carrying the
socket): the proxy accepts the tool's connections on it as it accepts its own TCP ones,
failures included (a refused upstream resets them), until the bridge closes that
connection.

h11 parses and frames every message (:mod:`._downstream` on the client side,
:mod:`._upstream` on the server side); :mod:`._relay` forwards plain requests,
:mod:`._tunnel` relays tunnels, and this module accepts connections and routes each
request to one of them.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from contextlib import suppress
from typing import Any

import anyio
import h11
import msgspec
from anyio.abc import ByteStream, SocketAttribute, TaskGroup, TaskStatus, UNIXSocketStream

from litmus_sandbox._config.egress import EgressPolicy
from litmus_sandbox._model.errors import UpstreamError
from litmus_sandbox.oracles.egress._downstream import ClientGone, Downstream
from litmus_sandbox.oracles.egress._flow import EgressFlow, EgressSink, close_flow, ignore
from litmus_sandbox.oracles.egress._http_wire import (
    Abort,
    BadMessage,
    Reset,
    proxy_env,
    report_decoder,
)
from litmus_sandbox.oracles.egress._netns import HANDOFF, REPORT_PATH
from litmus_sandbox.oracles.egress._relay import HttpRelay
from litmus_sandbox.oracles.egress._streams import reset, serve, serve_socket
from litmus_sandbox.oracles.egress._tunnel import CLOSED, tunnel

_log = logging.getLogger("litmus_sandbox.egress")

#: The largest blocked-connection report accepted from strict mode's bridge.
MAX_REPORT = 4096


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
        self.sink = sink or ignore
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
                await serve(tcp, self._serve_tcp)
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
                    tg.start_soon(serve, tcp, self._serve_tcp)
                    tg.start_soon(unix.serve, self._serve_unix)
                    task_status.started((self.host, self.port))
            finally:
                with suppress(OSError):
                    os.unlink(self.unix_path)

    async def _serve_tcp(self, stream: ByteStream) -> None:
        await self._connection(stream, trusted=False)

    async def _serve_unix(self, stream: ByteStream) -> None:
        if isinstance(stream, UNIXSocketStream):
            with anyio.move_on_after(self.idle_timeout):
                first = await _peek(stream)
            if first == HANDOFF:
                await self._take_listener(stream)
                return
        await self._connection(stream, trusted=True)

    async def _take_listener(self, stream: UNIXSocketStream) -> None:
        """Accept connections on the listening socket strict mode's bridge hands over, as
        TCP connections of this proxy's own, until the bridge closes ``stream``."""
        async with stream:
            try:
                _, fds = await stream.receive_fds(1, 1)
            except (*CLOSED, RuntimeError):
                return
            if not fds:
                return
            listener = socket.socket(fileno=fds[0])
            with listener:
                if listener.type != socket.SOCK_STREAM or listener.family not in _INET:
                    return
                # The connections outlive the accepting: they end by themselves.
                async with (
                    anyio.create_task_group() as connections,
                    anyio.create_task_group() as accepting,
                ):
                    accepting.start_soon(serve_socket, listener, self._serve_tcp, connections)
                    with suppress(*CLOSED):
                        await stream.send(HANDOFF)
                        while await stream.receive():
                            pass  # nothing more is said: the bridge's end closes it
                    accepting.cancel_scope.cancel()

    async def _connection(self, stream: ByteStream, *, trusted: bool) -> None:
        async with stream:
            try:
                await self._requests(stream, trusted)
            except Reset:
                reset(stream)  # closed as the upstream closed on us: the client sees the same
            except (*CLOSED, Abort, ClientGone):
                pass  # a peer went away mid-message; its flow was closed on the way out
            except Exception:
                # One connection's failure (a bug included) must not stop the proxy:
                # Listener.serve would cancel every other connection with it.
                _log.exception("egress proxy: connection failed")

    async def _requests(self, stream: ByteStream, trusted: bool) -> None:
        """Serve one client connection: a sequence of requests, or one tunnel."""
        with anyio.CancelScope() as idle:  # its deadline is set while a head is awaited
            down = Downstream(stream, idle, self.idle_timeout)
            relay = HttpRelay(down, self.policy, self.sink, self.connect_timeout)
            try:
                while True:
                    try:
                        request = await down.next_request()
                        if request is None:
                            return
                        target = request.target.decode("latin-1")
                        if request.method == b"CONNECT":
                            await tunnel(down, target, self.policy, self.sink, self.connect_timeout)
                            return
                        if target.startswith("/"):
                            if trusted and request.method == b"POST" and target == REPORT_PATH:
                                await self._report(down, request)
                                return
                            raise BadMessage(
                                400,
                                "this is a forward proxy: send absolute-form requests "
                                "(http://host/path) or CONNECT host:port",
                            )
                        if not await relay.forward(request, target):
                            return
                    except BadMessage as bad:
                        await down.refuse(bad)
                        return
            finally:
                await relay.drop_upstream()

    async def _report(self, down: Downstream, request: h11.Request) -> None:
        """Record one of strict mode's blocked-connection reports."""
        lengths = [v for n, v in request.headers if n == b"content-length"]
        if not lengths or not lengths[0].isdigit() or int(lengths[0]) > MAX_REPORT:
            raise BadMessage(400, f"a report needs a Content-Length of at most {MAX_REPORT}")
        body = bytearray()
        while (chunk := await down.next_data()) is not None:
            body += chunk
        try:
            report = report_decoder.decode(body)
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
        self.sink(flow)
        close_flow(flow, self.sink)
        await down.respond(204)


_INET = (socket.AF_INET, socket.AF_INET6)


async def _peek(stream: UNIXSocketStream) -> bytes:
    """The first byte a Unix connection sends, left unread (empty at its end)."""
    raw = stream.extra(SocketAttribute.raw_socket)
    while True:
        await anyio.wait_readable(raw)
        try:
            return raw.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            continue
        except OSError:
            return b""


def _remove_stale_socket(path: str) -> None:
    with suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
