"""One recorded ``tools/call`` over streamable HTTP.

The runner POSTs the client's body upstream with the client's headers. A JSON answer is
read whole (it is one message). An event stream is relayed to the client as it arrives:
the response headers at once, each notification event as soon as it is complete (teed
into the step's ``meta["mcp"]["notifications"]``), until the event that answers this
request. That event is held back while the step is written, then sent, followed by
whatever the server streams after it. So a real call is relayed byte for byte, and the
client never holds an answer the record does not yet have.

Calls the server never sees (stub, deny, replay, dropped swallow) and calls it never
answered (timeout, crash) are answered by the proxy: plain JSON when nothing was sent
yet, an event on the open stream otherwise.

Cancelling a call changes nothing else on the wire: the step is recorded interrupted,
and the server's stream goes on to the client as the server keeps it (its later
progress, and its answer if it sends one), until the server ends it. The stream is read
by a task of the call's own into a small buffer, so the runner can be cancelled while it
waits without losing a byte, and its writes to the client are never cut in two.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import anyio
import httpx
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from litmus_sandbox import ConfigError

from ._downstream import Downstream, forwardable
from ._http_answer import read_raw
from ._http_sessions import HttpSessions
from ._jsonrpc import (
    CONNECTION_CLOSED,
    PROTOCOL_VERSION_META_KEY,
    Message,
    error_message,
    id_key,
    no_answer,
    parse,
)
from ._recording import ANSWERED_BY_THE_PROXY, CallState, UpstreamGone, decode_envelope
from ._sse import SseSplitter, encode_event, event_data


class HttpToolCall:
    """Record one ``tools/call`` POST and answer it."""

    _tg: TaskGroup

    def __init__(
        self,
        proxy: HttpSessions,
        key: str,
        down: Downstream,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        msg: Message,
        tool: str,
        args: dict[str, Any],
    ) -> None:
        self.proxy = proxy
        self.key = key
        self.down = down
        self.url = url
        self.headers = headers
        self.msg = msg
        self.tool = tool
        self.args = args
        self.state = CallState(msg.id, body, stateless=PROTOCOL_VERSION_META_KEY in msg.meta)
        self.state.output_schema = proxy.output_schemas.get(tool)
        self.scope = anyio.CancelScope()
        #: Set once the call is over (its step recorded, its reply sent or given up).
        self.finished = anyio.Event()
        #: Set once the client has the call's answer (what the server streams after it
        #: may go on).
        self.answered = anyio.Event()
        self._response: httpx.Response | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        #: The event stream's chunks, read by a task of the call's own (_read_stream).
        self._stream: MemoryObjectReceiveStream[bytes] | None = None
        self._stream_error: httpx.HTTPError | None = None
        self._splitter = SseSplitter()
        self._held = b""  # the answering event and the bytes after it, sent after the step
        self._plain: tuple[int, list[tuple[bytes, bytes]], bytes, bytes] | None = None

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                try:
                    await self._run()
                finally:
                    tg.cancel_scope.cancel()  # the stream's reader, if still reading
        finally:
            if self._stream is not None:
                self._stream.close()
            with anyio.CancelScope(shield=True):
                if isinstance(self._chunks, AsyncGenerator):
                    await self._chunks.aclose()
                if self._response is not None:
                    await self._response.aclose()
            self.finished.set()

    async def _run(self) -> None:
        proxy, state = self.proxy, self.state
        slot = proxy.slot(self.key)
        proxy.offer(slot, self.msg)
        call_key = (self.key, id_key(self.msg.id))
        proxy.calls[call_key] = self
        try:
            with self.scope:
                ep = await slot.recorder()
                if (
                    state.output_schema is None
                    and not proxy.listed
                    and ep.sandbox.policy.for_tool(self.tool).mode in ANSWERED_BY_THE_PROXY
                ):
                    await proxy.learn_schemas(self.url, self.headers, self.msg)
                    state.output_schema = proxy.output_schemas.get(self.tool)
                try:
                    await ep.call_with(
                        lambda _t, _a: self._forward(),
                        self.tool,
                        self.args,
                        finalize=functools.partial(
                            state.finalize, cap=ep.sandbox.max_result_bytes, whole=ep.whole_shown
                        ),
                    )
                except ConfigError:
                    if not ep.ended:
                        raise
                    # The session ended (DELETE) while the call ran: no step can follow the
                    # episode's end; the client is told, the other sessions go on.
                    state.reply_kind = "error"
                    text = "litmus-sandbox: the session ended while this call ran"
                    state.reply = error_message(self.msg.id, CONNECTION_CLOSED, text)
            if state.timed_out:
                reason = no_answer(f"tools/call {self.tool!r}")
                slot.abort(reason)
                await proxy.cancel_upstream(self.url, self.headers, state.request_id, reason)
            elif state.reply_kind == "error" and self._plain is None:
                # No HTTP answer at all (connection refused or dropped mid-stream).
                slot.abort(state.failure or "the MCP server did not answer")
            await self._reply()
        finally:
            proxy.calls.pop(call_key, None)
            self.answered.set()

    async def _reply(self) -> None:
        state, down = self.state, self.down
        # A real call the server answered over HTTP, even without a JSON-RPC answer
        # (a 404 for an expired session): the client gets the server's own response.
        relay = state.reply_kind == "relay" or (
            state.reply_kind == "error" and state.fidelity == "real" and self._plain is not None
        )
        if relay and self._plain is not None:
            status, headers, reason, body = self._plain
            await down.start(status, headers, reason)
            await down.body(body)
            await down.end()
        elif relay and self._stream is not None:
            await down.body(self._held)
            self.answered.set()  # the rest of the stream is the server's to keep open
            await self._rest_of_stream()
        elif state.reply_kind == "none" and self._stream is not None:
            # Cancelled by the client: the server's stream goes on as the server keeps it.
            await down.body(self._splitter.rest())
            self.answered.set()
            await self._rest_of_stream()
        elif state.reply_kind in ("result", "error"):
            if down.started:
                await down.body(encode_event(state.reply))
                await down.end()
            else:
                await down.whole(200, b"application/json", state.reply)
        elif down.started:
            await down.end()  # interrupted: close the stream, nothing to say
        # An interrupted call with nothing sent leaves the response unsent: the
        # connection closes, which is all a client that cancelled expects.

    async def _rest_of_stream(self) -> None:
        assert self._stream is not None
        async for chunk in self._stream:
            await self.down.body(chunk)
        await self.down.end()  # where the server ended it (dropped, too)

    async def _read_stream(
        self, chunks: AsyncIterator[bytes], send: MemoryObjectSendStream[bytes]
    ) -> None:
        async with send:
            try:
                async for chunk in chunks:
                    await send.send(chunk)
            except httpx.HTTPError as exc:
                self._stream_error = exc

    async def _forward(self) -> Any:
        """The runner: POST upstream, relay the stream's notifications, return the answer."""
        proxy, state = self.proxy, self.state
        request = proxy.client.build_request(
            "POST", self.url, headers=self.headers, content=state.request
        )
        # Being sent: the server may have it before it answers (a stop or a timeout
        # meanwhile still tells it); a refused connection says it never got there.
        state.forwarded = True
        try:
            response = await proxy.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            state.forwarded = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            state.failure = f"the MCP server is unreachable: {exc}"
            raise UpstreamGone(state.failure) from exc
        self._response = response
        headers = forwardable(response.headers.raw)
        reason = response.reason_phrase.encode("latin-1")
        ctype = response.headers.get("content-type", "")
        # A compressed body cannot be relayed byte-exactly *and* read: relay it decoded.
        encoded = response.headers.get("content-encoding", "identity") != "identity"
        if encoded:
            drop = (b"content-encoding", b"content-length")
            headers = [(n, v) for n, v in headers if n.lower() not in drop]
        try:
            if not ctype.startswith("text/event-stream"):
                raw = await response.aread() if encoded else await read_raw(response)
                self._plain = (response.status_code, headers, reason, raw)
                envelope = decode_envelope(raw)
                if envelope is None or "id" not in envelope:
                    raise UpstreamGone(f"HTTP {response.status_code} without a JSON-RPC answer")
                return state.answered(raw, envelope)
            headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
            await self.down.start(response.status_code, headers, reason)
            chunks = self._chunks = response.aiter_bytes() if encoded else response.aiter_raw()
            send, self._stream = anyio.create_memory_object_stream[bytes](16)
            self._tg.start_soon(self._read_stream, chunks, send)
            splitter = self._splitter
            async for chunk in self._stream:  # cancelled while waiting: no chunk is lost
                for event in splitter.feed(chunk):
                    answer = self._answer(event)
                    if answer is not None:
                        self._held = event + splitter.rest()
                        return state.answered(*answer)
                    with anyio.CancelScope(shield=True):  # never half an event
                        await self.down.body(event)
            if self._stream_error is not None:
                raise self._stream_error
            raise UpstreamGone("the MCP server closed the event stream without answering")
        except httpx.HTTPError as exc:
            state.failure = f"the MCP server failed mid-call: {exc}"
            raise UpstreamGone(state.failure) from exc
        except UpstreamGone as exc:
            state.failure = str(exc)
            raise

    def _answer(self, event: bytes) -> tuple[bytes, dict[str, Any]] | None:
        """(data, envelope) if this event answers our request; else tee it into the step."""
        data = event_data(event)
        if not data:
            return None
        msg = parse(data)
        if msg.kind == "response" and id_key(msg.id) == id_key(self.state.request_id):
            envelope = decode_envelope(data)
            assert envelope is not None
            return data, envelope
        if msg.body is not None:
            self.state.note(msg.body)
        return None
