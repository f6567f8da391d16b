"""watchdog as a hint: dirty paths per tree, a barrier, and overflow detection.

watchdog delivers events on its own threads. The handler here only records *which paths
and directories may have changed* (behind a ``threading.Lock``); it never decides what
changed - the rescan does. Three things keep the hint honest:

* **Barrier.** Events reach the handler through three threads (inotify reader, emitter,
  dispatcher), so when a tool call returns, its events may still be in flight. Before
  trusting the hints, :meth:`Watch.barrier` rewrites the tree top's own atime/mtime with
  their current values (only its ctime moves, and the top is not an entry of the tree)
  and waits until the resulting attribute event comes out of the pipeline: inotify
  delivers one watch's events in order, so every earlier event has been handled.
* **Overflow.** The kernel drops events when its queue overflows, and watchdog says so
  only in a log record (``Inotify queue overflowed``). A logging handler on watchdog's
  loggers turns any warning or error into "everything dirty" for every live watch; so do
  an exception in the handler, a barrier that times out, and a top directory that was
  deleted or replaced.
* **Verification.** Whatever the hints say, the probe's end-of-episode pass walks
  everything (see ``fs.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import weakref
from typing import Any

from watchdog.events import (
    DirAttribEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

__all__ = ["Hints", "Watch", "watchdog_logs_visible"]

# Only what can change a snapshot: no opened/closed events (our own hashing would produce
# them), no synthesized "directory modified" for every write (the handler marks the parent
# itself on create, delete and move). This also narrows the kernel's inotify mask.
_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileModifiedEvent,
    FileAttribEvent,
    DirAttribEvent,
    FileMovedEvent,
    DirMovedEvent,
]
_LISTING_EVENTS = frozenset({"created", "deleted", "moved"})
#: watchdog loggers whose warnings mean "events may have been lost".
_LOGGERS = (
    "watchdog",
    "watchdog.observers.inotify",
    "watchdog.observers.inotify_c",
    "watchdog.observers.api",
)


def watchdog_logs_visible() -> bool:
    """Whether watchdog's overflow warning would reach a handler (logging not silenced)."""
    return all(logging.getLogger(n).isEnabledFor(logging.WARNING) for n in _LOGGERS[1:3])


class Hints:
    """Dirty paths and directories of one tree, written by watchdog's thread.

    Paths are relative to ``top``; paths under ``exclude`` and deeper than ``max_depth``
    are ignored. ``everything`` means "do not trust the hints: rescan it all".
    """

    def __init__(self, top: str, *, exclude: frozenset[str], max_depth: int | None) -> None:
        self.top = top
        self._prefix = top.rstrip("/") + "/"  # "/" itself is a valid top
        self._exclude = tuple(exclude)
        self._max_depth = max_depth
        self._lock = threading.Lock()
        self._paths: set[str] = set()
        self._dirs: set[str] = set()
        self._everything = False
        #: Attribute events seen on the top itself (barriers), guarded by the watch's condition.
        self.barriers_seen = 0

    def _rel(self, path: str) -> str | None:
        if not path.startswith(self._prefix):
            return None
        rel = path[len(self._prefix) :]
        for ex in self._exclude:
            if rel == ex or rel.startswith(ex + "/"):
                return None
        if self._max_depth is not None and rel.count("/") >= self._max_depth:
            return None
        return rel

    def mark(self, path: str, event_type: str) -> None:
        rel = self._rel(path)
        if rel is None:
            return
        with self._lock:
            self._paths.add(rel)
            if event_type in _LISTING_EVENTS:
                self._dirs.add(rel.rpartition("/")[0])

    def mark_everything(self) -> None:
        with self._lock:
            self._everything = True

    def take(self) -> tuple[set[str], set[str], bool]:
        """The hints gathered so far (and start afresh): paths, dirs, everything."""
        with self._lock:
            out = (self._paths, self._dirs, self._everything)
            self._paths, self._dirs, self._everything = set(), set(), False
        return out


class _Handler(FileSystemEventHandler):
    def __init__(self, watch: Watch, hints: Hints) -> None:
        self._watch = watch
        self._hints = hints

    def dispatch(self, event: FileSystemEvent) -> None:
        # Runs on watchdog's dispatcher thread: it must never raise (that would kill the
        # thread and silently stop all hints), so any surprise means "rescan everything".
        try:
            hints = self._hints
            src = os.fsdecode(event.src_path)
            kind = event.event_type
            if src == hints.top:
                if kind == "attrib":
                    self._watch.barrier_seen(hints)
                elif kind in _LISTING_EVENTS:
                    self._watch.trouble(f"{hints.top} was {kind}")
                return
            hints.mark(src, kind)
            if event.dest_path:
                hints.mark(os.fsdecode(event.dest_path), "created")
        except Exception as exc:
            self._watch.trouble(f"event handler failed: {exc!r}")


class _LogTap(logging.Handler):
    """Turns watchdog's warnings (queue overflow, lost watches) into "everything dirty"."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.watches: weakref.WeakSet[Watch] = weakref.WeakSet()

    def emit(self, record: logging.LogRecord) -> None:
        for watch in list(self.watches):
            watch.trouble(f"watchdog: {record.getMessage()}")


_tap: _LogTap | None = None
_tap_lock = threading.Lock()


def _log_tap() -> _LogTap:
    global _tap
    with _tap_lock:
        if _tap is None:
            _tap = _LogTap()
            # On each logger, not only the parent: a child set not to propagate must not
            # hide an overflow. A record seen twice only marks "everything" twice.
            for name in _LOGGERS:
                logging.getLogger(name).addHandler(_tap)
        return _tap


class Watch:
    """One watchdog observer over several trees (the sandbox root and tripwires).

    Args:
        trees: ``(hints, recursive)`` for each directory to watch.
        barrier_timeout: seconds to wait for a barrier before giving up on the hints.
    """

    def __init__(self, trees: list[tuple[Hints, bool]], *, barrier_timeout: float = 2.0) -> None:
        self._trees = trees
        self.barrier_timeout = barrier_timeout
        self._cond = threading.Condition()
        self._trouble_seq = 0
        self._observer: BaseObserver | None = None
        self._tops: dict[str, int] = {}
        #: Why the hints can no longer be trusted at all (None while they can).
        self.broken: str | None = None
        self.troubles: list[str] = []

    def start(self) -> None:
        """Schedule every tree and start watching (watches exist when this returns).

        Raises:
            OSError: the platform refused a watch (e.g. the inotify watch limit).
        """
        observer = self._observer = Observer()
        for hints, recursive in self._trees:
            observer.schedule(
                _Handler(self, hints), hints.top, recursive=recursive, event_filter=_FILTER
            )
            self._tops[hints.top] = os.stat(hints.top).st_ino
        _log_tap().watches.add(self)
        observer.start()

    def stop(self) -> None:
        """Stop watching and join watchdog's threads (blocking)."""
        if _tap is not None:
            _tap.watches.discard(self)
        observer, self._observer = self._observer, None
        if observer is None:
            return
        # Stop the emitters, then drop the events they queued: after a burst, the dispatcher
        # would otherwise work through all of them (seconds) before seeing the stop.
        observer.unschedule_all()
        with contextlib.suppress(queue.Empty):
            while True:
                observer.event_queue.get_nowait()
        observer.stop()
        with contextlib.suppress(RuntimeError):  # never started: nothing to join
            observer.join()

    def trouble(self, why: str) -> None:
        """Events may have been lost: every tree is dirty everywhere. Any thread."""
        for hints, _ in self._trees:
            hints.mark_everything()
        with self._cond:
            self._trouble_seq += 1
            if len(self.troubles) < 20:
                self.troubles.append(why)
            self._cond.notify_all()

    def barrier_seen(self, hints: Hints) -> None:
        with self._cond:
            hints.barriers_seen += 1
            self._cond.notify_all()

    def barrier(self, hints: Hints) -> bool:
        """Wait until every event caused before now in ``hints``'s tree was handled.

        Returns False (and marks the tree dirty everywhere) when that cannot be known.
        Blocking: call it from a worker thread.
        """
        top = hints.top
        st: os.stat_result | None = None
        if self.broken is None:
            try:
                st = os.stat(top)
            except OSError:
                st = None
            self._check_health(top, st)
        if self.broken is not None or st is None:
            hints.mark_everything()
            return False
        with self._cond:
            target = hints.barriers_seen + 1
            trouble = self._trouble_seq
        try:
            # Same atime and mtime: only ctime moves, and the top is not one of its entries.
            os.utime(top, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError as exc:
            self.broken = f"cannot touch {top} for a barrier: {exc.strerror or exc}"
            hints.mark_everything()
            return False
        with self._cond:
            ok = self._cond.wait_for(
                lambda: hints.barriers_seen >= target or self._trouble_seq != trouble,
                timeout=self.barrier_timeout,
            )
        if not ok:
            # A lost barrier means a watchdog thread died or the watch is gone: stop waiting
            # for hints that may never come (one stall per episode at most).
            self.broken = f"barrier on {top} timed out after {self.barrier_timeout:g}s"
            self.trouble(self.broken)
            return False
        return True

    def _check_health(self, top: str, st: os.stat_result | None) -> None:
        observer = self._observer
        if observer is None or not observer.is_alive():
            self.broken = "watchdog observer is not running"
        elif st is None or st.st_ino != self._tops.get(top):
            # The watch follows the old inode: hints for a new directory never come.
            self.broken = f"{top} was removed or replaced; its watch follows the old directory"

    def describe(self) -> dict[str, Any]:
        return {"broken": self.broken, "troubles": list(self.troubles)}
