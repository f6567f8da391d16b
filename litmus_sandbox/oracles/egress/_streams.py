"""The forward proxy's TCP connections as anyio byte streams, lean ones on asyncio.

Theory of operation
-------------------
The proxy does everything with a TCP connection through anyio's ``ByteStream``
interface (``receive``, ``send``, ``send_eof``, ``aclose``). On trio those are anyio's
socket streams. On asyncio, anyio's socket stream yields to the event loop after every
send and hands the socket back to the selector around every receive; a proxied request
makes two of each, which cost about 80 µs of CPU on the benchmark machine: as much as
the proxy's own work besides h11. There the proxy wraps asyncio's own
``StreamReader`` and ``StreamWriter`` instead (:class:`AsyncioStream`): a receive waits
only when nothing is buffered, and a send only while the kernel has not taken the bytes
(no write buffering, as with anyio).

Connections are made the way anyio makes them: accepted from the listener's own socket
with ``loop.sock_accept`` (:func:`serve`), connected with happy eyeballs
(:func:`connect`). Cancellation lands where a stream waits; the proxy's loops always
come back to a receive that waits for the peer.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import Any

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

#: A connection handler, as given to ``Listener.serve``.
Handler = Callable[[ByteStream], Coroutine[Any, Any, None]]


def _on_asyncio() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # another backend (trio)
        return None


def clock() -> Callable[[], float]:
    """The running backend's clock, that cancel scope deadlines are set on, as a function
    to call without asking anyio which backend runs (asyncio: ``loop.time``)."""
    loop = _on_asyncio()
    return anyio.current_time if loop is None else loop.time


class AsyncioStream(ByteStream):
    """An anyio byte stream over asyncio's stream reader and writer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        writer.transport.set_write_buffer_limits(0)  # a send waits until the kernel has it
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        try:
            data = await self._reader.read(max_bytes)
        except OSError as exc:  # a reset
            raise anyio.BrokenResourceError from exc
        if not data:
            if self._closed:
                raise anyio.ClosedResourceError
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        writer = self._writer
        if writer.transport.is_closing():
            raise anyio.BrokenResourceError
        writer.write(item)
        if writer.transport.get_write_buffer_size():
            try:
                await writer.drain()
            except OSError as exc:
                raise anyio.BrokenResourceError from exc

    async def send_eof(self) -> None:
        with suppress(OSError):
            if self._writer.can_write_eof():
                self._writer.write_eof()

    async def aclose(self) -> None:
        self._closed = True
        self._writer.transport.abort()
        await anyio.lowlevel.checkpoint()


async def connect(host: str, port: int) -> ByteStream:
    """A TCP connection to ``host:port`` (anyio's, or on asyncio an :class:`AsyncioStream`).

    Raises:
        OSError: refused, unreachable, not resolvable (the errors ``anyio.connect_tcp``
            raises, messages included).
    """
    if _on_asyncio() is None:
        return await anyio.connect_tcp(host, port)
    try:
        reader, writer = await asyncio.open_connection(host, port, happy_eyeballs_delay=0.25)
    except socket.gaierror:
        raise
    except OSError as exc:
        # What anyio.connect_tcp says, so the client's 502 reads the same on both backends.
        raise OSError("All connection attempts failed") from exc
    return AsyncioStream(reader, writer)


async def serve(listener: MultiListener[SocketStream], handler: Handler) -> None:
    """Accept connections on ``listener`` (from ``anyio.create_tcp_listener``) until
    cancelled; ``handler`` serves each in a task of its own."""
    loop = _on_asyncio()
    if loop is None:
        await listener.serve(handler)
        return
    sockets = [one.extra(SocketAttribute.raw_socket) for one in listener.listeners]
    async with anyio.create_task_group() as tg:
        for raw in sockets:
            tg.start_soon(_accept, loop, raw, handler, tg)


async def _accept(
    loop: asyncio.AbstractEventLoop, raw: socket.socket, handler: Handler, tg: TaskGroup
) -> None:
    while True:
        try:
            client, _ = await loop.sock_accept(raw)
        except asyncio.CancelledError:
            # sock_accept may leave its reader behind when cancelled (bpo-41317).
            with suppress(ValueError, NotImplementedError):
                loop.remove_reader(raw)
            raise
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader, writer = await asyncio.open_connection(sock=client)
        tg.start_soon(handler, AsyncioStream(reader, writer))
