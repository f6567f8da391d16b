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

A POST whose body is a well-formed ``tools/call`` is recorded (``_http_call.py``): its
policy decides whether it reaches the server, and a real call's response, plain JSON or
an event stream, is relayed byte for byte, with the stream's events teed into the step.

Episodes: one per MCP session (``Mcp-Session-Id``); a stateless client (no session id)
gets one per case id it names in ``_meta``, or one for the whole proxy run.
"""

from __future__ import annotations

import contextlib
import math
import os
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import h11
import httpx
import msgspec
from anyio.abc import SocketStream, TaskGroup, TaskStatus

from litmus_sandbox import Cassette, ConfigError, Policy, Sandbox
from litmus_sandbox.oracles._probe import Probe

from ._downstream import (
    CHUNK,
    MAX_BODY,
    REQUEST_ONLY,
    Downstream,
    forwardable,
    header,
)
from ._episodes import EpisodeSlot
from ._http_call import HttpToolCall, listing_result, read_raw
from ._jsonrpc import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    Message,
    batch_has_tool_call,
    cancelled_message,
    cancelled_request_of,
    case_id_of,
    error_message,
    id_key,
    listing_request,
    no_answer,
    parse,
    protocol_version_of,
    tool_call_of,
)
from ._schema import listed_schemas, output_schemas
from ._sse import SseSplitter, encode_event, event_data

T = TypeVar("T")

PathLike = str | os.PathLike[str]

#: A tools/list answer larger than this is relayed without learning schemas from it.
_MAX_LISTING = 8 << 20
#: Request headers naming the request's own method and target (newer revisions).
_PER_REQUEST = frozenset({b"mcp-method", b"mcp-name"})


def _decoded(raw: bytes, encoding: str | None) -> bytes | None:
    """A relayed body as sent before its content encoding (the relay itself stays
    byte-exact: this copy is only read); None for an encoding not understood."""
    coding = (encoding or "identity").strip().lower()
    try:
        if coding == "identity":
            return raw
        if coding in ("gzip", "x-gzip"):
            return zlib.decompress(raw, wbits=31, bufsize=1 << 16)
        if coding == "deflate":
            try:
                return zlib.decompress(raw)
            except zlib.error:
                return zlib.decompress(raw, wbits=-15)  # raw deflate, as some servers send
    except zlib.error:
        return None
    return None


def _answers(event: bytes, request_id: Any) -> bool:
    """Whether a server-sent event carries the response to ``request_id`` (alone, or in
    a batch of responses)."""
    data = event_data(event)
    if not data:
        return False
    if data.lstrip().startswith(b"["):
        try:
            batch = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return False
        return isinstance(batch, list) and any(
            isinstance(item, dict)
            and ("result" in item or "error" in item)
            and id_key(item.get("id")) == id_key(request_id)
            for item in batch
        )
    msg = parse(data)
    return msg.kind == "response" and id_key(msg.id) == id_key(request_id)


class HttpProxy:
    """Put the recorder in front of an MCP server spoken to over streamable HTTP.

    Args:
        upstream: the server's MCP endpoint URL; the proxy serves the same path.
        episodes, policy, root, case_id, agent, timeout, probes, replay, fsync: as for
            :class:`~litmus_sandbox.adapters.mcp.StdioProxy`.
        transport: an httpx transport for the upstream (tests, the egress oracle).

    Raises:
        ConfigError: an upstream that is not an http(s) URL; a bad timeout.
    """

    def __init__(
        self,
        upstream: str,
        *,
        episodes: PathLike,
        policy: Policy | PathLike | None = None,
        root: PathLike | None = None,
        case_id: str | None = None,
        agent: str | None = None,
        timeout: float | None = None,
        probes: Sequence[Probe] = (),
        replay: Sequence[PathLike] | Cassette | None = None,
        fsync: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"--upstream must be an http(s) URL, got {upstream!r}")
        if timeout is not None and timeout <= 0:
            raise ConfigError("the timeout must be a positive number of seconds")
        self.upstream = upstream
        self.episodes = os.fspath(episodes)
        #: Set once serving has ended and every episode is closed.
        self.stopped = anyio.Event()
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.endpoint = parts.path or "/"
        self.case_id = case_id
        self.agent = agent
        self.timeout = timeout
        self._transport = transport
        self._sandbox_kw: dict[str, Any] = {
            "root": root if root is not None else os.getcwd(),
            "episodes": episodes,
            "policy": policy,
            "timeout": timeout,
            "probes": probes,
            "replay": replay,
            "fsync": fsync,
            "egress": False,  # the server is remote: its egress is not ours to see
        }
        self._slots: dict[str, EpisodeSlot] = {}
        self._stopping = anyio.Event()
        #: Why the proxy was stopped early (a signal), or None.
        self.stop_reason: str | None = None
        #: Relayed requests waiting for the server's answer.
        self._waiting: set[_Waiting] = set()
        #: In-flight recorded calls by (episode key, request id key), for cancellation.
        self.calls: dict[tuple[str, Any], HttpToolCall] = {}
        #: Tools' output schemas, learnt from the tools/list answers relayed.
        self.output_schemas: dict[str, dict[str, Any]] = {}
        #: Whether the tools were listed (by a client, or by the proxy for itself).
        self.listed = False
        self._learning: anyio.Event | None = None

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
                    task_status.started(bound)
                    await listener.serve(self._connection, task_group=tg)
            finally:
                with anyio.CancelScope(shield=True):
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
            for slot in self._slots.values():
                slot.abort(reason)
            running = list(self.calls.values())
            for call in running:
                call.state.stopped = reason  # its reply says why (see CallState.finalize)
                call.scope.cancel()
            waiting = [wait for wait in self._waiting if not wait.done.is_set()]
            for wait in waiting:
                wait.stop()  # each answers its client (see relay)
            with anyio.move_on_after(5):
                for call in running:
                    await call.answered.wait()  # not the stream the server may keep open
                for wait in waiting:
                    await wait.done.wait()
        scope.cancel()

    # ------------------------------------------------------------ episodes

    def slot(self, key: str, outer: TaskGroup | None = None) -> EpisodeSlot:
        """The episode of a session (or of a stateless case id), created on first use."""
        slot = self._slots.get(key)
        if slot is None:
            meta = {"transport": "streamable-http", "server": self.upstream}
            if key.startswith("session:"):
                meta["session_id"] = key.removeprefix("session:")
            slot = self._slots[key] = EpisodeSlot(
                self.sandbox,
                outer or self._outer,
                case_id=self.case_id,
                agent=self.agent,
                meta=meta,
            )
        return slot

    @staticmethod
    def offer(slot: EpisodeSlot, msg: Message) -> None:
        """Let a request name the episode's case id (and protocol revision)."""
        slot.offer_case_id(case_id_of(msg), msg.method)
        if (version := protocol_version_of(msg)) is not None:
            slot.note("protocol_version", version)

    def key_for(self, headers: Sequence[tuple[bytes, bytes]], msg: Message) -> str:
        if (sid := header(headers, b"mcp-session-id")) is not None:
            return f"session:{sid}"
        if self.case_id is None and (case := case_id_of(msg)) is not None:
            return f"case:{case}"
        return "proxy"

    async def _end_session(self, key: str) -> None:
        slot = self._slots.pop(key, None)
        if slot is None:
            return
        # Calls of the session still running are interrupted first (each records its
        # step, as a cancelled call does): nothing is recorded after the episode's end.
        running = [call for (k, _), call in list(self.calls.items()) if k == key]
        for call in running:
            call.scope.cancel()
        with anyio.move_on_after(5, shield=True):
            for call in running:
                await call.finished.wait()
        await slot.close()

    # ------------------------------------------------------------ connections

    async def _connection(self, stream: SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_BODY)
        async with stream:
            while True:
                try:
                    request = await self._read(conn, stream)
                except (h11.RemoteProtocolError, anyio.BrokenResourceError):
                    return
                if request is None:
                    return
                event, body = request
                down = Downstream(conn, stream)
                try:
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
    ) -> tuple[h11.Request, bytes] | None:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await stream.receive(CHUNK)
                except anyio.EndOfStream:
                    data = b""
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    return None
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request, bytes(body)
            else:  # ConnectionClosed, PAUSED
                return None

    async def _exchange(self, down: Downstream, event: h11.Request, body: bytes) -> None:
        method = event.method.decode("ascii")
        target = event.target.decode("latin-1")
        raw_headers = list(event.headers.raw_items())
        headers = forwardable(raw_headers, REQUEST_ONLY)
        url = self.origin + target
        path = urlsplit(target).path
        if method == "POST" and path == self.endpoint:
            msg = parse(body)
            if msg.kind == "other" and batch_has_tool_call(body):
                text = "litmus-sandbox: a tools/call inside a JSON-RPC batch cannot be recorded"
                await down.whole(400, b"application/json", error_message(None, -32600, text))
                return
            key = self.key_for(raw_headers, msg)
            if msg.kind == "request" and msg.method != "initialize":
                # Only sessions that began (initialize answered with a session id) or
                # called a tool have an episode: a failed discovery probe records nothing.
                slot = self._slots.get(key)
                if slot is not None and not slot.opened:
                    self.offer(slot, msg)
            call = tool_call_of(msg)
            if call is not None:
                await HttpToolCall(self, key, down, url, headers, body, msg, *call).run()
                return
            if msg.method == "notifications/cancelled" and await self._cancel(key, msg, down):
                return
            await self.relay(down, method, url, headers, body, msg=msg)
            return
        await self.relay(down, method, url, headers, body)
        if method == "DELETE" and (sid := header(raw_headers, b"mcp-session-id")) is not None:
            await self._end_session(f"session:{sid}")

    async def learn_schemas(
        self, url: str, headers: list[tuple[bytes, bytes]], like: Message
    ) -> None:
        """Ask the server for its tools (once) before the proxy answers a call itself.

        A client validates a result against the tool's output schema and may list the
        tools only after its first call (the official SDK does): a stand-in result must
        carry structure that fits. The request goes with the client's headers (session,
        protocol revision), its per-request method headers rewritten; the answers are
        the proxy's own.
        """
        if self._learning is not None:  # another call is asking: wait for its answer
            await self._learning.wait()
            return
        self._learning = anyio.Event()
        try:
            await self._learn(url, headers, like)
        finally:
            self.listed = True
            self._learning.set()

    async def _learn(self, url: str, headers: list[tuple[bytes, bytes]], like: Message) -> None:
        plain = [(n, v) for n, v in headers if n.lower() not in _PER_REQUEST]
        if any(n.lower() == b"mcp-method" for n, _ in headers):
            plain.append((b"Mcp-Method", b"tools/list"))

        async def fetch(rid: str, cursor: Any) -> Any:
            body = listing_request(rid, cursor, like)
            try:
                response = await self.client.post(url, headers=plain, content=body)
            except httpx.HTTPError:
                return None
            if not response.is_success:
                return None
            ctype = response.headers.get("content-type", "")
            return listing_result(response.content, ctype, rid)

        with anyio.move_on_after(self.timeout or 30):
            self.output_schemas.update(await listed_schemas(fetch))

    async def _cancel(self, key: str, msg: Message, down: Downstream) -> bool:
        """Cancel a recorded call the client gave up on; True if answered here."""
        rid = cancelled_request_of(msg)
        call = self.calls.get((key, id_key(rid))) if rid is not None else None
        if call is None:
            return False
        call.scope.cancel()
        if call.state.forwarded:
            return False  # the server saw the call: it hears of the cancellation too
        await down.whole(202, b"application/json", b"")
        return True

    async def relay(
        self,
        down: Downstream,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        msg: Message | None = None,
    ) -> None:
        """Forward one request and stream its response back, bytes untouched.

        A JSON-RPC request waits for its answer at most ``timeout`` seconds: for the
        server's JSON answer, or for the event answering it on a stream (the rest of that
        stream is the server's to keep open). Only waiting for the server counts, never
        writing to the client. Past that, the client gets ``-32001``, the server
        ``notifications/cancelled``, and the episode ends aborted, as over stdio; a stop
        with a reason answers ``-32000``.
        """
        wait = None
        if msg is not None and msg.kind == "request":
            deadline = math.inf if self.timeout is None else anyio.current_time() + self.timeout
            wait = _Waiting(deadline)
            self._waiting.add(wait)
        request = self.client.build_request(method, url, headers=headers, content=body)
        try:
            await self._relay(down, request, headers, msg, wait)
        except _Unanswered as unanswered:
            assert msg is not None
            await self._unanswered(down, url, headers, msg, unanswered.mid_event)
        finally:
            if wait is not None:
                self._waiting.discard(wait)
                wait.done.set()

    async def cancel_upstream(
        self, url: str, headers: list[tuple[bytes, bytes]], request_id: Any, reason: str
    ) -> None:
        """Tell the server the proxy gave up on ``request_id`` (best effort, bounded)."""
        body = cancelled_message(request_id, reason)
        with anyio.move_on_after(2), contextlib.suppress(httpx.HTTPError):
            await (await self.client.post(url, headers=headers, content=body)).aclose()

    async def _unanswered(
        self,
        down: Downstream,
        url: str,
        headers: list[tuple[bytes, bytes]],
        msg: Message,
        mid_event: bool,
    ) -> None:
        """A relayed request the server left unanswered: stopped early, or timed out."""
        if self.stop_reason is not None:
            reply = error_message(msg.id, CONNECTION_CLOSED, f"litmus-sandbox: {self.stop_reason}")
        else:
            reason = no_answer(str(msg.method), self.timeout)
            reply = error_message(msg.id, REQUEST_TIMEOUT, f"litmus-sandbox: {reason}")
            if msg.method != "initialize":  # no session yet; and it cannot be cancelled
                if (slot := self._slots.get(self.key_for(headers, msg))) is not None:
                    slot.abort(reason)
                await self.cancel_upstream(url, headers, msg.id, reason)
        if mid_event:
            # Half an event (or an encoded stream) went out: nothing more can be said on
            # it; the connection is dropped, which the client sees as the end.
            raise anyio.BrokenResourceError("no answer can follow half an event")
        with anyio.move_on_after(2, shield=True):
            if down.started:
                await down.body(encode_event(reply))
                await down.end()
            else:
                await down.whole(200, b"application/json", reply)

    async def _relay(
        self,
        down: Downstream,
        request: httpx.Request,
        headers: list[tuple[bytes, bytes]],
        msg: Message | None,
        wait: _Waiting | None,
    ) -> None:
        rid = msg.id if msg is not None and msg.kind == "request" else None
        try:
            sending = self.client.send(request, stream=True)
            response = await (wait.upstream(sending) if wait is not None else sending)
        except httpx.HTTPError as exc:
            text = f"litmus-sandbox: the MCP server is unreachable: {exc}"
            await down.whole(502, b"application/json", error_message(rid, CONNECTION_CLOSED, text))
            return
        try:
            if msg is not None and msg.method == "initialize" and response.is_success:
                # The session id arrives with the answer: its episode takes the case id
                # the client named on initialize.
                sid = response.headers.get("mcp-session-id")
                key = f"session:{sid}" if sid is not None else self.key_for(headers, msg)
                self.offer(self.slot(key), msg)
            ctype = response.headers.get("content-type", "")
            encoding = response.headers.get("content-encoding", "identity")
            status = response.status_code
            out_headers = forwardable(response.headers.raw)
            reason = response.reason_phrase.encode("latin-1")
            listing = msg is not None and msg.method == "tools/list" and response.is_success
            seen = bytearray()
            if wait is not None and not ctype.startswith("text/event-stream"):
                # One JSON answer: read it whole from the server (bounded), then pass it on.
                raw = await wait.upstream(read_raw(response))
                wait = None
                await down.start(status, out_headers, reason)
                await down.body(raw)
                seen += raw[:_MAX_LISTING]
            else:
                await down.start(status, out_headers, reason)
                # On a stream, the request is answered by one of its events; an encoding
                # this proxy cannot read hides them: then the headers count as the answer.
                events = _EventWatch.of(encoding) if wait is not None else None
                if events is None:
                    wait = None
                chunks = response.aiter_raw().__aiter__()
                try:
                    while True:
                        try:
                            following = anext(chunks)
                            chunk = await (wait.upstream(following) if wait else following)
                        except StopAsyncIteration:
                            break
                        except _Unanswered as unanswered:
                            unanswered.mid_event = events is None or events.mid_event
                            raise
                        await down.body(chunk)
                        if listing and len(seen) < _MAX_LISTING:
                            seen += chunk
                        if wait is not None and events is not None and events.answered(chunk, rid):
                            wait.done.set()  # the client has its answer: a stop need not wait
                            events, wait = None, None  # the rest is the server's to keep open
                except httpx.HTTPError:
                    pass  # the server dropped the stream: end ours where it ended
            await down.end()
            if listing and msg is not None and len(seen) < _MAX_LISTING:
                plain = _decoded(bytes(seen), response.headers.get("content-encoding"))
                if plain is not None:
                    result = listing_result(plain, ctype, msg.id)
                    self.output_schemas.update(output_schemas(result))
                    self.listed = True
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()


class _Unanswered(Exception):
    """A relayed request's wait for the server ended (its deadline, or a stop)."""

    def __init__(self) -> None:
        super().__init__("no answer")
        #: Whether part of an event (or of an encoded stream) already went to the client.
        self.mid_event = False


class _Waiting:
    """A relayed request waiting for its answer. Only its waits for the server are
    bounded (by ``deadline``) and cut by a stop, never its writes to the client."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._scope: anyio.CancelScope | None = None
        self._stopped = False
        #: Set once the relay is over (the client has its answer, or an error).
        self.done = anyio.Event()

    async def upstream(self, awaitable: Awaitable[T]) -> T:
        """``await awaitable``, within the deadline. Raises _Unanswered past it or on stop."""
        with anyio.CancelScope(deadline=self.deadline) as scope:
            self._scope = scope
            if self._stopped:
                scope.cancel()
            try:
                return await awaitable
            finally:
                self._scope = None
        raise _Unanswered

    def stop(self) -> None:
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()


class _EventWatch:
    """Finds the event answering a request in a stream as it is relayed."""

    def __init__(self, decode: Callable[[bytes], bytes]) -> None:
        self._decode = decode
        self._splitter = SseSplitter()

    @classmethod
    def of(cls, encoding: str) -> _EventWatch | None:
        """For a stream sent with ``encoding`` (None: one this proxy cannot read)."""
        if encoding in ("identity", ""):
            return cls(lambda chunk: chunk)
        if encoding in ("gzip", "x-gzip", "deflate"):
            inflate = zlib.decompressobj(wbits=47)  # gzip or zlib, by its header
            return cls(inflate.decompress)
        return None

    @property
    def mid_event(self) -> bool:
        return bool(self._splitter.rest())

    def answered(self, chunk: bytes, request_id: Any) -> bool:
        try:
            plain = self._decode(chunk)
        except zlib.error:
            return True  # unreadable after all: stop waiting rather than cut it
        return any(_answers(event, request_id) for event in self._splitter.feed(plain))
