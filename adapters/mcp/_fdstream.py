"""The proxy's own stdin and stdout as anyio byte streams, and a line pump.

Pipes and sockets are read and written non-blocking through the event loop, which costs
no thread hop per message: on asyncio a reader registered once for the stream's life
(``_LoopReader``), elsewhere ``anyio.wait_readable``; a write the pipe takes at once does
not yield to the loop, and one it cannot take whole waits with ``anyio.wait_writable``
without ever cutting a message in two. The relay's added latency is what the benchmark
measures. The stdio proxy uses them for the server's pipes too. A regular file (stdin
redirected from one) is read and written in a worker thread.

:func:`feed_lines` hands each line to a synchronous handler. On asyncio it does so from
the loop's read callback itself: a message is read, handled and relayed in one callback,
with no task woken, which is most of what a relay adds to a call. A handler that must
wait returns a coroutine: the pump's task awaits it, and the lines read meanwhile wait
in order (bounded as a receiver's are) until it is done.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream

from ._lines import CHUNK as _CHUNK
from ._lines import Later, LineSplitter, LineTooLong, OnLine, feed_lines, iter_lines

__all__ = [
    "FdReceiveStream",
    "FdSendStream",
    "Later",
    "LineTooLong",
    "feed_lines",
    "iter_lines",
    "on_stdio",
]


def _pollable(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


class _Fd:
    def __init__(self, fd: int, *, owned: bool = False) -> None:
        self._fd = fd
        self._owned = owned
        self._poll = _pollable(fd)
        self._was_blocking = os.get_blocking(fd)
        if self._poll:
            os.set_blocking(fd, False)
        self._closed = False

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            if self._poll:
                anyio.notify_closing(self._fd)  # a task waiting on it gets ClosedResourceError
            if self._owned:
                os.close(self._fd)
            elif self._poll:
                # Give the descriptor back as it was: a shell may share it.
                os.set_blocking(self._fd, self._was_blocking)


def _take(chunks: deque[bytes], max_bytes: int) -> bytes:
    """The first chunk, at most ``max_bytes`` of it (the rest stays first)."""
    data = chunks.popleft()
    if len(data) > max_bytes:
        data, rest = data[:max_bytes], data[max_bytes:]
        chunks.appendleft(rest)
    return data


class _LoopReader:
    """Reads a descriptor from an asyncio loop's own callback, registered once.

    ``anyio.wait_readable`` registers the descriptor for every wait and unregisters it
    after: two system calls and a trip through the loop per message. This reader stays
    registered while the stream lives; the loop's callback reads what arrived and wakes
    the waiting receiver. At most ``_HIGH`` bytes wait unread: beyond that it stops
    reading (the pipe fills and the writer waits) until the receiver catches up.
    """

    _HIGH = 1 << 20

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop = loop
        self._fd = fd
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False
        self._error: OSError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._reading = True
        # Pump mode (``pump``): lines go to ``_on_line`` from the callback while the pump
        # is idle; while it is busy (awaiting a handler) what arrives waits in ``_chunks``.
        self._on_line: OnLine | None = None
        self._splitter: LineSplitter | None = None
        self._until: Callable[[], bool] | None = None  # None: never
        self._busy = False
        self._later: tuple[Coroutine[Any, Any, None], list[bytes | LineTooLong]] | None = None
        self._failure: Exception | None = None
        loop.add_reader(fd, self._ready)  # NotImplementedError: the loop cannot (Windows)

    def _ready(self) -> None:
        try:
            data = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            self._error, data = exc, b""
        if data and not self._busy and self._splitter is not None:
            self._deliver(self._splitter.feed(data))  # the hot path: no task woken
            return
        if data:
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered >= self._HIGH:
                self._pause()
        else:
            self._eof = True
            self._pause()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _deliver(self, lines: list[bytes | LineTooLong]) -> None:
        """Hand lines to the handler until one must be awaited (then the pump is woken)."""
        on_line, until = self._on_line, self._until
        assert on_line is not None
        for i, line in enumerate(lines):
            try:
                later = on_line(line)
                stop = until is not None and until()
            except Exception as exc:  # raised in the pump's task, not lost in the loop's
                self._failure, self._busy = exc, True
                self._wake()
                return
            if later is not None or stop:
                if later is not None:
                    self._later = (later, lines[i + 1 :])
                self._busy = True
                self._wake()
                return

    async def pump(
        self, splitter: LineSplitter, on_line: OnLine, until: Callable[[], bool] | None
    ) -> None:
        """Feed every line to ``on_line`` until the end of the stream or ``until()``."""
        if self._waiter is not None or self._on_line is not None:
            raise anyio.BusyResourceError("reading from")
        self._splitter, self._on_line, self._until = splitter, on_line, until
        self._busy = True  # what was read before is handled first, here
        try:
            while until is None or not until():
                if self._later is not None:
                    later, rest = self._later
                    self._later = None
                    await later
                    self._deliver(rest)
                    continue
                if self._failure is not None:
                    failure, self._failure = self._failure, None
                    raise failure
                if self._chunks:
                    data = self._chunks.popleft()
                    self._buffered -= len(data)
                    self._resume()
                    self._deliver(splitter.feed(data))
                    continue
                if self._eof or self._error is not None:
                    break
                self._busy = False
                self._waiter = self.loop.create_future()
                try:
                    await self._waiter
                except anyio.ClosedResourceError:
                    break
                finally:
                    self._waiter = None
                    self._busy = True
        finally:
            if self._later is not None:
                self._later[0].close()
                self._later = None
            self._busy = False
            self._splitter, self._on_line, self._until = None, None, None

    def _resume(self) -> None:
        if not self._reading and not self._eof and self._buffered < self._HIGH // 2:
            self._reading = True
            self.loop.add_reader(self._fd, self._ready)

    def _pause(self) -> None:
        if self._reading:
            self._reading = False
            self.loop.remove_reader(self._fd)

    async def receive(self, max_bytes: int) -> bytes:
        if self._waiter is not None:
            raise anyio.BusyResourceError("reading from")
        while not self._chunks:
            if self._error is not None:
                raise anyio.BrokenResourceError from self._error
            if self._eof:
                raise anyio.EndOfStream
            self._waiter = self.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = _take(self._chunks, max_bytes)
        self._buffered -= len(data)
        self._resume()
        return data

    def close(self) -> deque[bytes]:
        """Stop reading; returns what was read and not yet received."""
        self._pause()  # before the descriptor is closed: the loop must forget it first
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(anyio.ClosedResourceError())
        chunks, self._chunks = self._chunks, deque()
        return chunks


class FdReceiveStream(_Fd, ByteReceiveStream):
    """Bytes from a file descriptor (closed on ``aclose`` if ``owned``, else only restored).

    On asyncio a pipe or socket is read by a :class:`_LoopReader`; elsewhere (trio, or a
    descriptor epoll refuses, such as ``/dev/null``) through ``anyio.wait_readable``;
    anything the loop cannot poll (a regular file), in a worker thread. Close the stream
    (``aclose``) before closing a descriptor it does not own: the loop must forget it
    first. Used from another event loop later, it first gives what it had read ahead.
    """

    _reader: _LoopReader | None = None
    _no_loop_reader = False
    #: Read ahead under an event loop since left: received first, in order.
    _carried: deque[bytes] | None = None

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
        reader = self._loop_reader() if self._poll else None
        if self._carried:
            return _take(self._carried, max_bytes)
        if reader is not None:
            return await reader.receive(max_bytes)
        while True:
            try:
                if self._poll:
                    data = os.read(self._fd, max_bytes)
                else:
                    data = await anyio.to_thread.run_sync(
                        os.read, self._fd, max_bytes, abandon_on_cancel=True
                    )
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if not data:
                raise anyio.EndOfStream
            if self._poll:
                # A descriptor that is always ready must not starve the other tasks.
                await anyio.lowlevel.checkpoint()
            return data

    def pump_reader(self) -> _LoopReader | None:
        """The loop reader ``feed_lines`` may drive (None: read it the plain way)."""
        if self._closed or not self._poll or self._carried:
            return None
        return self._loop_reader()

    def _loop_reader(self) -> _LoopReader | None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # not asyncio (trio): wait_readable
        reader = self._reader
        if reader is not None:
            if reader.loop is loop:
                return reader
            self._reader = None  # the stream moved to another event loop (a new anyio.run)
            carried = self._carried if self._carried is not None else deque()
            carried.extend(reader.close())  # after what an earlier loop left, in order
            self._carried = carried
        if loop is None or self._no_loop_reader:
            return None
        try:
            self._reader = _LoopReader(loop, self._fd)
        except (NotImplementedError, OSError):
            # The loop cannot (Windows), or epoll refuses the descriptor (/dev/null, EPERM):
            # read it the plain way, which works for what never blocks.
            self._no_loop_reader = True
            return None
        return self._reader

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        await super().aclose()


class FdSendStream(_Fd, ByteSendStream):
    """Bytes to a file descriptor (closed on ``aclose`` if ``owned``, else only restored).

    Each item is written whole, in order: a send cancelled while the descriptor is full
    (a timeout) keeps the unwritten rest, and the next send writes it before its own
    bytes, so a message is never cut in two nor interleaved with the next one.
    """

    _pending: bytearray | None = None

    @property
    def pollable(self) -> bool:
        """Whether :meth:`send_nowait` applies (a pipe or a socket)."""
        return self._poll

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if not self._poll:
            view = memoryview(item)
            while view:
                try:
                    n = await anyio.to_thread.run_sync(os.write, self._fd, view)
                except (BrokenPipeError, ConnectionResetError) as exc:
                    raise anyio.BrokenResourceError from exc
                view = view[n:]
            return
        if not self.send_nowait(item):
            await self.flush()

    def send_nowait(self, item: bytes) -> bool:
        """Write what the descriptor takes of ``item`` now; True if all of it went (the
        common case: no trip through the loop). Otherwise the rest is queued behind what
        was queued before, and :meth:`flush` writes it.

        Raises:
            anyio.BrokenResourceError: the reader is gone.
            anyio.ClosedResourceError: the stream is closed.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        if not self._poll:
            raise RuntimeError("send_nowait needs a pipe or a socket")
        if self._pending:
            self._pending += item
            return False
        try:
            n = os.write(self._fd, item)
        except BlockingIOError:
            n = 0
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise anyio.BrokenResourceError from exc
        if n == len(item):
            return True
        self._pending = bytearray(memoryview(item)[n:])
        return False

    @property
    def pending_bytes(self) -> int:
        """Bytes queued by :meth:`send_nowait` and not yet written."""
        return len(self._pending) if self._pending else 0

    async def flush(self) -> None:
        """Wait until everything queued is written (cancelled, the rest stays queued)."""
        pending = self._pending
        while pending:
            await anyio.wait_writable(self._fd)
            del pending[: self._write(pending)]

    def _write(self, data: bytes | bytearray) -> int:
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise anyio.BrokenResourceError from exc


async def on_stdio(run: Callable[[ByteReceiveStream, ByteSendStream], Awaitable[int]]) -> int:
    """Run ``run(client_in, client_out)`` over this process's stdin and stdout."""
    client_in, client_out = FdReceiveStream(0), FdSendStream(1)
    try:
        return await run(client_in, client_out)
    finally:
        await client_in.aclose()
        await client_out.aclose()
