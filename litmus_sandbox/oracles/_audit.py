"""Evidence of what each in-process tool call did: a Python audit hook tied to the call.

Theory of operation
-------------------
One audit hook (:func:`sys.addaudithook`) is installed once per process, by the first
probe that asks (:func:`install`; a hook cannot be removed). It acts only while a call
collects evidence: :func:`collect` puts the call's :class:`Evidence` in a context
variable. anyio copies the context into the tasks a call starts and into worker threads,
so a sync tool run in a thread is covered, and calls in flight at once in separate tasks
each fill their own. With no call collecting, the hook costs a dictionary lookup (most
events are not looked at) and a context variable read.

=====================================  ==============================================
audit events                           recorded as
=====================================  ==============================================
``open`` with a write flag,            a path written (the resolved path: a write
``os.truncate``, ``os.chmod``,         through a symlink names the real target)
``os.chown``, ``os.utime``,
``os.setxattr``, ``os.removexattr``
``os.mkdir``, ``os.symlink``,          a path created or removed (the entry itself,
``os.link``, ``os.remove``,            never followed)
``os.rmdir``, ``tempfile.mk*``
``os.rename`` (``os.replace`` too)     both paths, and the move from one to the other
``shutil.rmtree``, ``shutil.move``,    a whole tree (everything under the path)
``shutil.copytree``
``sqlite3.connect``                    the database and its journal files
``socket.connect``                     a destination (first 256)
``subprocess.Popen``, ``os.system``,   a process started: what it does is beyond the
``os.exec``, ``os.posix_spawn``,       hook (its own process tree is the evidence, see
``os.spawn``, ``os.fork``              ``_runtime/processes.py``)
=====================================  ==============================================

Relative paths are made absolute against the working directory (or the ``dir_fd``, through
``/proc/self/fd``) at the event. The first time a call touches a path, the state of the
path before (``lstat``, and the sha256 of a small regular file that no snapshot covers) is
kept, so a change to a path no snapshot watches still has a before and an after. Paths
under ``/proc``, ``/sys`` and ``/dev`` (but ``/dev/shm``) are not files a tool leaves
behind and are skipped. The hook never raises: a surprise is counted in
:attr:`Evidence.troubles`.

What a call's evidence holds is ``_evidence.py``'s; the probes decide what it means.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from litmus_sandbox.oracles._evidence import Evidence as Evidence
from litmus_sandbox.oracles._evidence import Touch as Touch

__all__ = ["Evidence", "Touch", "collect", "collecting", "install", "release"]

#: At most this many destinations and processes per call.
MAX_CONNECTS = 256
MAX_SPAWNED = 256

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


#: The evidence of the calls in flight in this context (usually one; a tuple so that
#: several probes can each collect their own).
_current: contextvars.ContextVar[tuple[Evidence, ...]] = contextvars.ContextVar(
    "litmus_audit_evidence", default=()
)


def collect(evidence: Evidence) -> contextvars.Token[tuple[Evidence, ...]]:
    """Start collecting ``evidence`` in the current context (and what it spawns)."""
    return _current.set((*_current.get(), evidence))


def release(evidence: Evidence, token: contextvars.Token[tuple[Evidence, ...]]) -> None:
    """Stop collecting ``evidence``: it takes no more audit events."""
    evidence.closed = True
    try:
        _current.reset(token)
    except ValueError:  # set in another context (a call ended elsewhere): drop it by value
        _current.set(tuple(e for e in _current.get() if e is not evidence))


def collecting() -> tuple[Evidence, ...]:
    """The evidence collected in the current context (for reports of processes)."""
    return tuple(e for e in _current.get() if not e.closed)


# ---------------------------------------------------------------- the hook

Handler = Callable[[Evidence, tuple[Any, ...]], None]


def _written(ev: Evidence, path: Any, dir_fd: Any = None) -> None:
    real = ev.resolve(path, dir_fd)
    if real is not None:
        ev.touch(real, "written", follow=True)


def _entry(op: str) -> Handler:
    def handle(ev: Evidence, args: tuple[Any, ...]) -> None:
        real = ev.resolve(args[0], args[-1])
        if real is not None:
            ev.touch(real, op)

    return handle


def _on_open(ev: Evidence, args: tuple[Any, ...]) -> None:
    path, _mode, flags = args
    if isinstance(flags, int) and flags & _WRITE_FLAGS and not isinstance(path, int):
        _written(ev, path)


def _on_rename(ev: Evidence, args: tuple[Any, ...]) -> None:
    src = ev.resolve(args[0], args[2])
    dst = ev.resolve(args[1], args[3])
    if src is not None and dst is not None:
        ev.move(src, dst)
    elif src is not None or dst is not None:
        ev.touch(src or dst or "", "moved")


def _on_link(ev: Evidence, args: tuple[Any, ...]) -> None:
    real = ev.resolve(args[1], args[3])
    if real is not None:
        ev.touch(real, "linked")


def _on_symlink(ev: Evidence, args: tuple[Any, ...]) -> None:
    real = ev.resolve(args[1], args[2])
    if real is not None:
        ev.touch(real, "symlinked")


def _on_changed(ev: Evidence, args: tuple[Any, ...]) -> None:
    dir_fd = args[-1] if len(args) >= 3 else None
    _written(ev, args[0], dir_fd)


def _on_utime(ev: Evidence, args: tuple[Any, ...]) -> None:
    real = ev.resolve(args[0], args[-1])
    if real is not None:
        ev.touch(real, "retimed", follow=True)


def _on_xattr(ev: Evidence, args: tuple[Any, ...]) -> None:
    _written(ev, args[0])


def _on_tree(index: int) -> Handler:
    def handle(ev: Evidence, args: tuple[Any, ...]) -> None:
        real = ev.resolve(args[index])
        if real is not None:
            ev.tree(real)

    return handle


def _on_move(ev: Evidence, args: tuple[Any, ...]) -> None:
    for raw in args[:2]:
        real = ev.resolve(raw)
        if real is not None:
            ev.tree(real)


def _on_temp(ev: Evidence, args: tuple[Any, ...]) -> None:
    real = ev.resolve(args[0])
    if real is not None:
        ev.touch(real, "created")


def _on_sqlite(ev: Evidence, args: tuple[Any, ...]) -> None:
    database = args[0]
    if isinstance(database, str | bytes | os.PathLike):
        name = os.fsdecode(os.fspath(database))
        if name and name != ":memory:" and not name.startswith("file:"):
            real = ev.resolve(name)
            if real is not None:
                for suffix in ("", "-journal", "-wal", "-shm"):
                    ev.touch(real + suffix, "written", follow=True)


def _on_connect(ev: Evidence, args: tuple[Any, ...]) -> None:
    if len(ev.connects) < MAX_CONNECTS:
        address = args[1]
        ev.connects.append(address if isinstance(address, tuple) else (address,))


def _on_spawn(index: int) -> Handler:
    def handle(ev: Evidence, args: tuple[Any, ...]) -> None:
        if len(ev.spawned) < MAX_SPAWNED:
            what = args[index] if index < len(args) else None
            if isinstance(what, list | tuple) and what:
                what = what[0]
            ev.spawned.append(os.fsdecode(what) if isinstance(what, str | bytes) else "?")

    return handle


_HANDLERS: dict[str, Handler] = {
    "open": _on_open,
    "os.truncate": _on_changed,
    "os.chmod": _on_changed,
    "os.chown": _on_changed,
    "os.utime": _on_utime,
    "os.setxattr": _on_xattr,
    "os.removexattr": _on_xattr,
    "os.mkdir": _entry("created"),
    "os.remove": _entry("removed"),
    "os.rmdir": _entry("removed"),
    "os.rename": _on_rename,
    "os.link": _on_link,
    "os.symlink": _on_symlink,
    "shutil.rmtree": _on_tree(0),
    "shutil.copytree": _on_tree(1),
    "shutil.move": _on_move,
    "tempfile.mkstemp": _on_temp,
    "tempfile.mkdtemp": _on_temp,
    "sqlite3.connect": _on_sqlite,
    "socket.connect": _on_connect,
    "subprocess.Popen": _on_spawn(0),
    "os.system": _on_spawn(0),
    "os.exec": _on_spawn(0),
    "os.posix_spawn": _on_spawn(0),
    "os.spawn": _on_spawn(1),
    "os.fork": _on_spawn(99),
    "os.forkpty": _on_spawn(99),
}
_get_handler = _HANDLERS.get
_get_current = _current.get


def _hook(event: str, args: tuple[Any, ...]) -> None:
    handler = _get_handler(event)
    if handler is None:
        return
    collecting = _get_current()
    if not collecting:
        return
    for ev in collecting:
        if ev.closed:
            continue
        try:
            handler(ev, args)
        except Exception:  # never break the tool's own operation
            ev.troubles += 1


_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Install the audit hook in this process (once; later calls do nothing)."""
    global _installed
    with _install_lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True
