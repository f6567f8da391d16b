"""The client side of one HTTP/1.1 exchange, and which headers cross the proxy."""

from __future__ import annotations

from collections.abc import Sequence

import h11
from anyio.abc import SocketStream

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


class Downstream:
    """One HTTP/1.1 exchange with the client: send a response once, stream its body."""

    def __init__(
        self,
        conn: h11.Connection,
        stream: SocketStream,
        conn_id: int = 0,
        keys: set[str] | None = None,
    ) -> None:
        self.conn = conn
        self.stream = stream
        #: Which client connection this exchange is on, and the sessions it has carried.
        self.conn_id = conn_id
        self.keys: set[str] = keys if keys is not None else set()
        self.started = False
        self.finished = False

    async def start(self, status: int, headers: list[tuple[bytes, bytes]], reason: bytes) -> None:
        self.started = True
        await self.stream.send(
            self.conn.send(h11.Response(status_code=status, headers=headers, reason=reason))
        )

    async def body(self, data: bytes) -> None:
        if data:
            await self.stream.send(self.conn.send(h11.Data(data=data)))

    async def end(self) -> None:
        if not self.finished:
            self.finished = True
            await self.stream.send(self.conn.send(h11.EndOfMessage()))

    async def whole(self, status: int, content_type: bytes, body: bytes) -> None:
        """A complete response the proxy originates."""
        headers = [(b"Content-Type", content_type), (b"Content-Length", str(len(body)).encode())]
        await self.start(status, headers, b"")
        await self.body(body)
        await self.end()
