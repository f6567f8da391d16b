"""The floor for ``mcp_bench.py``: a stdio relay that copies bytes and parses nothing.

    python bench/byte_relay.py SERVER_COMMAND...

Spawns the server and copies the client's stdin to it and its stdout back, from asyncio
reader callbacks (one loop iteration per chunk, no tasks: ``relay_io.py``). What it adds to a call is the
cost of the two extra process hops alone: what no relay in Python can go below.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

from relay_io import relay


def main() -> None:
    server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None
    assert server.stdout is not None
    asyncio.run(relay(server.stdin.fileno(), server.stdout.fileno()))
    server.stdin.close()
    server.wait()


if __name__ == "__main__":
    main()
