"""Process evidence: what a process tree changed on the filesystem, told by fanotify.

Theory of operation
-------------------
A :class:`Watcher` marks whole filesystems (``FAN_MARK_FILESYSTEM``) for the changes a
tool can make - an entry created, removed or renamed, a file written, attributes changed -
and reads the kernel's events with the directory's file handle and the entry's name
(``FAN_REPORT_DFID_NAME``), which it turns back into a path (``open_by_handle_at`` and the
descriptor's link in ``/proc/self/fd``; a directory made and removed before its events are
read is found in the handles seen when it was made). Each event carries the pid of the
process that caused it *as seen from the reader's PID namespace*: a reader that is the
init of a PID namespace of its own sees a pid for the processes of that namespace (and of
the namespaces below it) and 0 for every other process. So the reader started as the init
of a tool's namespace (``_runtime/_supervisor.py``) reports exactly what the tool's process
tree did, whatever else the machine is doing: no race with a process that exits before its
events are read, since the pid is fixed when the event is queued.

Needs Linux 5.17 or later (``FAN_RENAME``) and ``CAP_SYS_ADMIN`` (fanotify's filesystem
marks): :func:`open_watcher` says why not when it cannot. A queue overflow is reported
(``overflow``): what was lost cannot be told, and the run's evidence is then incomplete.

This module imports only the standard library: the supervisor loads it by path.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct
import sys
from collections.abc import Sequence

__all__ = ["Watcher", "open_watcher"]

_FAN_CLOEXEC, _FAN_NONBLOCK = 0x1, 0x2
_FAN_REPORT_FID, _FAN_REPORT_DIR_FID, _FAN_REPORT_NAME = 0x200, 0x400, 0x800
_FAN_REPORT_TARGET_FID = 0x1000
_FAN_MARK_ADD, _FAN_MARK_FILESYSTEM = 0x1, 0x100
_FAN_MODIFY, _FAN_ATTRIB, _FAN_CLOSE_WRITE = 0x2, 0x4, 0x8
_FAN_CREATE, _FAN_DELETE = 0x100, 0x200
_FAN_Q_OVERFLOW, _FAN_RENAME, _FAN_ONDIR = 0x4000, 0x10000000, 0x40000000
_MASK = _FAN_MODIFY | _FAN_ATTRIB | _FAN_CLOSE_WRITE | _FAN_CREATE | _FAN_DELETE | _FAN_RENAME
_MASK |= _FAN_ONDIR
_INFO_FID, _INFO_DFID_NAME, _INFO_OLD, _INFO_NEW = 1, 2, 10, 12
_O_PATH = 0o10000000
_AT_FDCWD = -100
_META = struct.Struct("IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
_INFO = struct.Struct("BBH")  # info_type, pad, len
_HANDLE = struct.Struct("Ii")  # handle_bytes, handle_type (after an 8-byte fsid)

#: One change: (operation, path, destination of a rename or None).
Change = tuple[str, str, "str | None"]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The process's own symbols (libc among them): find_library would run ldconfig,
        # a subprocess, at every start of a supervisor.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
        libc.fanotify_mark.argtypes = [
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint64,
            ctypes.c_int,
            ctypes.c_char_p,
        ]
        libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


class Watcher:
    """A fanotify group marking the filesystems of some paths (see the module docstring)."""

    def __init__(self, libc: ctypes.CDLL, fd: int, mounts: list[int]) -> None:
        self._libc = libc
        self.fd = fd
        self._mounts = mounts
        #: Directory handles seen when the directory was made: they still name it after
        #: it is gone (its later events are read after it went).
        self._made: dict[bytes, str] = {}
        self.overflow = False

    def fileno(self) -> int:
        return self.fd

    def read(self, own_pid: int = 1) -> list[Change]:
        """Every change queued now that a process of the reader's namespace made (but the
        reader itself, ``own_pid``); non-blocking."""
        out: list[Change] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                self.overflow = True  # the group is broken: what follows is unknown
                return out
            if not data:
                return out
            self._parse(data, own_pid, out)

    def _parse(self, data: bytes, own_pid: int, out: list[Change]) -> None:
        at = 0
        cache: dict[bytes, str | None] = {}
        while at + _META.size <= len(data):
            length, _vers, _, meta_len, mask, fd, pid = _META.unpack_from(data, at)
            if length < _META.size:
                return
            end = at + length
            if fd >= 0:
                os.close(fd)
            if mask & _FAN_Q_OVERFLOW:
                self.overflow = True
            elif pid not in (0, own_pid):
                self._event(data, at + meta_len, end, mask, cache, out)
            at = end

    def _event(
        self,
        data: bytes,
        at: int,
        end: int,
        mask: int,
        cache: dict[bytes, str | None],
        out: list[Change],
    ) -> None:
        named: dict[int, str] = {}
        child: bytes | None = None
        while at + _INFO.size <= end:
            kind, _, size = _INFO.unpack_from(data, at)
            if size == 0:
                return
            if kind in (_INFO_DFID_NAME, _INFO_OLD, _INFO_NEW, _INFO_FID):
                count, _htype = _HANDLE.unpack_from(data, at + 4 + 8)
                handle_end = at + 4 + 8 + _HANDLE.size + count
                handle = data[at + 4 + 8 : handle_end]
                if kind == _INFO_FID:
                    child = handle
                else:
                    name = data[handle_end : at + size].split(b"\0", 1)[0]
                    folder = self._resolve(handle, cache)
                    if folder is not None:
                        own = name in (b"", b".")  # an event on the directory itself
                        base = folder.rstrip("/")
                        named[kind] = folder if own else f"{base}/{os.fsdecode(name)}"
            at += size
        if mask & _FAN_RENAME:
            if _INFO_OLD in named and _INFO_NEW in named:
                out.append(("moved", named[_INFO_OLD], named[_INFO_NEW]))
            return
        path = named.get(_INFO_DFID_NAME)
        if path is None:
            return
        # Events on one object queued before they are read are merged: one per bit.
        if mask & _FAN_CREATE:
            if mask & _FAN_ONDIR and child is not None:
                self._made.setdefault(child, path)
            out.append(("created", path, None))
        if mask & _FAN_MODIFY:
            out.append(("written", path, None))
        elif mask & _FAN_CLOSE_WRITE:  # opened for writing, nothing written (touch)
            out.append(("opened", path, None))
        if mask & _FAN_ATTRIB:
            out.append(("attrib", path, None))
        if mask & _FAN_DELETE:
            out.append(("removed", path, None))

    def _resolve(self, handle: bytes, cache: dict[bytes, str | None]) -> str | None:
        """The path of the directory a handle names now (or when it was made)."""
        if handle in cache:
            return cache[handle]
        found: str | None = None
        for mount in self._mounts:
            fd = self._libc.open_by_handle_at(mount, handle, _O_PATH)
            if fd >= 0:
                try:
                    found = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    found = None
                finally:
                    os.close(fd)
                if found is not None and found.endswith(" (deleted)"):
                    found = None
                if found is not None:
                    break
        if found is None:
            found = self._made.get(handle)
        cache[handle] = found
        return found

    def close(self) -> None:
        for fd in (self.fd, *self._mounts):
            with contextlib.suppress(OSError):
                os.close(fd)


def open_watcher(paths: Sequence[str]) -> tuple[Watcher | None, str]:
    """A watcher over the filesystems holding ``paths`` (each marked once), or None and
    why it cannot be made here."""
    libc = _libc()
    if libc is None:
        return None, f"fanotify needs Linux (this is {sys.platform})"
    flags = _FAN_CLOEXEC | _FAN_NONBLOCK | _FAN_REPORT_FID | _FAN_REPORT_DIR_FID
    flags |= _FAN_REPORT_NAME | _FAN_REPORT_TARGET_FID
    fd = libc.fanotify_init(flags, os.O_RDONLY | os.O_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        return None, f"fanotify_init: {os.strerror(err)} (fanotify needs CAP_SYS_ADMIN)"
    mounts: list[int] = []
    devices: set[int] = set()
    watcher = Watcher(libc, fd, mounts)
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_dev in devices:
            continue
        devices.add(st.st_dev)
        flag = _FAN_MARK_ADD | _FAN_MARK_FILESYSTEM
        if libc.fanotify_mark(fd, flag, _MASK, _AT_FDCWD, os.fsencode(path)) != 0:
            err = ctypes.get_errno()
            watcher.close()
            return None, f"fanotify cannot watch the filesystem of {path}: {os.strerror(err)}"
        mounts.append(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    return watcher, "fanotify marks on " + ", ".join(sorted(paths))
