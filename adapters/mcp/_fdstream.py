"""The proxy's own stdin and stdout as anyio byte streams, and a line splitter.

Pipes and sockets are read and written non-blocking through the event loop
(``anyio.wait_readable`` / ``wait_writable``), which costs no thread hop per message:
the relay's added latency is what the benchmark measures. A regular file or anything the
loop cannot poll (stdin redirected from a file) falls back to a worker thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream

_CHUNK = 1 << 16


def _pollable(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


class _Fd:
    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poll = _pollable(fd)
        self._was_blocking = os.get_blocking(fd)
        if self._poll:
            os.set_blocking(fd, False)
        self._closed = False

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            if self._poll:
                # Give the descriptor back as it was: a shell may share it.
                os.set_blocking(self._fd, self._was_blocking)


class FdReceiveStream(_Fd, ByteReceiveStream):
    """Bytes from a file descriptor (not closed on ``aclose``, only restored)."""

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
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
            return data


class FdSendStream(_Fd, ByteSendStream):
    """Bytes to a file descriptor (not closed on ``aclose``, only restored)."""

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        view = memoryview(item)
        while view:
            try:
                if self._poll:
                    n = os.write(self._fd, view)
                else:
                    n = await anyio.to_thread.run_sync(os.write, self._fd, view)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
                continue
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise anyio.BrokenResourceError from exc
            view = view[n:]


async def iter_lines(stream: ByteReceiveStream) -> AsyncIterator[bytes]:
    """Newline-terminated lines exactly as received (a last unterminated line too)."""
    buf = bytearray()
    scanned = 0  # bytes of buf already known to hold no newline (long lines stay linear)
    while True:
        try:
            data = await stream.receive(_CHUNK)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            break
        buf += data
        start = 0
        while (i := buf.find(b"\n", max(start, scanned))) >= 0:
            yield bytes(buf[start : i + 1])
            start = i + 1
        if start:
            del buf[:start]
        scanned = len(buf)
    if buf:
        yield bytes(buf)


async def on_stdio(run: Callable[[ByteReceiveStream, ByteSendStream], Awaitable[int]]) -> int:
    """Run ``run(client_in, client_out)`` over this process's stdin and stdout."""
    client_in, client_out = FdReceiveStream(0), FdSendStream(1)
    try:
        return await run(client_in, client_out)
    finally:
        await client_in.aclose()
        await client_out.aclose()
