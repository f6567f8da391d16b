"""The I/O of the benchmark's floor relays (``mcp_bench.py --recording-relay``,
``contract_relay.py``): one line pump per direction, in the event loop's read callback.

Both floors share it, so that what one adds over the other is its per-line work alone.
A pump reads what arrived, cuts it into lines, hands each to ``on_line`` and writes it
on unless ``on_line`` returns False. Writes block (the descriptor is made blocking for
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
        try:
            data = os.read(src, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            loop.remove_reader(src)
            if not done.done():
                done.set_result(None)
            return
        buf.extend(data)
        while (i := buf.find(b"\n")) >= 0:
            line = bytes(buf[: i + 1])
            del buf[: i + 1]
            if on_line(line) is not False:
                write(dst, line)

    return ready


async def relay(
    server_in: int,
    server_out: int,
    from_client: Callable[[bytes], bool | None],
    from_server: Callable[[bytes], bool | None],
) -> None:
    """Pump this process's stdin to ``server_in`` and ``server_out`` to its stdout until
    either side ends."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    for fd in (0, 1, server_in, server_out):
        os.set_blocking(fd, False)
    loop.add_reader(0, pump(loop, 0, server_in, from_client, done))
    loop.add_reader(server_out, pump(loop, server_out, 1, from_server, done))
    await done
