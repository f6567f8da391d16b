"""The client side of one HTTP/1.1 exchange, and which headers cross the proxy."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import h11
from anyio.abc import SocketStream

from ._sse import encode_event

MAX_BODY = 64 << 20
CHUNK = 1 << 16

#: Headers that describe one hop, not the message (RFC 9110 7.6.1); never forwarded.
#: A request's Host and Content-Length are set by httpx for the upstream hop; a
#: response's Content-Length is kept (the body is relayed unchanged).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
REQUEST_ONLY = HOP_BY_HOP | {b"host", b"content-length"}


def forwardable(
    headers: Sequence[tuple[bytes, bytes]], drop: frozenset[bytes] = HOP_BY_HOP
) -> list[tuple[bytes, bytes]]:
    """The end-to-end headers, in order, with their original spelling."""
    return [(n, v) for n, v in headers if n.lower() not in drop]


def header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of a header (case-insensitive), decoded as latin-1."""
    for n, v in headers:
        if n.lower() == name:
            return v.decode("latin-1")
    return None


class ClientStalled(anyio.BrokenResourceError):
    """The client read nothing for ``stall_after`` seconds while a write waited for it:
    it is treated as gone (its connection closes); ``unsent`` bytes at most reached it."""

    def __init__(self, unsent: int) -> None:
        self.unsent = unsent
        super().__init__(f"the client stopped reading ({unsent} bytes unsent)")


class Downstream:
    """One HTTP/1.1 exchange with the client: send a response once, stream its body.

    ``stall_after``: seconds a write may wait for the client to read (None: forever);
    past them it raises :class:`ClientStalled`.
    """

    def __init__(
        self,
        conn: h11.Connection,
        stream: SocketStream,
        conn_id: int = 0,
        keys: set[str] | None = None,
        stall_after: float | None = None,
        exchange_id: int = 0,
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.stall_after = stall_after
        #: Which client connection this exchange is on, and the sessions it has carried.
        self.conn_id = conn_id
        self.keys: set[str] = keys if keys is not None else set()
        #: Which exchange of the proxy's run this is (a sessionless one's episode key).
        self.exchange_id = exchange_id
        self.started = False
        self.finished = False
        #: Bytes queued for the client, sent by the next ``flush`` (or write).
        self._out = bytearray()

    def queue_start(self, status: int, headers: list[tuple[bytes, bytes]], reason: bytes) -> None:
        """Queue the response's head (sent by the next ``flush``: one write for what is
        at hand, not one per part)."""
        self.started = True
        self._out += self.conn.send(
            h11.Response(status_code=status, headers=headers, reason=reason)
        )

    def queue(self, data: bytes) -> None:
        """Queue body bytes."""
        if data:
            self._out += self.conn.send(h11.Data(data=data))

    def queue_end(self) -> None:
        """Queue the response's end."""
        if not self.finished:
            self.finished = True
            self._out += self.conn.send(h11.EndOfMessage())

    async def flush(self) -> None:
        """Send what is queued, in one write.

        Raises:
            ClientStalled: the client read nothing for ``stall_after`` seconds.
        """
        if self._out:
            data = bytes(self._out)
            self._out.clear()
            if self.stall_after is None:
                await self.stream.send(data)
                return
            with anyio.move_on_after(self.stall_after) as scope:
                await self.stream.send(data)
            if scope.cancelled_caught:
                raise ClientStalled(len(data))

    def discard(self) -> None:
        """Drop what is queued (the client left)."""
        self._out.clear()

    async def start(self, status: int, headers: list[tuple[bytes, bytes]], reason: bytes) -> None:
        self.queue_start(status, headers, reason)
        await self.flush()

    async def body(self, data: bytes) -> None:
        self.queue(data)
        await self.flush()

    async def end(self) -> None:
        self.queue_end()
        await self.flush()

    async def whole(self, status: int, content_type: bytes, body: bytes) -> None:
        """A complete response the proxy originates (one write)."""
        headers = [(b"Content-Type", content_type), (b"Content-Length", str(len(body)).encode())]
        self.queue_start(status, headers, b"")
        self.queue(body)
        self.queue_end()
        await self.flush()

    async def last_word(self, reply: bytes) -> None:
        """The proxy's own JSON-RPC answer, ending the exchange: one more event on a
        stream already started, else a whole JSON response; given up after 2 s (a client
        that stopped reading cannot hold it), even under a cancelled scope."""
        with anyio.move_on_after(2, shield=True):
            if self.started:
                await self.body(encode_event(reply))
                await self.end()
            else:
                await self.whole(200, b"application/json", reply)
