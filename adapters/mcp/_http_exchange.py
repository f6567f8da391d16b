"""One JSON-RPC request POSTed upstream whose answer is held back until it is recorded.

Theory of operation
-------------------
:meth:`Exchange.answer` POSTs the client's body upstream with the client's headers. A
JSON answer is read whole (it is one message) and kept. An event stream is relayed to
the client as it arrives: the response headers at once, each other event as soon as it
is complete (teed to ``note``), until the event that answers the request. That event is
held back; :meth:`Exchange.release` sends it, followed by whatever the server streams
after it, so the client never holds an answer the record does not yet have.
:meth:`Exchange.release_rest` does the same for a request given up on (cancelled): what
the server keeps sending reaches the client as the server sends it.

The stream is read by a task of the exchange's own into a small buffer, so a caller can
be cancelled while it waits without losing a byte, and writes to the client are never
cut in two. Used by the recorded ``tools/call`` (``_http_call.py``) and by the
``tasks/result`` that brings a task's result (``_http_tasks.py``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from types import TracebackType
from typing import Any

import anyio
import h11
import httpx
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._downstream import CHUNK, ClientStalled, Downstream, forwardable
from ._http_answer import read_raw
from ._jsonrpc import id_key, parse
from ._recording import UpstreamGone, decode_envelope
from ._relay._limits import DEFAULT_MAX_DEPTH, too_deep
from ._sse import SseSplitter, event_data

#: Errors writing to (or reading from) a client that left.
CLIENT_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, h11.LocalProtocolError)


async def until_hung_up(down: Downstream) -> None:
    """Return once the client of ``down`` hangs up (it sends nothing more on a relayed
    request's connection; what it might send is still fed to h11)."""
    with contextlib.suppress(anyio.EndOfStream, *CLIENT_GONE):
        while True:
            down.conn.receive_data(await down.stream.receive(CHUNK))


#: The plain (non-stream) response kept: status, headers, reason, body.
Plain = tuple[int, list[tuple[bytes, bytes]], bytes, bytes]


class CutOff(UpstreamGone):
    """The server broke a limit (an answer or an event over the size limit, nested too
    deep): not read further."""


class Undecodable(UpstreamGone):
    """The server answered in invalid UTF-8: the request fails, saying so."""


_INVALID_UTF8 = "the MCP server answered in invalid UTF-8"
#: An event the client never gets (not JSON, in invalid UTF-8).
_DROP: tuple[bytes, dict[str, Any]] = (b"", {})


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _loose_id(data: bytes) -> Any:
    """The id of a message in invalid UTF-8, read leniently (None if there is none)."""
    try:
        loose = json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    return loose.get("id") if isinstance(loose, dict) else None


class Exchange:
    """One request upstream, its answer held (see the module's theory of operation).

    Args:
        client: the proxy's upstream client.
        down: the client's side of the exchange.
        url, headers, body: what is POSTed (the client's own).
        request_id: the JSON-RPC id whose answer is awaited.
        note: gets every other message the stream carries before the answer, and its size.
        on_client_gone: called once the client hangs up before the answer.
        max_bytes: the largest JSON answer or event the server may send.
        max_depth: arrays and objects one message may nest.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        down: Downstream,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        request_id: Any,
        *,
        note: Callable[[Any, int], None] | None = None,
        on_client_gone: Callable[[], None] | None = None,
        max_bytes: int = 64 << 20,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        self.client = client
        self.down = down
        self.url = url
        self.headers = headers
        self.body = body
        self.request_id = request_id
        self.note = note
        self.on_client_gone = on_client_gone
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        #: Whether the server may have the request (a refused connection says it has not).
        self.forwarded = False
        #: The client left while the answer was awaited (nothing more is sent to it).
        self.client_gone = False
        #: The plain JSON response, as the server sent it.
        self.plain: Plain | None = None
        #: The event stream's chunks, read by a task of the exchange's own.
        self.stream: MemoryObjectReceiveStream[bytes] | None = None
        self._stream_error: httpx.HTTPError | None = None
        self._response: httpx.Response | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._splitter = SseSplitter()
        self._held = b""
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> Exchange:
        self._tg = await anyio.create_task_group().__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()  # the stream's reader, if still reading
        try:
            # The body's own exception goes on as it is, never wrapped in a group (the
            # driver tells a client that left by its type).
            await self._tg.__aexit__(None, None, None)
            return None
        finally:
            if self.stream is not None:
                self.stream.close()
            with anyio.CancelScope(shield=True):
                if isinstance(self._chunks, AsyncGenerator):
                    await self._chunks.aclose()
                if self._response is not None:
                    await self._response.aclose()

    async def answer(self) -> tuple[bytes, dict[str, Any]]:
        """POST upstream, relay the stream's other events, return the held answer; a
        client that hangs up meanwhile is seen at once (``on_client_gone``), not at a
        write (the first after a hang-up may still succeed).

        Raises:
            UpstreamGone: no JSON-RPC answer came (unreachable, dropped, ended);
                ``CutOff`` if it broke a limit, ``Undecodable`` for invalid UTF-8.
        """
        assert self._tg is not None, "an Exchange is used in `async with`"
        watching = anyio.CancelScope()
        self._tg.start_soon(self._watch_client, watching)
        try:
            return await self._await_answer()
        finally:
            watching.cancel()

    async def _watch_client(self, scope: anyio.CancelScope) -> None:
        down = self.down
        with scope:
            await until_hung_up(down)
            self.client_gone = True  # it hung up
            if self.on_client_gone is not None:
                self.on_client_gone()

    async def _await_answer(self) -> tuple[bytes, dict[str, Any]]:
        request = self.client.build_request(
            "POST", self.url, headers=self.headers, content=self.body
        )
        # Being sent: the server may have it before it answers (a stop or a timeout
        # meanwhile still tells it); a refused connection says it never got there.
        self.forwarded = True
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            self.forwarded = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            raise UpstreamGone(f"the MCP server is unreachable: {exc}") from exc
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
                raw = await self._read_plain(response, encoded)
                self._check(raw)
                envelope = decode_envelope(raw)
                if envelope is None and not _utf8(raw):
                    raise Undecodable(_INVALID_UTF8)
                self.plain = (response.status_code, headers, reason, raw)
                if envelope is None or "id" not in envelope:
                    raise UpstreamGone(f"HTTP {response.status_code} without a JSON-RPC answer")
                return raw, envelope
            headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
            self.down.queue_start(response.status_code, headers, reason)
            chunks = self._chunks = response.aiter_bytes() if encoded else response.aiter_raw()
            send, self.stream = anyio.create_memory_object_stream[bytes](16)
            assert self._tg is not None
            self._tg.start_soon(self._read_stream, chunks, send)
            splitter = self._splitter
            # Cancelled while waiting: no chunk is lost; what is queued goes out before
            # any wait, in one write.
            while (chunk := await self._next_chunk()) is not None:
                for event in splitter.feed(chunk):
                    answer = self._answer(event)
                    if answer is _DROP:
                        continue
                    if answer is not None:
                        self._held = event + splitter.rest()
                        return answer
                    if not self.client_gone:
                        self.down.queue(event)  # whole events only, never half of one
                if splitter.buffered() > self.max_bytes:
                    raise CutOff(
                        f"the MCP server sent an event over {self.max_bytes} bytes: cut off"
                    )
            if self._stream_error is not None:
                raise self._stream_error
            raise UpstreamGone("the MCP server closed the event stream without answering")
        except httpx.HTTPError as exc:
            raise UpstreamGone(f"the MCP server failed mid-call: {exc}") from exc

    async def _next_chunk(self) -> bytes | None:
        """The stream's next chunk (None at its end); what is queued for the client is
        sent first when none is at hand yet."""
        assert self.stream is not None
        try:
            return self.stream.receive_nowait()
        except anyio.WouldBlock:
            await self._flush()
            try:
                return await self.stream.receive()
            except anyio.EndOfStream:
                return None
        except anyio.EndOfStream:
            return None

    async def _flush(self) -> None:
        """Send what is queued; a client that left stops getting it (the answer is still
        awaited: the call's step records it, or the client's cancel)."""
        if self.client_gone:
            self.down.discard()
            return
        try:
            with anyio.CancelScope(shield=True):  # never half a write
                await self.down.flush()
        except CLIENT_GONE:
            self.client_gone = True
            self.down.discard()
            if self.on_client_gone is not None:
                self.on_client_gone()

    async def _read_plain(self, response: httpx.Response, encoded: bool) -> bytes:
        """A JSON body, read whole but never past ``max_bytes``."""
        if not encoded and response.headers.get("content-length", "").isdigit():
            if int(response.headers["content-length"]) > self.max_bytes:
                raise CutOff(f"the MCP server sent an answer over {self.max_bytes} bytes: cut off")
            return await read_raw(response)
        parts, size = [], 0
        async for chunk in response.aiter_bytes() if encoded else response.aiter_raw():
            size += len(chunk)
            if size > self.max_bytes:
                raise CutOff(f"the MCP server sent an answer over {self.max_bytes} bytes: cut off")
            parts.append(chunk)
        return b"".join(parts)

    async def _read_stream(
        self, chunks: AsyncIterator[bytes], send: MemoryObjectSendStream[bytes]
    ) -> None:
        async with send:
            try:
                async for chunk in chunks:
                    await send.send(chunk)
            except httpx.HTTPError as exc:
                self._stream_error = exc

    def _check(self, data: bytes) -> None:
        if too_deep(data, self.max_depth):
            raise CutOff(
                f"the MCP server sent a message nested deeper than {self.max_depth} levels"
            )

    def _answer(self, event: bytes) -> tuple[bytes, dict[str, Any]] | None:
        """(data, envelope) if this event answers the request (``_DROP``: an event the
        client must not get); else None, and it is teed to ``note``.

        Raises:
            CutOff: it nests too deep.
            Undecodable: the answer is in invalid UTF-8.
        """
        data = event_data(event)
        if not data:
            return None
        self._check(data)
        msg = parse(data)
        if msg.kind == "response" and id_key(msg.id) == id_key(self.request_id):
            envelope = decode_envelope(data)
            assert envelope is not None
            return data, envelope
        if msg.kind == "other" and not _utf8(data):
            if id_key(_loose_id(data)) == id_key(self.request_id):
                raise Undecodable(_INVALID_UTF8)
            return _DROP  # not a whole JSON-RPC message: the client never gets it
        if msg.body is not None and self.note is not None:
            self.note(msg.body, len(data))
        return None

    async def release(self, answered: anyio.Event | None = None) -> None:
        """Send the held answer: the server's own response, or its answering event and
        what the stream carries after it, until the server ends it (``answered`` is set
        once the client has the answer itself)."""
        down = self.down
        if self.plain is not None:
            status, headers, reason, body = self.plain
            down.queue_start(status, headers, reason)
            down.queue(body)
            down.queue_end()
            await down.flush()
        elif self.stream is not None:
            down.queue(self._held)
            await self._rest_of_stream(answered)

    async def release_rest(self) -> None:
        """Given up on (cancelled): the stream goes on to the client as the server keeps
        it, from where the relay stopped."""
        if self.stream is not None and not self.client_gone:
            self.down.queue(self._splitter.rest())
            await self._rest_of_stream()

    async def _rest_of_stream(self, answered: anyio.Event | None = None) -> None:
        """What the server streams after the answer (or after a cancel), until it ends
        the stream or the client hangs up: one the server keeps open and silent (a
        cancelled request gets no answer) must not keep a gone client's session present,
        and a client that left is seen at once, not at the next write. What is queued
        goes out with what is at hand (the answer and the stream's end, in one write, when
        the server has ended it); ``answered`` is set once the queued answer is sent."""
        assert self.stream is not None
        down = self.down
        stalled: ClientStalled | None = None
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await until_hung_up(down)
                tg.cancel_scope.cancel()  # hung up: the relay stops

            tg.start_soon(watch)
            try:
                while True:
                    try:
                        chunk = self.stream.receive_nowait()
                    except anyio.WouldBlock:
                        await down.flush()  # nothing more at hand: the client gets it now
                        if answered is not None:
                            answered.set()  # the rest is the server's to keep open
                        try:
                            chunk = await self.stream.receive()
                        except anyio.EndOfStream:
                            break
                    except anyio.EndOfStream:
                        break
                    down.queue(chunk)
                down.queue_end()  # where the server ended it (dropped, too)
                await down.flush()
            except ClientStalled as exc:
                stalled = exc  # raised past the task group, for the call to record
            except CLIENT_GONE:
                pass  # the client left: nothing more to relay
            if answered is not None:
                answered.set()
            tg.cancel_scope.cancel()
        if stalled is not None:
            raise stalled
