"""The floor for ``mcp_bench.py``: a stdio relay that copies bytes and parses nothing.

    python bench/byte_relay.py SERVER_COMMAND...

Spawns the server and copies the client's stdin to it and its stdout back, from asyncio
reader callbacks (one loop iteration per chunk, no tasks). What it adds to a call is the
cost of the two extra process hops alone: what no relay in Python can go below.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys


def _copy(loop: asyncio.AbstractEventLoop, src: int, dst: int, done: asyncio.Future[None]) -> None:
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
        os.set_blocking(dst, True)  # the floor: the write never waits for the loop
        os.write(dst, data)
        os.set_blocking(dst, False)

    loop.add_reader(src, ready)


async def relay(server: subprocess.Popen[bytes]) -> None:
    assert server.stdin is not None
    assert server.stdout is not None
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    for fd in (0, 1, server.stdin.fileno(), server.stdout.fileno()):
        os.set_blocking(fd, False)
    _copy(loop, 0, server.stdin.fileno(), done)
    _copy(loop, server.stdout.fileno(), 1, done)
    await done


def main() -> None:
    server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    asyncio.run(relay(server))
    assert server.stdin is not None
    server.stdin.close()
    server.wait()


if __name__ == "__main__":
    main()
