"""Reading one filesystem entry into an :class:`~._entry.Entry`, carefully.

Theory of operation
-------------------
An entry is made from its ``lstat`` result. When the previous entry at that path has the
same key and was not racy, its hash (or link target) is reused, and the entry itself when
nothing at all moved; otherwise a regular file is hashed and a symlink's target read.
Directories, FIFOs, sockets and devices are recorded by type and never opened.

Reading is careful: files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with
``fstat`` to be the regular file that was listed, so a FIFO, a device or a symlink swapped
in at the last moment is never opened or followed; an entry that vanishes between
listing and reading is treated as gone; an entry that cannot be read is recorded with its
error and no hash. Content is hashed in fixed-size chunks through one reused buffer.
A file hashed within the timestamp window of the walk is marked racy, so the next walk
hashes it again (see :mod:`._entry`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time

from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox.oracles.fs._entry import (
    COARSE_WINDOW_NS,
    FINE_WINDOW_NS,
    S_IFMT,
    Entry,
    same_key,
)

__all__ = ["EntryReader"]

_S_IFREG = stat.S_IFREG
_S_IFLNK = stat.S_IFLNK
# O_NONBLOCK: opening a FIFO swapped in for a file must not block; fstat then refuses it.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# O_NOATIME keeps our reads from touching atime (only allowed to the owner or root).
_NOATIME = getattr(os, "O_NOATIME", 0)
# open() errors meaning "this is no longer a regular file": a symlink (O_NOFOLLOW), a socket.
_SWAPPED = frozenset({errno.ELOOP, errno.ENXIO, errno.EISDIR})
_REPLACED = "replaced while reading"


class EntryReader:
    """Makes entries from ``lstat`` results, hashing what needs it.

    Args:
        hash_new: hash files that have no previous entry. False for a tripwire baseline
            (a home directory may hold gigabytes); set it back to True once the baseline
            is taken, so that files created or changed later are hashed.
        hash_chunk: read size for hashing, in bytes.

    A reader is used by one thread at a time (it owns the hashing buffer). ``hashed``
    counts the files hashed so far (for benchmarks and tests).

    Raises:
        ConfigError: ``hash_chunk`` is not positive.
    """

    def __init__(self, *, hash_new: bool = True, hash_chunk: int = 1 << 20) -> None:
        if hash_chunk <= 0:
            raise ConfigError("hash_chunk must be a positive number of bytes")
        self.hash_new = hash_new
        self.hash_chunk = hash_chunk
        self._buf: bytearray | None = None  # allocated at the first hash: walks may need none
        self.hashed = 0

    def _read_file(self, dir_fd: int | None, name: str) -> tuple[os.stat_result, str] | str | None:
        """(fstat, sha256) of the regular file at ``name``; an error text; None if gone."""
        try:
            try:
                fd = os.open(name, _FILE_FLAGS | _NOATIME, dir_fd=dir_fd)
            except PermissionError:
                fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)  # not the owner: atime may move
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in _SWAPPED:
                return _REPLACED
            return f"unreadable: {exc.strerror or exc}"
        try:
            st = os.fstat(fd)
            if st.st_mode & S_IFMT != _S_IFREG:
                return _REPLACED
            h = hashlib.sha256()
            if self._buf is None:
                self._buf = bytearray(self.hash_chunk)
            buf = self._buf
            view, readv = memoryview(buf), os.readv
            while n := readv(fd, (buf,)):
                h.update(view[:n])
            self.hashed += 1
            return st, h.hexdigest()
        except OSError as exc:
            return f"unreadable: {exc.strerror or exc}"
        finally:
            os.close(fd)

    def make(
        self,
        dir_fd: int | None,
        name: str,
        st: os.stat_result,
        prev: Entry | None,
        racy_from: int,
    ) -> Entry | None:
        """The entry for ``name`` (relative to ``dir_fd``, or a path) given its ``lstat``.

        Reuses ``prev``'s hash when the key is unchanged and ``prev`` was not racy.
        Returns None when the entry vanished meanwhile.
        """
        if prev is not None and not prev.racy and same_key(prev.st, st):
            if prev.st == st:
                return prev
            return Entry(st, sha256=prev.sha256, target=prev.target, error=prev.error)
        fmt = st.st_mode & S_IFMT
        if fmt == _S_IFREG:
            if prev is None and not self.hash_new:
                return Entry(st)
            for _ in range(3):  # the file may be swapped under us: retry a couple of times
                got = self._read_file(dir_fd, name)
                if got is None:
                    return None
                if isinstance(got, tuple):
                    fst, digest = got
                    stamp = max(fst.st_mtime_ns, fst.st_ctime_ns)
                    window = COARSE_WINDOW_NS if fst.st_mtime_ns % 1_000_000_000 == 0 else 0
                    racy = stamp >= racy_from - window
                    return Entry(fst, sha256=digest, racy=racy)
                if got != _REPLACED:
                    return Entry(st, error=got)
                try:
                    st = os.lstat(name, dir_fd=dir_fd)
                except FileNotFoundError:
                    return None
                if st.st_mode & S_IFMT != _S_IFREG:
                    return self.make(dir_fd, name, st, None, racy_from)
            return Entry(st, error="kept changing while being read")
        if fmt == _S_IFLNK:
            try:
                return Entry(st, target=os.readlink(name, dir_fd=dir_fd))
            except FileNotFoundError:
                return None
            except OSError as exc:
                return Entry(st, error=f"unreadable link: {exc.strerror or exc}")
        # Directories, FIFOs, sockets and devices: recorded by type, never opened.
        return Entry(st)

    def racy_from(self) -> int:
        """Entries stamped at or after this instant are racy for a walk starting now."""
        return time.time_ns() - FINE_WINDOW_NS
