"""Many directories watched one level deep with one inotify descriptor and no thread.

The directories beside a root in a busy temp dir can number hundreds: watchdog would run
a thread per directory. Here one non-blocking inotify descriptor watches them all, and
is read at each boundary of a call, synchronously: the kernel queues an event when the
change is made, so by the time a tool returns, what it did is in the queue and lands on
its call. Events only name what to rescan (:class:`~._watch.Hints`); the snapshot
decides what changed. Linux only: elsewhere, or when the kernel refuses (the watch
limit), :meth:`InotifyTops.open` returns None and the caller falls back to checking the
directories when it finishes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import struct
import sys

from litmus_sandbox.oracles.fs._watch import Hints

__all__ = ["InotifyTops"]

_MODIFY, _ATTRIB, _CLOSE_WRITE = 0x2, 0x4, 0x8
_MOVED_FROM, _MOVED_TO, _CREATE, _DELETE = 0x40, 0x80, 0x100, 0x200
_DELETE_SELF, _MOVE_SELF = 0x400, 0x800
_Q_OVERFLOW, _IGNORED = 0x4000, 0x8000
_ONLYDIR, _DONT_FOLLOW = 0x01000000, 0x02000000
_MASK = (
    _MODIFY
    | _ATTRIB
    | _CLOSE_WRITE
    | _MOVED_FROM
    | _MOVED_TO
    | _CREATE
    | _DELETE
    | _DELETE_SELF
    | _MOVE_SELF
    | _ONLYDIR
    | _DONT_FOLLOW
)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


class InotifyTops:
    """One inotify descriptor over several directories, each marking its own hints."""

    def __init__(self, libc: ctypes.CDLL, fd: int, watches: dict[int, Hints]) -> None:
        self._libc = libc
        self._fd = fd
        self._watches = watches
        #: Directories whose watch the kernel dropped (deleted or moved away): watched
        #: again once something is there anew.
        self._lost: list[Hints] = []

    @classmethod
    def open(cls, tops: list[Hints]) -> InotifyTops | None:
        """Watch each hints' top (one level); None when inotify cannot do it here."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        watches: dict[int, Hints] = {}
        for hints in tops:
            wd = libc.inotify_add_watch(fd, os.fsencode(hints.top), _MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                    # Gone since it was listed, or not ours to read (another user's
                    # private folder): nothing of ours can land there unseen by the rest.
                    continue
                os.close(fd)  # the watch limit, or a refusal: check at the end instead
                return None
            watches[wd] = hints
        return cls(libc, fd, watches)

    def drain(self) -> set[Hints]:
        """Hand every queued event to its hints (non-blocking); the hints marked."""
        touched: set[Hints] = set()
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                if self._lost:
                    self._rewatch(touched)
                return touched
            except OSError:
                self._everything()
                return set(self._watches.values())
            self._dispatch(data, touched)

    def _dispatch(self, data: bytes, touched: set[Hints]) -> None:
        at = 0
        while at + _HEADER.size <= len(data):
            wd, mask, _cookie, size = _HEADER.unpack_from(data, at)
            raw = data[at + _HEADER.size : at + _HEADER.size + size].rstrip(b"\0")
            at += _HEADER.size + size
            if mask & _Q_OVERFLOW:
                self._everything()
                touched.update(self._watches.values())
                continue
            hints = self._watches.get(wd)
            if hints is None:
                continue
            if mask & _IGNORED:  # the kernel dropped the watch (the directory went)
                del self._watches[wd]
                self._lost.append(hints)
                hints.mark_everything()
                touched.add(hints)
                continue
            touched.add(hints)
            if mask & (_DELETE_SELF | _MOVE_SELF) or not raw:
                hints.mark_everything()  # the directory itself changed: rescan it whole
                continue
            # An entry added or removed: the listing is rescanned too (see Hints.mark).
            listing = mask & (_CREATE | _MOVED_TO | _MOVED_FROM | _DELETE)
            kind = "moved" if listing else "modified"
            hints.mark(f"{hints.top.rstrip('/')}/{os.fsdecode(raw)}", kind)

    def _rewatch(self, touched: set[Hints]) -> None:
        """Watch again the directories that came back (a folder deleted and made anew)."""
        still: list[Hints] = []
        for hints in self._lost:
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(hints.top), _MASK)
            if wd < 0:
                still.append(hints)
                continue
            self._watches[wd] = hints
            hints.mark_everything()  # what it holds now was never seen by this watch
            touched.add(hints)
        self._lost = still

    def _everything(self) -> None:
        for hints in self._watches.values():
            hints.mark_everything()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
