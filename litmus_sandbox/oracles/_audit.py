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

Stdlib only besides the records it feeds; the probes that use it decide what it means.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import stat
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["Evidence", "Touch", "collect", "collecting", "install", "release"]

#: Which evidence named a path: the call's own audit events, or its process tree's report.
Source = Literal["audit", "process"]

#: A small regular file touched outside every snapshot is hashed before it changes.
BEFORE_HASH_MAX = 64 * 1024
#: At most this many paths, destinations and processes per call (a tool writing a million
#: files still leaves a bounded record; what is beyond is counted in ``dropped``).
MAX_TOUCHES = 100_000
MAX_CONNECTS = 256
MAX_SPAWNED = 256

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_SKIPPED = ("/proc/", "/sys/", "/dev/")
_KEPT = ("/dev/shm/",)
_RETIMED = frozenset({"retimed", "attrib"})
#: Operations that may change what an entry holds (or whether it is there).
_WRITES = frozenset(
    {"written", "created", "removed", "moved_from", "moved_to", "linked", "symlinked", "tree"}
)
#: ``dir_fd`` as the audit events give it when none was passed.
_NO_DIR_FD = (None, -1, -100)


class Touch:
    """One path a call touched: what it did there, and the path's state before."""

    __slots__ = ("before", "follow", "known", "ops", "path", "sha256", "source")

    def __init__(self, path: str, source: Source) -> None:
        self.path = path
        #: ``audit`` or ``process``: which evidence named the path.
        self.source = source
        self.ops: set[str] = set()
        #: ``lstat`` before the call changed it (None: it did not exist, or it is unknown).
        self.before: os.stat_result | None = None
        self.sha256: str | None = None
        #: A covered path written through: a symlink there leads the write elsewhere.
        self.follow = False
        #: Whether ``before`` was taken before the change (else the state before is unknown).
        self.known = False

    def __repr__(self) -> str:
        return f"<Touch {self.path} {sorted(self.ops)} {self.source}>"


class Evidence:
    """What one call was seen doing: the paths it touched, its moves, connections, processes.

    Filled by the audit hook (from the call's own context and threads) and, for a
    subprocess tool, by its process tree's report (:meth:`process_event`); read by the
    probes once the call ends. ``covered(path)``, when given, says a snapshot already
    knows the path's state before (no need to hash it).
    """

    __slots__ = (
        "_covered",
        "_lock",
        "_real_dirs",
        "call_id",
        "closed",
        "connects",
        "delegated",
        "dropped",
        "moves",
        "processes_watched",
        "spawned",
        "touches",
        "trees",
        "troubles",
    )

    def __init__(self, call_id: str, *, covered: Callable[[str], bool] | None = None) -> None:
        self.call_id = call_id
        self._covered = covered
        self._lock = threading.Lock()
        self.touches: dict[str, Touch] = {}
        #: Directories whose whole tree the call touched (rmtree, move, copytree).
        self.trees: dict[str, Source] = {}
        #: (source, destination) of each rename, in order.
        self.moves: list[tuple[str, str]] = []
        self.connects: list[tuple[Any, ...]] = []
        self.spawned: list[str] = []
        #: A runner outside this process performed the call (an adapter's server).
        self.delegated = False
        #: The call's processes are watched (``process`` evidence covers what they did).
        self.processes_watched = False
        #: No more audit events are taken (the call ended); process reports may still come.
        self.closed = False
        self.troubles = 0
        self.dropped = 0
        self._real_dirs: dict[str, str] = {}

    # ------------------------------------------------------------ questions

    @property
    def blind(self) -> bool:
        """Whether part of the call ran where no evidence reaches (a process not watched,
        a server an adapter talks to): what it did can then only be seen by its window."""
        return (bool(self.spawned) or self.delegated) and not self.processes_watched

    def retimed(self, path: str) -> bool:
        """Whether the call set ``path``'s times or attributes (``os.utime``, a process's
        attribute change) and wrote nothing there."""
        touch = self.touches.get(path)
        return touch is not None and bool(touch.ops & _RETIMED) and not touch.ops & _WRITES

    def claims(self, path: str) -> Source | None:
        """``audit`` or ``process`` when this evidence names ``path`` (or a tree above it)."""
        touch = self.touches.get(path)
        if touch is not None:
            return touch.source
        if self.trees:
            for top, source in list(self.trees.items()):  # a copy: a tool thread may add
                if path.startswith(top) and (len(path) == len(top) or path[len(top)] == "/"):
                    return source
        return None

    # ------------------------------------------------------------ recording

    def touch(
        self, path: str, op: str, source: Source = "audit", *, follow: bool = False
    ) -> Touch | None:
        """Note that the call did ``op`` at the absolute ``path`` (its directory resolved);
        ``follow``: the operation follows a symlink there (a write lands on its target)."""
        touch = self.touches.get(path)
        if touch is None:
            if len(self.touches) >= MAX_TOUCHES:
                self.dropped += 1
                return None
            touch = Touch(path, source)
            if source == "audit":
                if self._covered is not None and self._covered(path):
                    # A snapshot knows the path's state before, and whether it is a link
                    # (the probe follows it then): no system call here.
                    touch.follow = follow
                else:
                    st = _lstat(path)
                    if follow and st is not None and stat.S_ISLNK(st.st_mode):
                        return self.touch(os.path.realpath(path), op, source)
                    self._capture(touch, st)
            with self._lock:
                touch = self.touches.setdefault(path, touch)
        elif follow and not touch.follow:
            touch.follow = True  # made here (a link?), then written through
        touch.ops.add(op)
        return touch

    def late(self, path: str, op: str, source: Source = "audit") -> bool:
        """Note ``op`` at ``path``, found after the fact (its state before is unknown);
        whether the path is new to this evidence."""
        if path in self.touches:
            self.touches[path].ops.add(op)
            return False
        touch = Touch(path, source)
        touch.ops.add(op)
        with self._lock:
            self.touches.setdefault(path, touch)
        return True

    def tree(self, path: str, source: Source = "audit") -> None:
        """Note that the call touched everything under ``path``."""
        self.trees.setdefault(path, source)
        self.touch(path, "tree", source)

    def move(self, src: str, dst: str, source: Source = "audit") -> None:
        was = self.touch(src, "moved_from", source)
        self.touch(dst, "moved_to", source)
        self.moves.append((src, dst))
        if was is not None and was.before is not None and stat.S_ISDIR(was.before.st_mode):
            self.trees.setdefault(src, source)
            self.trees.setdefault(dst, source)

    def process_event(self, op: str, path: str, dest: str | None = None) -> None:
        """A report of the call's process tree: it did ``op`` at ``path`` (``moved`` to
        ``dest``). Paths are absolute, as the kernel resolved them."""
        if dest is not None:
            self.late(path, "moved_from", "process")
            self.late(dest, "moved_to", "process")
            self.moves.append((path, dest))
        else:
            self.late(path, op, "process")

    def _capture(self, touch: Touch, st: os.stat_result | None) -> None:
        """Keep the state of ``touch.path`` before the call changes it (``st``: its lstat)."""
        touch.before = st
        touch.known = True
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size <= BEFORE_HASH_MAX:
            try:
                fd = os.open(touch.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                return
            try:
                touch.sha256 = hashlib.sha256(os.read(fd, BEFORE_HASH_MAX + 1)).hexdigest()
            except OSError:
                pass
            finally:
                os.close(fd)

    def resolve(self, raw: Any, dir_fd: Any = None) -> str | None:
        """The absolute path an event names, its directory resolved (symlinks followed);
        None for what is not a file a tool leaves behind."""
        if isinstance(raw, int):  # an open descriptor (fchmod, ftruncate)
            try:
                return os.readlink(f"/proc/self/fd/{raw}")
            except OSError:
                return None
        path = os.fsdecode(os.fspath(raw))
        if not path.startswith("/"):
            at = os.getcwd() if dir_fd in _NO_DIR_FD else os.readlink(f"/proc/self/fd/{dir_fd}")
            path = f"{at}/{path}"
        parent, _, name = path.rpartition("/")
        if name in ("", ".", ".."):
            real = os.path.realpath(path)
        else:
            real = f"{self._real_dir(parent).rstrip('/')}/{name}"
        if real.startswith(_SKIPPED) and not real.startswith(_KEPT):
            return None
        return real

    def _real_dir(self, parent: str) -> str:
        """``parent`` resolved, kept for the call (a tool writes many files in few
        directories): three system calls whatever its depth, where ``realpath`` takes one
        per component."""
        real = self._real_dirs.get(parent)
        if real is None:
            try:
                fd = os.open(parent or "/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:  # not there (yet): resolve what exists
                real = os.path.realpath(parent or "/")
            else:
                try:
                    real = os.readlink(f"/proc/self/fd/{fd}")
                finally:
                    os.close(fd)
            self._real_dirs[parent] = real
        return real


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


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
