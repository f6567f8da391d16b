"""What one tool call was seen doing: the paths it touched, with their state before.

Theory of operation
-------------------
An :class:`Evidence` is made for each call by the probe that watches the filesystem, and
filled while the call runs: by the audit hook (``_audit.py``), from the call's own context
and threads, and, for a subprocess tool, by its process tree's report
(:meth:`Evidence.process_event`, from ``_runtime/supervised.py``). Each path becomes one
:class:`Touch`: what the call did there (``ops``), which evidence said so (``source``:
``audit`` or ``process``), and, the first time the hook sees it, the state of the path
before the change (``lstat``, and the sha256 of a small regular file no snapshot covers),
so that a change where no snapshot looks still has a before and an after. Paths are
absolute, their directories resolved (a write through a symlinked folder names the real
one); a write through a symlink at the last component is followed when the probe, or the
hook, knows it is one. Plain data and a few system calls; the probes decide what it means
(``fs/_attribution.py``).
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["Evidence", "Source", "Touch"]

#: Which evidence named a path: the call's own audit events, or its process tree's report.
Source = Literal["audit", "process"]

#: A small regular file touched outside every snapshot is hashed before it changes.
BEFORE_HASH_MAX = 64 * 1024
#: At most this many paths per call (a tool writing a million files still leaves a
#: bounded record; what is beyond is counted in ``dropped``).
MAX_TOUCHES = 100_000

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
    knows the path's state before (no need to hash it); ``known_dir(path)``, that a
    snapshot holds the path as a directory reached through no link (no need to resolve
    it).
    """

    __slots__ = (
        "_covered",
        "_known_dir",
        "_lock",
        "_real_dirs",
        "call_id",
        "closed",
        "connects",
        "delegated",
        "dropped",
        "moves",
        "processes_watched",
        "retimes",
        "spawned",
        "touches",
        "trees",
        "troubles",
    )

    def __init__(
        self,
        call_id: str,
        *,
        covered: Callable[[str], bool] | None = None,
        known_dir: Callable[[str], bool] | None = None,
    ) -> None:
        self.call_id = call_id
        self._covered = covered
        self._known_dir = known_dir
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
        #: Some path's times or attributes were set (only then is ``retimed`` asked).
        self.retimes = False
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
        if op in _RETIMED:
            self.retimes = True
        return touch

    def late(self, path: str, op: str, source: Source = "audit") -> bool:
        """Note ``op`` at ``path``, found after the fact (its state before is unknown);
        whether the path is new to this evidence."""
        if op in _RETIMED:
            self.retimes = True
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
        if type(raw) is str:  # the usual case, first: this runs at every write a tool makes
            path = raw
        elif isinstance(raw, int):  # an open descriptor (fchmod, ftruncate)
            try:
                return os.readlink(f"/proc/self/fd/{raw}")
            except OSError:
                return None
        else:
            path = os.fsdecode(os.fspath(raw))
        if not path.startswith("/"):
            at = os.getcwd() if dir_fd in _NO_DIR_FD else os.readlink(f"/proc/self/fd/{dir_fd}")
            path = f"{at}/{path}"
        parent, _, name = path.rpartition("/")
        if name in ("", ".", ".."):
            real = os.path.realpath(path)
        else:
            under = self._real_dirs.get(parent)
            real = (under if under is not None else self._real_dir(parent)) + name
        if real.startswith(_SKIPPED) and not real.startswith(_KEPT):
            return None
        return real

    def _real_dir(self, parent: str) -> str:
        """``parent`` resolved, ending in ``/``, kept for the call (a tool writes many
        files in few directories): three system calls whatever its depth, where
        ``realpath`` takes one per component."""
        real = self._real_dirs.get(parent)
        if real is None and self._known_dir is not None and self._known_dir(parent):
            # A real folder of the root's snapshot: no system call. (Replaced by a link
            # during the call, it is caught when the call ends: _attribution.follow_links.)
            real = self._real_dirs[parent] = parent.rstrip("/") + "/"
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
            real = self._real_dirs[parent] = real.rstrip("/") + "/"
        return real


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None
