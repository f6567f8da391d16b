"""The I/O of the benchmark's floor relays (``byte_relay.py``, ``mcp_bench.py
--recording-relay``, ``contract_relay.py``): one reader per direction, in the event loop's
read callback.

The floors share it, so that what one adds over another is its per-line work alone. A
copier writes what arrived on as it came; a pump cuts it into lines, hands each to
``on_line`` and writes it on unless ``on_line`` returns False. Writes block (the descriptor is made blocking for
the write, then non-blocking again): a floor need not queue.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable


def write(fd: int, data: bytes) -> None:
    """Write all of ``data`` to the non-blocking descriptor ``fd``, waiting as needed."""
    os.set_blocking(fd, True)
    os.write(fd, data)
    os.set_blocking(fd, False)


def _read(loop: asyncio.AbstractEventLoop, src: int, done: asyncio.Future[None]) -> bytes:
    """What arrived on ``src``: b"" when nothing did, or at its end (``done`` is set)."""
    try:
        data = os.read(src, 1 << 16)
    except BlockingIOError:
        return b""
    if not data:
        loop.remove_reader(src)
        if not done.done():
            done.set_result(None)
    return data


def copier(
    loop: asyncio.AbstractEventLoop, src: int, dst: int, done: asyncio.Future[None]
) -> Callable[[], None]:
    """The read callback for ``src``: the bytes to ``dst`` as they come, unparsed."""

    def ready() -> None:
        if data := _read(loop, src, done):
            write(dst, data)

    return ready


def pump(
    loop: asyncio.AbstractEventLoop,
    src: int,
    dst: int,
    on_line: Callable[[bytes], bool | None],
    done: asyncio.Future[None],
) -> Callable[[], None]:
    """The read callback for ``src``: each whole line to ``on_line``, then to ``dst``;
    ``done`` is set at the end of ``src``."""
    buf = bytearray()

    def ready() -> None:
        if not (data := _read(loop, src, done)):
            return
        buf.extend(data)
        while (i := buf.find(b"\n")) >= 0:
            line = bytes(buf[: i + 1])
            del buf[: i + 1]
            if on_line(line) is not False:
                write(dst, line)

    return ready


OnLine = Callable[[bytes], bool | None]


async def relay(
    server_in: int,
    server_out: int,
    from_client: OnLine | None = None,
    from_server: OnLine | None = None,
) -> None:
    """Pump this process's stdin to ``server_in`` and ``server_out`` to its stdout until
    either side ends: line by line through ``from_client`` and ``from_server``, or, where
    one is None, as bytes come."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    for fd in (0, 1, server_in, server_out):
        os.set_blocking(fd, False)
    for src, dst, on_line in ((0, server_in, from_client), (server_out, 1, from_server)):
        ready = (
            copier(loop, src, dst, done) if on_line is None else pump(loop, src, dst, on_line, done)
        )
        loop.add_reader(src, ready)
    await done
