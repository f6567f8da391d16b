"""A writer to kill: the object-storage tests SIGKILL it at a known point.

    s3_writer.py write URL             an output to URL, 1 MiB written, then waits
    s3_writer.py upload URL MIB        an output of MIB MiB, uploaded (prints first)
    s3_writer.py stall URL MIB         as upload, but it stops for good once the first
                                       part of its multipart upload is stored
    s3_writer.py record PREFIX ROOT    a sandbox recording into PREFIX: one episode
                                       whole, a second one begun, then waits

Each prints one line when it reaches its point (``written``, ``uploading``,
``part stored``, ``recording SHARD``) and then waits to be killed. The S3 server is reached through the
standard ``AWS_*`` variables of the environment.
"""

from __future__ import annotations

import sys
import time

import anyio


def write(url: str) -> None:
    from litmus_sandbox._store.files import replaced

    with replaced(url) as f:
        f.write(b'{"partial": true}\n' * (1024 * 1024 // 18))
        f.flush()
        print("written", flush=True)
        time.sleep(120)


def upload(url: str, mib: int) -> None:
    from litmus_sandbox._store.files import replaced

    line = b'{"run_id":"c","safe":true}\n'
    with replaced(url) as f:
        for _ in range(mib * 1024 * 1024 // len(line)):
            f.write(line)
        print("uploading", flush=True)  # the upload starts as the block ends


def stall(url: str, mib: int) -> None:
    """Pause the multipart upload after its first part, at a point the test can see."""
    import s3fs

    call = s3fs.S3FileSystem._call_s3

    async def paused(self: s3fs.S3FileSystem, method: str, *args: object, **kw: object) -> object:
        out = await call(self, method, *args, **kw)
        if method == "upload_part":
            print("part stored", flush=True)
            await anyio.sleep(120)
        return out

    s3fs.S3FileSystem._call_s3 = paused
    upload(url, mib)


async def record(prefix: str, root: str) -> None:
    from litmus_sandbox import Sandbox

    async with Sandbox(root=root, episodes=prefix, probes=(), egress=False) as sb:
        async with sb.episode("whole-case") as ep:
            ep.message("user", "hello")
            ep.message("assistant", "done")
        async with sb.episode("cut-case") as ep:
            ep.message("user", "started, never ended")
            print(f"recording {sb.shard}", flush=True)
            await anyio.sleep(120)


def main(argv: list[str]) -> None:
    what, *rest = argv
    if what == "write":
        write(rest[0])
    elif what == "upload":
        upload(rest[0], int(rest[1]))
    elif what == "stall":
        stall(rest[0], int(rest[1]))
    elif what == "record":
        anyio.run(record, rest[0], rest[1])
    else:
        raise SystemExit(f"unknown: {what}")


if __name__ == "__main__":
    main(sys.argv[1:])
