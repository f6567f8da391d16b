"""The HTTP proxy's relay: one request forwarded, its response streamed back untouched.

Status, reason, headers and body bytes go back as the server sent them; an event stream
is relayed chunk by chunk as it arrives, never buffered whole. A JSON-RPC request waits
for its answer at most the proxy's timeout (see ``HttpRelay.relay``); a ``tools/list``
answer relayed teaches the proxy the tools' output schemas.
"""

from __future__ import annotations

import math

import anyio
import httpx

from ._downstream import Downstream, forwardable
from ._http_answer import (
    EventWatch,
    Unanswered,
    Waiting,
    decoded,
    listing_result,
    read_bounded,
)
from ._http_sessions import HttpSessions
from ._jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT, Message, error_message, no_answer
from ._relay._guard import INTERNAL_ERROR
from ._schema import output_schemas
from ._sse import encode_event

#: A tools/list answer larger than this is relayed without learning schemas from it.
_MAX_LISTING = 8 << 20


def _whole_message(raw: bytes) -> bool:
    """Whether a JSON answer may reach the client: JSON, or at least valid UTF-8 (the
    client's to read); only invalid UTF-8 is held back."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class HttpRelay(HttpSessions):
    """The HTTP proxy's relaying of everything it does not record."""

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
            wait = Waiting(deadline)
            self._waiting.add(wait)
        request = self.client.build_request(method, url, headers=headers, content=body)
        try:
            await self._relay(down, request, headers, msg, wait)
        except Unanswered as unanswered:
            assert msg is not None
            await self._unanswered(down, url, headers, msg, unanswered)
        finally:
            if wait is not None:
                self._waiting.discard(wait)
                wait.done.set()

    async def _unanswered(
        self,
        down: Downstream,
        url: str,
        headers: list[tuple[bytes, bytes]],
        msg: Message,
        unanswered: Unanswered,
    ) -> None:
        """A relayed request the server left unanswered: stopped early, timed out, or
        cut off (its answer broke a limit)."""
        mid_event = unanswered.mid_event
        slot = self._slots.get(self.key_for(headers, msg, down.conn_id))
        if unanswered.cut_off is not None:
            reason = unanswered.cut_off
            reply = error_message(msg.id, CONNECTION_CLOSED, f"litmus-sandbox: {reason}")
            # A session to record, even one that only listed: the server failed it.
            slot = slot or self.slot(self.key_for(headers, msg, down.conn_id))
            slot.abort(reason)
        elif unanswered.invalid_utf8:
            text = "litmus-sandbox: the MCP server answered in invalid UTF-8"
            reply = error_message(msg.id, INTERNAL_ERROR, text)
            key = self.key_for(headers, msg, down.conn_id)
            self._invalid[key] = dropped = self._invalid.get(key, 0) + 1
            if slot is not None:
                slot.end_note("dropped_from_server", {"invalid_utf8": dropped})
        elif self.stop_reason is not None:
            reply = error_message(msg.id, CONNECTION_CLOSED, f"litmus-sandbox: {self.stop_reason}")
        else:
            reason = no_answer(str(msg.method), self.timeout)
            reply = error_message(msg.id, REQUEST_TIMEOUT, f"litmus-sandbox: {reason}")
            if msg.method != "initialize":  # no session yet; and it cannot be cancelled
                if slot is not None:
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
        wait: Waiting | None,
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
            opening = None
            if msg is not None and msg.method == "initialize" and response.is_success:
                # The session id arrives with the answer: its episode takes the case id
                # the client named on initialize; it is a session (not a probe) once the
                # answer is a result.
                sid = response.headers.get("mcp-session-id")
                key = (
                    f"session:{sid}"
                    if sid is not None
                    else self.key_for(headers, msg, down.conn_id)
                )
                opening = self.slot(key)
                self.offer(opening, msg, touch=False)
            ctype = response.headers.get("content-type", "")
            encoding = response.headers.get("content-encoding", "identity")
            status = response.status_code
            out_headers = forwardable(response.headers.raw)
            reason = response.reason_phrase.encode("latin-1")
            listing = msg is not None and msg.method == "tools/list" and response.is_success
            listing = listing or opening is not None  # the answer is read (a copy) too
            seen = bytearray()
            if wait is not None and not ctype.startswith("text/event-stream"):
                # One JSON answer: read it whole from the server (bounded), then pass it on.
                raw = await wait.upstream(read_bounded(response, self.max_message_bytes))
                wait = None
                if encoding in ("identity", "") and not _whole_message(raw):
                    raise Unanswered(invalid_utf8=True)
                await down.start(status, out_headers, reason)
                await down.body(raw)
                seen += raw[:_MAX_LISTING]
            else:
                await down.start(status, out_headers, reason)
                # On a stream, the request is answered by one of its events; an encoding
                # this proxy cannot read hides them: then the headers count as the answer.
                events = EventWatch.of(encoding) if wait is not None else None
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
                        except Unanswered as unanswered:
                            unanswered.mid_event = events is None or events.mid_event
                            raise
                        await down.body(chunk)
                        if listing and len(seen) < _MAX_LISTING:
                            seen += chunk
                        if wait is not None and events is not None and events.answered(chunk, rid):
                            wait.done.set()  # the client has its answer: a stop need not wait
                            events, wait = None, None  # the rest is the server's to keep open
                        elif events is not None and events.buffered > self.max_message_bytes:
                            why = f"the MCP server sent an event over {self.max_message_bytes} bytes: cut off"
                            raise Unanswered(cut_off=why, mid_event=True)
                except httpx.HTTPError:
                    pass  # the server dropped the stream: end ours where it ended
            await down.end()
            if listing and msg is not None and len(seen) < _MAX_LISTING:
                plain = decoded(bytes(seen), response.headers.get("content-encoding"))
                if plain is not None:
                    result = listing_result(plain, ctype, msg.id)
                    if opening is not None:
                        if isinstance(result, dict):
                            opening.touch()  # the handshake completed: a session to record
                    else:
                        self.output_schemas.update(output_schemas(result))
                        self.listed = True
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()
