"""The streamable-HTTP proxy: a reverse proxy that records ``tools/call``.

Theory of operation
-------------------
A small HTTP/1.1 server (h11 over anyio sockets, one task per connection, all in one
task group) forwards every request to the upstream origin with the same method, target
(path and query), headers (``Mcp-Session-Id``, ``MCP-Protocol-Version``, the per-request
method headers, authorization: all verbatim, hop-by-hop headers aside) and body, with
httpx. Responses come back the same way: status, reason, headers and body bytes as the
server sent them; server-sent-event streams (GET streams, POST streams) are relayed chunk
by chunk as they arrive, never buffered whole. DELETE ends the session upstream and its
episode here.

A POST whose body is a well-formed ``tools/call`` is recorded (``_http_call.py``): the
session's relay core (``_relay/``, one ``Relay`` per session) takes it and decides its
life (forwarding, its answer or task, a cancel, the reply once its step is written), as
over stdio; its policy decides whether it reaches the server, and a real call's
response, plain JSON or an event stream, is relayed byte for byte, with the stream's
events teed into the step. ``tasks/*`` requests about a task the core knows go through
it too (``_http_tasks.py``), and so does every other JSON-RPC request relayed
(``_http_relay.py``: its deadline, its answer; an ``initialize`` has a core of its own
until its answer names its session). A stop with a reason is the cores' ``stop``: the
error each gives a request still waiting goes to that request's exchange.

Episodes: one per MCP session (``Mcp-Session-Id``); a stateless client (no session id)
gets one per case id it names in ``_meta``, else one per exchange (never merged); an
episode ends at DELETE, or ``complete`` once its client is gone with nothing pending
(``_http_sessions.py`` says how that is decided); either end is the session core's
``session_ended``.

The proxy is built in layers, one module each: ``_http_sessions.py`` (configuration,
episodes, calls in flight, the tools' schemas), ``_http_relay.py`` (relaying what is not
recorded), ``_http_post.py`` (the JSON-RPC messages POSTed to the endpoint: refused,
recorded, cancelled, relayed), and this one (the server: connections, routing, stop).
``_http_answer.py`` waits for and finds the server's answer for both the relay and the
recorded call.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import anyio
import h11
import httpx
from anyio.abc import SocketStream, TaskStatus

from litmus_sandbox import ConfigError, Sandbox

from ._downstream import CHUNK, REQUEST_ONLY, Downstream, forwardable, header
from ._fdstream import LineTooLong
from ._http_answer import Waiting
from ._http_call import HttpToolCall
from ._http_exchange import until_hung_up
from ._http_post import HttpEndpoint
from ._jsonrpc import (
    id_key,
    parse,
)
from ._relay import ToClient
from ._relay._limits import ID_SCAN_BYTES, STALL_SECONDS_WITHOUT_LIMIT


class HttpProxy(HttpEndpoint):
    """Put the recorder in front of an MCP server spoken to over streamable HTTP.

    Args:
        upstream: the server's MCP endpoint URL; the proxy serves the same path.
        episodes, policy, root, case_id, agent, timeout, probes, replay, fsync, cache: as
            for :class:`~litmus_sandbox.adapters.mcp.StdioProxy`.
        transport: an httpx transport for the upstream (tests, the egress oracle).
        max_message_bytes: the largest request body a client may send (default 64 MiB).
        session_grace: seconds after which a session whose client is gone (no open
            connection, nothing in progress) ends ``complete`` (None: only at DELETE or
            when the proxy stops).

    Raises:
        ConfigError: an upstream that is not an http(s) URL; a bad timeout.
    """

    async def serve(
        self, host: str, port: int, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; ``task_status`` gets the bound port (``port=0`` picks one).

        Raises:
            ConfigError: the address cannot be bound.
        """
        try:
            await self._serve(host, port, task_status)
        finally:
            self.stopped.set()

    async def _serve(self, host: str, port: int, task_status: TaskStatus[int]) -> None:
        try:
            listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        bound = listener.extra(anyio.abc.SocketAttribute.local_port)
        timeout = httpx.Timeout(None, connect=10.0)
        async with (
            Sandbox(**self._sandbox_kw) as sandbox,
            httpx.AsyncClient(timeout=timeout, transport=self._transport) as client,
            anyio.create_task_group() as outer,
        ):
            self.sandbox, self.client, self._outer = sandbox, client, outer
            # Forward the client's headers, and only those: no httpx defaults added
            # (Accept-Encoding, User-Agent...); Host and the body's length are still set.
            for name in list(client.headers):
                del client.headers[name]
            try:
                async with listener, anyio.create_task_group() as tg:
                    tg.start_soon(self._stop_when_asked, tg.cancel_scope)
                    tg.start_soon(self.watch_deadlines)
                    task_status.started(bound)
                    await listener.serve(self._connection, task_group=tg)
            finally:
                for presence in self._presence.values():
                    if presence.timer is not None:
                        presence.timer.cancel()  # the episodes end here, now
                with anyio.CancelScope(shield=True):
                    # Calls left running outside a connection (tasks) are interrupted.
                    running = list(self.calls.values())
                    for call in running:
                        call.scope.cancel()
                    with anyio.move_on_after(5):
                        for call in running:
                            await call.finished.wait()
                    for slot in list(self._slots.values()):
                        await slot.close()

    def stop(self, reason: str | None = None) -> None:
        """Stop serving. Without ``reason``, open connections are dropped and open episodes
        end ``complete``. With one (a signal), the run was cut short: calls in flight are
        recorded ``interrupted`` and their clients get ``-32000``, so do requests waiting
        for the server, and open episodes end ``aborted`` with ``reason``."""
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
        self._stopping.set()

    async def _stop_when_asked(self, scope: anyio.CancelScope) -> None:
        await self._stopping.wait()
        reason = self.stop_reason
        if reason is not None:
            self._stop_cores(reason)
            for key, slot in self._slots.items():
                # A session whose client is gone finished cleanly; a probe records nothing.
                if not self.gone(key) and (slot.touched or slot.opened):
                    slot.abort(reason)
            running = list(self.calls.values())
            for call in running:
                call.stop(None)  # told by its core, unless it had left the core's table
            waiting = [wait for wait in self._waiting if not wait.done.is_set()]
            for wait in waiting:
                wait.stop()  # each answers its client (see relay)
            with anyio.move_on_after(5):
                for call in running:
                    await call.answered.wait()  # not the stream the server may keep open
                for wait in waiting:
                    await wait.done.wait()
        scope.cancel()

    def _stop_cores(self, reason: str) -> None:
        """A signal: each session's core stops (a session whose client is gone finished
        cleanly); the error it gives each request still waiting goes to that request's
        exchange (a call's, or a relayed request's)."""
        now = anyio.current_time()
        for key, core in list(self._cores.items()):
            if self.gone(key):
                core.client_closed(now)
            handles = {p.key: p.handle for p in core.pending.values()}
            for action in self.perform(key, core.stop(reason)):
                if not isinstance(action, ToClient):
                    continue
                handle = handles.get(id_key(parse(action.data).id))
                reply = action.data.rstrip(b"\n")
                if isinstance(handle, HttpToolCall):
                    handle.stop(reply)
                elif isinstance(handle, Waiting):
                    handle.expire(reply)

    async def _connection(self, stream: SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_message_bytes)
        self._connections += 1
        conn_id, keys = self._connections, set[str]()
        try:
            await self._serve_connection(conn, stream, conn_id, keys)
        finally:
            self.disconnect(keys)

    async def _serve_connection(
        self, conn: h11.Connection, stream: SocketStream, conn_id: int, keys: set[str]
    ) -> None:
        async with stream:
            while True:
                try:
                    request = await self._read(conn, stream)
                except (h11.RemoteProtocolError, anyio.BrokenResourceError):
                    return
                if request is None:
                    return
                event, body = request
                self._exchanges += 1
                down = Downstream(
                    conn,
                    stream,
                    conn_id,
                    keys,
                    self.timeout or STALL_SECONDS_WITHOUT_LIMIT,
                    self._exchanges,
                )
                try:
                    if isinstance(body, LineTooLong):
                        await self._too_long(down, event, body)
                        return
                    await self._exchange(down, event, body)
                except (
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                    h11.LocalProtocolError,
                ):
                    return  # the client left mid-response
                if not down.finished or conn.our_state is not h11.DONE:
                    return
                if conn.their_state is not h11.DONE:
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return

    async def _read(
        self, conn: h11.Connection, stream: SocketStream
    ) -> tuple[h11.Request, bytes | LineTooLong] | None:
        """The next request and its body (what was read of it, a ``LineTooLong``, when it
        is over the limit: the rest is left unread)."""
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = await self._next_event(conn, stream)
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_message_bytes:
                    assert request is not None
                    return request, LineTooLong(len(body), bytes(body[:ID_SCAN_BYTES]))
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request, bytes(body)
            else:  # ConnectionClosed, PAUSED
                return None

    @staticmethod
    async def _next_event(conn: h11.Connection, stream: SocketStream) -> Any:
        while (event := conn.next_event()) is h11.NEED_DATA:
            try:
                data = await stream.receive(CHUNK)
            except anyio.EndOfStream:
                data = b""
            conn.receive_data(data)
        return event

    async def _too_long(self, down: Downstream, event: h11.Request, read: LineTooLong) -> None:
        """A body over ``max_message_bytes``: never read whole, never relayed. The client
        gets 413 with a JSON-RPC error, the session's end record keeps the refusal and its
        episode ends aborted; the rest of the body is drained (briefly), then the
        connection closes."""
        raw_headers = list(event.headers.raw_items())
        key = self.key_for(raw_headers, parse(b""), down.exchange_id)
        self.arrive(key, down.keys)
        try:
            self.slot(key).touch()
            actions = self.perform(key, self.core(key).client_too_long(read.size, read.head))
            body = b"".join(a.data.rstrip(b"\n") for a in actions if isinstance(a, ToClient))
            headers = [
                (b"Content-Type", b"application/json"),
                (b"Content-Length", str(len(body)).encode()),
                (b"Connection", b"close"),
            ]
            await down.start(413, headers, b"")
            await down.body(body)
            await down.end()
            with anyio.move_on_after(2):  # a client still sending would see a reset
                while not isinstance(
                    await self._next_event(down.conn, down.stream),
                    h11.EndOfMessage | h11.ConnectionClosed,
                ):
                    pass
        finally:
            self.leave(key)

    async def _exchange(self, down: Downstream, event: h11.Request, body: bytes) -> None:
        method = event.method.decode("ascii")
        target = event.target.decode("latin-1")
        raw_headers = list(event.headers.raw_items())
        headers = forwardable(raw_headers, REQUEST_ONLY)
        url = self.origin + target
        path = urlsplit(target).path
        if method == "POST" and path == self.endpoint:
            await self.post(down, raw_headers, headers, url, body)
            return
        sid = header(raw_headers, b"mcp-session-id")
        session = f"session:{sid}" if sid is not None else None
        if session is not None:
            self.arrive(session, down.keys)  # a GET stream keeps its session present
        try:
            if method == "GET":
                await self._relay_while_connected(down, url, headers, body)
            else:
                await self.relay(down, method, url, headers, body)
        finally:
            if session is not None:
                self.leave(session)
        if method == "DELETE" and session is not None:
            await self._end_session(session)

    async def _relay_while_connected(
        self, down: Downstream, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        """A GET stream, relayed until the server ends it or the client hangs up: one the
        server keeps open and silent would otherwise keep its session present long after
        its client left (a client hanging up is seen only at the next write to it)."""
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await until_hung_up(down)
                tg.cancel_scope.cancel()  # hung up: the relay stops

            tg.start_soon(watch)
            await self.relay(down, "GET", url, headers, body)
            tg.cancel_scope.cancel()
