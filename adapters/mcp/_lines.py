"""Newline-delimited messages cut from a byte stream, with a bound on a line's size.

:class:`LineSplitter` is the sans-io part: it is fed bytes as they come and gives the
whole lines in them, exactly as received. A line longer than its bound is never held
whole: a :class:`LineTooLong` stands for it as soon as it is known to be too long, and
the rest of it is dropped as it comes, up to its newline, so memory stays bounded
whatever the peer sends. :func:`iter_lines` runs it over an anyio byte stream;
:func:`feed_lines` hands the lines to a synchronous handler, from the event loop's read
callback itself when the stream offers one (``_fdstream``'s loop reader on asyncio).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, overload

import anyio
from anyio.abc import ByteReceiveStream

from ._relay._limits import ID_SCAN_BYTES

CHUNK = 1 << 16


class LineTooLong:
    """A line longer than the reader's bound: ``size`` bytes of it were read, and dropped
    but for ``head``, the first :data:`ID_SCAN_BYTES` of them (where its id is looked
    for)."""

    __slots__ = ("head", "size")

    def __init__(self, size: int, head: bytes = b"") -> None:
        self.size = size
        self.head = head

    def __repr__(self) -> str:
        return f"LineTooLong({self.size})"


class LineSplitter:
    """Cuts the bytes it is fed into lines (see the module's docstring)."""

    __slots__ = ("_buf", "_max", "_scanned", "_skipping")

    def __init__(self, max_bytes: int | None = None) -> None:
        self._max = max_bytes
        self._buf = bytearray()
        #: Bytes of the buffer already known to hold no newline (long lines stay linear).
        self._scanned = 0
        #: In a line over the bound, dropping it up to its newline.
        self._skipping = False

    def feed(self, data: bytes) -> list[bytes | LineTooLong]:
        """The lines ``data`` completes, in order (each with its newline)."""
        if self._skipping:
            i = data.find(b"\n")
            if i < 0:
                return []
            self._skipping, data = False, data[i + 1 :]
        buf = self._buf
        if (
            not buf
            and data.find(b"\n") == len(data) - 1 >= 0
            and (self._max is None or len(data) <= self._max)
        ):
            return [data]  # the common case, one whole message per read: no copy
        lines: list[bytes | LineTooLong] = []
        buf += data
        start = 0
        max_bytes = self._max
        while (i := buf.find(b"\n", max(start, self._scanned))) >= 0:
            if max_bytes is not None and i + 1 - start > max_bytes:
                lines.append(LineTooLong(i + 1 - start, bytes(buf[start : start + ID_SCAN_BYTES])))
            else:
                lines.append(bytes(buf[start : i + 1]))
            start = i + 1
        if start:
            del buf[:start]
        self._scanned = len(buf)
        if max_bytes is not None and len(buf) > max_bytes:
            lines.append(LineTooLong(len(buf), bytes(buf[:ID_SCAN_BYTES])))
            self._skipping, self._scanned = True, 0
            buf.clear()
        return lines

    def rest(self) -> bytes:
        """What was fed after the last newline (at the end of the stream: a last line)."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._scanned = 0
        return rest


@overload
def iter_lines(stream: ByteReceiveStream) -> AsyncGenerator[bytes, None]: ...
@overload
def iter_lines(
    stream: ByteReceiveStream, max_bytes: int
) -> AsyncGenerator[bytes | LineTooLong, None]: ...


async def iter_lines(
    stream: ByteReceiveStream, max_bytes: int | None = None
) -> AsyncGenerator[bytes | LineTooLong, None]:
    """Newline-terminated lines exactly as received (a last unterminated line too); with
    ``max_bytes``, a :class:`LineTooLong` for each line longer than that."""
    splitter = LineSplitter(max_bytes)
    while True:
        try:
            data = await stream.receive(CHUNK)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            break
        for line in splitter.feed(data):
            yield line
    if rest := splitter.rest():
        yield rest


#: A line handler's answer: None (done), or what the pump must await before the next line.
Later = Coroutine[Any, Any, None] | None
OnLine = Callable[[bytes | LineTooLong], Later]


async def feed_lines(
    stream: ByteReceiveStream,
    max_bytes: int,
    on_line: OnLine,
    until: Callable[[], bool] | None = None,
) -> None:
    """Hand each line of ``stream`` to ``on_line`` (lines as :func:`iter_lines` gives
    them), awaiting what it returns before the next line, until the stream ends or
    ``until()`` is true after a line. From the loop's read callback when the stream has a
    reader that pumps (``pump_reader``: an ``FdReceiveStream`` on asyncio)."""
    pump_reader = getattr(stream, "pump_reader", None)
    reader = pump_reader() if pump_reader is not None else None
    if reader is None:
        async with contextlib.aclosing(iter_lines(stream, max_bytes)) as lines:
            async for line in lines:
                later = on_line(line)
                if later is not None:
                    await later
                if until is not None and until():
                    return
        return
    splitter = LineSplitter(max_bytes)
    await reader.pump(splitter, on_line, until)
    if (until is None or not until()) and (rest := splitter.rest()):
        later = on_line(rest)  # a last line without its newline
        if later is not None:
            await later
