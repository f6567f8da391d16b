"""The stat helper process: lists directories and ``lstat``-s their entries.

Run by path (``python -I -S _stat_worker.py``), so it imports nothing but the standard
library and starts in a few milliseconds. :mod:`._stat_helper` talks to it over its
standard input and output; it exits when its input closes (which the kernel does for it
when the parent dies).

Each message, both ways, is a 4-byte little-endian length and a :mod:`marshal` payload.

* request: ``(top, [rel, ...])``: directories relative to ``top`` (``""`` is ``top``).
* response: one item per requested directory, in order: ``(rel, rows)`` when listed,
  ``(rel, None)`` when there is no directory at that path any more (gone, or a component
  replaced by a file or a symlink: paths are opened one component at a time and never
  through a symlink), ``(rel, "unlistable: ...")`` when it cannot be listed. A row is
  ``(name, stat, mtime_ns, ctime_ns)``, where ``stat`` is the tuple part of the entry's
  ``os.stat_result`` (mode, inode, device, nlink, uid, gid, size and whole seconds of
  atime, mtime and ctime), or ``(name, None, 0, 0)`` when ``lstat`` failed for another
  reason than the entry being gone.

The worker only reads metadata: it never opens a file, follows a symlink it lists, or
descends into a directory it was not asked for.
"""

from __future__ import annotations

import errno
import marshal
import os
import struct
import sys
from typing import BinaryIO

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LEN = struct.Struct("<I")

#: (name, tuple(lstat), mtime_ns, ctime_ns)
Row = tuple[str, tuple[float, ...] | None, int, int]
Listing = tuple[str, list[Row] | str | None]


#: open() errors meaning "no directory there any more on this path": gone, or a component
#: replaced by a file or by a symlink (never followed).
GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})


def open_beneath(top: str, rel: str) -> int:
    """Open the directory ``rel`` under ``top`` one component at a time, following no
    symlink on the way (a component that is one fails with ELOOP, a file with ENOTDIR).

    Raises:
        OSError: as ``os.open``.
    """
    fd = os.open(top, _DIR_FLAGS)
    if not rel:
        return fd
    try:
        for part in rel.split("/"):
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def list_dirs(top: str, rels: list[str]) -> list[Listing]:
    """The rows of each directory in ``rels`` (see the module docstring)."""
    out: list[Listing] = []
    lstat = os.lstat
    for rel in rels:
        try:
            fd = open_beneath(top, rel)
        except OSError as exc:
            gone = exc.errno in GONE
            out.append((rel, None if gone else f"unlistable: {exc.strerror or exc}"))
            continue
        try:
            names = os.listdir(fd)
        except OSError as exc:
            out.append((rel, f"unlistable: {exc.strerror or exc}"))
            os.close(fd)
            continue
        rows: list[Row] = []
        add = rows.append
        try:
            for name in names:
                try:
                    st = lstat(name, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError:
                    add((name, None, 0, 0))
                    continue
                add((name, tuple(st), st.st_mtime_ns, st.st_ctime_ns))
        finally:
            os.close(fd)
        out.append((rel, rows))
    return out


def _read_exact(f: BinaryIO, n: int) -> bytes | None:
    data = f.read(n)
    return data if len(data) == n else None


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until ``inp`` ends."""
    while (head := _read_exact(inp, _LEN.size)) is not None:
        body = _read_exact(inp, _LEN.unpack(head)[0])
        if body is None:
            return
        top, rels = marshal.loads(body)
        payload = marshal.dumps(list_dirs(top, rels))
        out.write(_LEN.pack(len(payload)))
        out.write(payload)
        out.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
