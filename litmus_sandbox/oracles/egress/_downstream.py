"""The client side of a forward-proxy connection: h11, in the server role, over one stream.

Theory of operation
-------------------
h11 parses the client's requests and frames the responses it gets. :class:`Downstream`
feeds it bytes and adds what a forward proxy needs on top of it:

* **No Host.** h11 refuses an HTTP/1.1 request without a Host field (RFC 9112 3.2: a
  server must). A forward proxy takes the authority from the request target instead,
  and clients send ``CONNECT`` without one, so such a head is parsed again with an empty
  Host field added (``host_added``); the relay puts the target's authority there.
* **Smuggling vectors h11 lets through.** An obsolete line fold (h11 unfolds it, which
  RFC 9112 5.2 allows; this proxy has always refused it instead, as the RFC also allows)
  and (the relay checks it) a request with both Transfer-Encoding and Content-Length
  (RFC 9112 6.1).
* **Errors by whose fault.** What the client sends wrong is a :class:`BadMessage` with
  the status to answer (400; 431 for a head over :data:`MAX_HEAD`; 501 for a transfer
  coding other than chunked). A client that hangs up mid-message is
  :class:`ClientGone`: nothing is answered.

Between requests the connection may sit idle for ``idle_timeout``: the caller's cancel
scope ``idle`` gets that deadline only while a request head is awaited.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from http import HTTPStatus

import anyio
import h11
from anyio.abc import ByteStream

from litmus_sandbox.oracles.egress._http_wire import BadMessage
from litmus_sandbox.oracles.egress._streams import clock

#: The largest request head accepted (431 beyond).
MAX_HEAD = 64 * 1024
#: Bytes asked of the socket at a time.
CHUNK = 64 * 1024

_FOLD = re.compile(rb"\n[ \t]")
_HOST_LINE = re.compile(rb"\nhost[ \t]*:", re.IGNORECASE)
_HEAD_END = re.compile(rb"\n\r?\n")


_END = h11.EndOfMessage()

#: The events h11 turns into bytes to send (all but ConnectionClosed).
Message = h11.Request | h11.InformationalResponse | h11.Response | h11.Data | h11.EndOfMessage


class ClientGone(Exception):
    """The client closed its side in the middle of a message: there is no one to answer."""


def reason_phrase(status: int) -> bytes:
    """The standard reason phrase of ``status`` (empty for unregistered codes)."""
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


class Downstream:
    """One client connection: requests out of h11, responses framed by h11.

    Args:
        stream: the client's connection.
        idle: the cancel scope around the whole connection; its deadline bounds the wait
            for each request head.
        idle_timeout: seconds a client may take to send a request head.
    """

    def __init__(self, stream: ByteStream, idle: anyio.CancelScope, idle_timeout: float) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.idle = idle
        self.idle_timeout = idle_timeout
        #: The current request had no Host field: the one h11 sees is empty.
        self.host_added = False
        #: The end of the current request's body, trailer fields included.
        self.end = _END
        #: The method of the request being answered (None before the first one).
        self.method: bytes | None = None
        self._raw = bytearray()  # what h11 was fed since the current request began
        self._now = clock()
        self._eof = False

    # -- receiving

    async def next_request(self) -> h11.Request | None:
        """The next request head, or None when the client closed between requests.

        Raises:
            BadMessage: a malformed head (the status to answer).
            ClientGone: the client closed in the middle of a head.
        """
        conn = self.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()  # the previous exchange kept the connection alive
        self.host_added = False
        self.method = None
        self.end = _END
        raw = self._raw
        raw[:] = conn.trailing_data[0]
        retried = False
        # Nothing buffered: h11 can only ask for data (a call saved per request).
        event: object = h11.NEED_DATA if not raw else None
        while True:
            try:
                if event is None:
                    event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if self._eof:
                    raise ClientGone from None
                if not retried and _lacks_host(raw):
                    conn = self._reparse_with_host(raw)
                    retried = True
                    event = None
                    continue
                raise _bad(exc) from None
            if event is h11.NEED_DATA:
                if self.idle.deadline == math.inf:
                    self.idle.deadline = self._now() + self.idle_timeout
                data = await self._receive()
                raw += data
                conn.receive_data(data)
                event = None
                continue
            self.idle.deadline = math.inf
            if type(event) is h11.Request:
                self.method = event.method
                if len(raw) > MAX_HEAD or b"\n " in raw or b"\n\t" in raw:
                    self._check_head(raw[: len(raw) - len(conn.trailing_data[0])])
                return event
            return None  # ConnectionClosed: the client hung up between requests

    @staticmethod
    def _check_head(head: bytearray) -> None:
        """What h11 accepts in a head but this proxy refuses.

        h11 checks its size limit only while a head is incomplete, so a large head that
        completes in the read that crosses it is refused here.
        """
        if len(head) > MAX_HEAD:
            raise BadMessage(431, "request head too large")
        if _FOLD.search(head):
            raise BadMessage(400, "obsolete line folding in a header field")

    def _reparse_with_host(self, raw: bytearray) -> h11.Connection:
        """A fresh h11 connection fed ``raw`` with an empty Host field after its first line
        (added to ``raw`` too)."""
        self.h11 = conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        first = raw.index(b"\n") + 1
        raw[first:first] = b"Host: \r\n"  # raw stays what h11 was fed
        conn.receive_data(bytes(raw))
        if self._eof:
            conn.receive_data(b"")
        self.host_added = True
        return conn

    async def next_data(self) -> bytes | None:
        """The next piece of the current request's body; None at its end (and after).

        Raises:
            BadMessage: bad body framing.
            ClientGone: the client closed before the body ended.
        """
        conn = self.h11
        while conn.their_state is h11.SEND_BODY:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if self._eof:
                    raise ClientGone from None
                raise _bad(exc) from None
            if type(event) is h11.Data:
                return bytes(event.data)
            if event is h11.NEED_DATA:
                conn.receive_data(await self._receive())
                continue
            if type(event) is h11.EndOfMessage:
                self.end = event  # its trailer fields go on with it
        return None

    def end_of_request(self) -> None:
        """Take the end of a request without a body, which h11 parsed with its head."""
        if self.h11.their_state is h11.SEND_BODY:
            event = self.h11.next_event()
            if type(event) is h11.EndOfMessage:
                self.end = event

    async def _receive(self) -> bytes:
        try:
            return await self.stream.receive(CHUNK)
        except anyio.EndOfStream:
            self._eof = True
            return b""

    async def watch(self) -> str:
        """While a response is awaited: what the client does next. ``more``: it sent bytes
        (kept for its next request); ``closed``: it closed its side (it may still read
        the response); ``reset``: its connection is gone."""
        try:
            data = await self.stream.receive(CHUNK)
        except anyio.EndOfStream:
            self._eof = True
            self.h11.receive_data(b"")
            return "closed"
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return "reset"
        self.h11.receive_data(data)
        return "more"

    @property
    def waiting_for_100(self) -> bool:
        """Whether the client waits for ``100 Continue`` before it sends the body."""
        return self.h11.client_is_waiting_for_100_continue

    @property
    def trailing(self) -> bytes:
        """What the client sent past the current head (the start of a tunnel)."""
        return self.h11.trailing_data[0]

    @property
    def reusable(self) -> bool:
        """Whether the exchange just answered leaves the connection open for another."""
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    # -- sending

    def frame(self, event: Message) -> bytes:
        """``event`` as bytes for the client (nothing is sent)."""
        return self.h11.send(event)

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def respond(
        self,
        status: int,
        body: bytes = b"",
        headers: Sequence[tuple[str, str]] = (),
        *,
        keep: bool = False,
        reason: bytes | None = None,
    ) -> None:
        """Answer a whole response with a Content-Length, closing the connection unless
        ``keep``. No body goes out where HTTP allows none (HEAD, 204, 304)."""
        fields = [(k, v) for k, v in headers if k.lower() not in ("content-length", "connection")]
        fields.append(("Content-Length", str(len(body))))
        if not keep:
            fields.append(("Connection", "close"))
        conn = self.h11
        out = conn.send(
            h11.Response(
                status_code=status,
                headers=fields,
                reason=reason_phrase(status) if reason is None else reason,
            )
        )
        if body and status not in (204, 304) and self.method != b"HEAD":
            out += conn.send(h11.Data(data=body))
        out += conn.send(h11.EndOfMessage())
        await self.stream.send(out)

    async def refuse(self, bad: BadMessage) -> None:
        """Answer a malformed request (and close), if h11 can still frame a response."""
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await self.respond(bad.status, f"{bad.reason}\n".encode())


def _bad(exc: h11.RemoteProtocolError) -> BadMessage:
    status = exc.error_status_hint
    reason = "request head too large" if status == 431 else str(exc)
    return BadMessage(status, reason)


def _lacks_host(raw: bytearray) -> bool:
    """Whether ``raw`` holds a whole request head with no Host field in it."""
    end = _HEAD_END.search(raw)
    return end is not None and _HOST_LINE.search(raw, 0, end.start() + 1) is None
