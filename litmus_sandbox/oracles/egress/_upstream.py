"""The server side of a forwarded request: h11, in the client role, over one connection.

Theory of operation
-------------------
The relay keeps at most one :class:`Upstream` per client connection, for one
``(host, port)``, and reuses it while h11 says both sides finished their message and
neither asked to close (:meth:`Upstream.next_cycle`). h11 frames the request (chunked or
Content-Length, as the client sent it) and parses the response; what goes wrong there is
the upstream's fault, never the client's, and is raised as such:

* :class:`~._http_wire.UpstreamClosed`: the connection closed or reset before a response
  head (a kept-alive connection the server had given up on: the relay retries once);
* :class:`~._http_wire.UpstreamBad`: bytes that are not an HTTP/1.1 response, or a
  ``101`` (the proxy never forwards ``Upgrade``, so a switch cannot be relayed).

A close-delimited body ends at end of stream: h11 is told (``receive_data(b"")``) and
ends the message; a Content-Length or chunked body cut short is :class:`UpstreamBad`.
"""

from __future__ import annotations

import os
import socket
from typing import cast

import anyio
import h11
from anyio.abc import ByteStream

from litmus_sandbox.oracles.egress import _streams
from litmus_sandbox.oracles.egress._downstream import CHUNK, MAX_HEAD, Message
from litmus_sandbox.oracles.egress._http_wire import UpstreamBad, UpstreamClosed

#: What a failed upstream operation raises: the connection is gone.
CONNECTION_LOST = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


async def connect(host: str, port: int, within: float) -> ByteStream:
    """A TCP connection to ``host:port`` made within ``within`` seconds.

    Raises:
        OSError: refused, unreachable, not resolvable.
        TimeoutError: not connected in time.
    """
    with anyio.fail_after(within):
        return await _streams.connect(host, port)


def unreachable(exc: OSError | TimeoutError) -> str:
    """Why a connection failed, in a few words: ``Connection refused``, ``timed out``, ``Name
    or service not known``... (the system's words for the first error with a number, down
    the chain of causes: anyio says only "All connection attempts failed")."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror) and seen.strerror:
            return seen.strerror
        if isinstance(seen, OSError) and seen.errno:
            return os.strerror(seen.errno)
        seen = seen.__cause__
    return exc.strerror or str(exc)


class Upstream:
    """One connection to an upstream server, for requests to ``key`` = (host, port)."""

    def __init__(self, key: tuple[str, int], stream: ByteStream) -> None:
        self.key = key
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        #: Whether a previous exchange ran on this connection (it may have gone stale).
        self.reused = False
        self._eof = False
        self._got_head = False  # the final response head of this exchange has arrived

    def frame(self, event: Message) -> bytes:
        """``event`` as bytes for the server (nothing is sent)."""
        return self.h11.send(event)

    async def send(self, data: bytes) -> None:
        """Raises: UpstreamClosed: the connection is gone."""
        try:
            await self.stream.send(data)
        except CONNECTION_LOST as exc:
            raise UpstreamClosed from exc

    @property
    def buffered(self) -> bool:
        """Whether h11 holds bytes of the response not parsed yet."""
        return bool(self.h11.trailing_data[0])

    def poll(self) -> h11.Event | None:
        """The next event of the response if h11 has it already, else None (:meth:`fill`).

        Raises:
            UpstreamClosed: the connection ended before the final response head.
            UpstreamBad: not an HTTP response, a ``101``, or a body cut short.
        """
        try:
            event = self.h11.next_event()
        except h11.RemoteProtocolError as exc:
            if self._eof and not self._got_head:
                raise UpstreamClosed from exc
            if "_SWITCH_UPGRADE" in str(exc):  # h11 refuses a 101 nobody asked for
                raise UpstreamBad("protocol upgrades are not relayed") from None
            raise UpstreamBad from None
        if event is h11.NEED_DATA:
            return None  # (PAUSED cannot occur while a response is awaited)
        if type(event) is h11.Response:
            self._got_head = True
        return cast(h11.Event, event)

    async def fill(self) -> None:
        """Read more of the response into h11 (end of stream included).

        Raises:
            UpstreamClosed: a reset before the final response head.
            UpstreamBad: a reset after it.
        """
        try:
            data = await self.stream.receive(CHUNK)
        except anyio.EndOfStream:
            data = b""
            self._eof = True
        except CONNECTION_LOST as exc:
            if not self._got_head:
                raise UpstreamClosed from exc
            raise UpstreamBad("upstream reset the connection") from None
        self.h11.receive_data(data)

    def next_cycle(self) -> bool:
        """Make the connection ready for another exchange, if the one just finished
        leaves it open (both sides done, neither asked to close); False if it does not."""
        conn = self.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self.reused = True
            self._got_head = False
            return True
        return False

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.stream.aclose()
