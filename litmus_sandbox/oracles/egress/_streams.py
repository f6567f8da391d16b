"""The forward proxy's TCP connections as anyio byte streams, lean ones on asyncio.

Theory of operation
-------------------
The proxy does everything with a TCP connection through anyio's ``ByteStream``
interface (``receive``, ``send``, ``send_eof``, ``aclose``). On trio those are anyio's
socket streams. On asyncio, anyio's socket stream yields to the event loop after every
send and hands the socket back to the selector around every receive; a proxied request
makes two of each, which cost about 80 µs of CPU on the benchmark machine: as much as
the proxy's own work besides h11. There the proxy uses :class:`AsyncioStream`, an
asyncio protocol that is its own stream: ``data_received`` keeps each chunk as it came
(no copy into a buffer and out again, as ``StreamReader`` makes) and wakes the one
receiver; a receive waits only when nothing is buffered, and a send only while the
kernel has not taken the bytes (no write buffering, as with anyio).

====================  =========================================================
protocol callback     what the stream does
====================  =========================================================
``data_received``     queue the chunk; past :data:`HIGH_WATER` bytes queued,
                      pause reading until a receive brings it under
                      :data:`LOW_WATER`
``eof_received``      receives end (``EndOfStream``) once the queue is empty;
                      the stream stays open for sending (half-close)
``connection_lost``   a reset: receives and sends raise ``BrokenResourceError``
``pause_writing``     a send waits until ``resume_writing`` (or the loss)
====================  =========================================================

``eof_received`` and ``connection_lost`` also call the ``on_close`` hook, once, when one
is set (``on_close(reset)``): the relay learns of a client that gives up while it waits
for the upstream, with no task reading the client (:mod:`._waiting`).

Connections are made the way anyio makes them: accepted from the listener's own socket
with ``loop.sock_accept`` (:func:`serve`), connected with happy eyeballs
(:func:`connect`). Cancellation lands where a stream waits; the proxy's loops always
come back to a receive that waits for the peer.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import Any, cast

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

#: A connection handler, as given to ``Listener.serve``.
Handler = Callable[[ByteStream], Coroutine[Any, Any, None]]

#: Reading pauses past this many bytes received and not yet taken (StreamReader's
#: default), and resumes under :data:`LOW_WATER`.
HIGH_WATER = 128 * 1024
LOW_WATER = 64 * 1024


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


class AsyncioStream(asyncio.Protocol, ByteStream):
    """An anyio byte stream that is an asyncio protocol (one receiver at a time)."""

    transport: asyncio.Transport

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._chunks: deque[bytes] = deque()
        self._queued = 0
        self._eof = False
        self._lost = False  # the connection is gone (reset, or closed both ways)
        self._reset = False  # ... by an error
        self._closed = False  # aclose() was called
        self._paused = False  # reading is paused
        # What a waiting receive and a waiting send (tunnels do both at once) wait on.
        self._receiving: asyncio.Future[None] | None = None
        self._sending: asyncio.Future[None] | None = None
        #: Called once when the peer closes its side (False) or the connection is lost
        #: by an error (True), while set.
        self.on_close: Callable[[bool], None] | None = None

    # -- protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP transport; uvloop's are not asyncio.Transport subclasses, but have its API.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(0)  # a send waits until the kernel has it

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._queued += len(data)
        if self._queued > HIGH_WATER and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        if self._receiving is not None:
            _wake(self._receiving)

    def eof_received(self) -> bool:
        self._eof = True
        if self._receiving is not None:
            _wake(self._receiving)
        if self.on_close is not None:
            self._closed_hook(False)
        return True  # keep the transport open: the other way may still send

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = self._eof = True
        self._reset = exc is not None
        for waiter in (self._receiving, self._sending):
            if waiter is not None:
                _wake(waiter)
        if self.on_close is not None:
            self._closed_hook(exc is not None)

    @property
    def at_eof(self) -> bool:
        """Whether the peer has closed its side (or the connection is gone)."""
        return self._eof

    @property
    def was_reset(self) -> bool:
        """Whether the connection was lost by an error (a reset)."""
        return self._reset

    def _closed_hook(self, reset: bool) -> None:
        hook, self.on_close = self.on_close, None
        if hook is not None:
            hook(reset)

    def pause_writing(self) -> None:
        pass  # a send sees the bytes the transport still holds, and waits

    def resume_writing(self) -> None:
        if self._sending is not None:
            _wake(self._sending)

    # -- the byte stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._chunks:
            if self._reset:
                raise anyio.BrokenResourceError
            if self._closed:
                raise anyio.ClosedResourceError
            if self._eof:
                raise anyio.EndOfStream
            self._receiving = self._loop.create_future()
            try:
                await self._receiving
            finally:
                self._receiving = None
        if self._reset:
            raise anyio.BrokenResourceError  # what StreamReader did: a reset wins
        data = self._chunks.popleft()
        if len(data) > max_bytes:
            self._chunks.appendleft(data[max_bytes:])
            data = data[:max_bytes]
        self._queued -= len(data)
        if self._paused and self._queued < LOW_WATER and not self._lost:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        transport = self.transport
        if self._lost or transport.is_closing():
            raise anyio.BrokenResourceError
        transport.write(item)
        while transport.get_write_buffer_size():
            if self._lost:
                raise anyio.BrokenResourceError
            self._sending = self._loop.create_future()
            try:
                await self._sending
            finally:
                self._sending = None

    async def send_eof(self) -> None:
        with suppress(OSError):
            if self.transport.can_write_eof():
                self.transport.write_eof()

    async def aclose(self) -> None:
        self._closed = True
        self.transport.abort()
        await anyio.lowlevel.checkpoint()


def reset(stream: ByteStream) -> None:
    """Make closing ``stream`` reset its TCP connection (SO_LINGER 0): what a refused or
    reset upstream does to a client that connects to it directly. A Unix socket (strict
    mode's bridge) has no reset: it is closed."""
    if isinstance(stream, AsyncioStream):
        sock = stream.transport.get_extra_info("socket")
    else:
        sock = stream.extra(SocketAttribute.raw_socket, None)
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)


_LINGER_ZERO = struct.pack("ii", 1, 0)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def connect(host: str, port: int) -> ByteStream:
    """A TCP connection to ``host:port`` (anyio's, or on asyncio an :class:`AsyncioStream`).

    Raises:
        OSError: refused, unreachable, not resolvable (the errors ``anyio.connect_tcp``
            raises, messages included).
    """
    if _on_asyncio() is None:
        return await anyio.connect_tcp(host, port)
    loop = asyncio.get_running_loop()
    # uvloop's create_connection has no happy eyeballs (it tries the addresses in turn).
    eyeballs: dict[str, Any] = (
        {"happy_eyeballs_delay": 0.25} if isinstance(loop, asyncio.BaseEventLoop) else {}
    )
    try:
        _, stream = await loop.create_connection(
            lambda: AsyncioStream(loop), host, port, **eyeballs
        )
    except socket.gaierror:
        raise
    except OSError as exc:
        # What anyio.connect_tcp says, so failures read the same on both backends.
        raise OSError("All connection attempts failed") from exc
    return stream


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


async def serve_socket(raw: socket.socket, handler: Handler, tg: TaskGroup) -> None:
    """Accept connections on the listening socket ``raw`` (strict mode's bridge hands its
    own over) until cancelled; ``handler`` serves each in a task of ``tg``, so that they
    outlive the accepting. ``raw`` stays the caller's to close."""
    raw.setblocking(False)
    loop = _on_asyncio()
    if loop is not None:
        await _accept(loop, raw, handler, tg)
        return
    while True:  # another backend (trio): accept as its listeners do
        await anyio.wait_readable(raw)
        try:
            client, _ = raw.accept()
        except BlockingIOError:
            continue
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tg.start_soon(handler, await SocketStream.from_socket(client))


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
        _, stream = await loop.connect_accepted_socket(lambda: AsyncioStream(loop), client)
        tg.start_soon(handler, stream)
