"""One observed directory tree, kept current by full walks or narrowed rescans.

A :class:`Tree` owns a live :class:`Snapshot` and refreshes it in place. A *full* refresh
walks everything (reusing hashes of unchanged keys). A *narrowed* refresh is given dirty
hints - paths whose entry may have changed, and directories whose listing may have
changed - and touches only those:

* a dirty directory is listed (one ``getdents``; names and inode numbers come free with
  it) and compared with the names the snapshot holds: new names, missing names, and names
  now bound to another inode become dirty paths;
* a dirty path is ``lstat``-ed again; a new directory is walked with its subtree, a
  vanished or replaced one has its subtree dropped;
* files with more than one hard link are always re-``lstat``-ed, since a write through
  another link (maybe outside the tree) names no path here.

Every refresh returns the changes it saw as ``{path: (old entry, new entry)}``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from litmus_sandbox._model.records import FsEffect
from litmus_sandbox.oracles.fs._diff import changes, effects_for
from litmus_sandbox.oracles.fs._entry import COARSE_WINDOW_NS, Entry, Snapshot, path_depth
from litmus_sandbox.oracles.fs._snapshot import Walker

__all__ = ["Change", "Tree", "merge_change", "window_effects"]

Change = tuple[Entry | None, Entry | None]


def merge_change(found: dict[str, Change], path: str, old: Entry | None, new: Entry | None) -> None:
    """Record ``old -> new`` at ``path``, keeping the earliest ``old`` already recorded."""
    seen = found.get(path)
    found[path] = (old if seen is None else seen[0], new)


class Tree:
    """A walker, its live snapshot, and the spelling of its effect paths.

    ``prefix`` is prepended to relative paths in effects: ``""`` for the sandbox root,
    the tripwire directory plus ``"/"`` for tripwires (so their paths are absolute).
    """

    def __init__(self, walker: Walker, *, prefix: str = "") -> None:
        self.walker = walker
        self.prefix = prefix
        self.snap = Snapshot(walker.top)
        self._top_key: tuple[int, int, int] | None = None
        self._top_racy = True

    def top_moved(self) -> bool:
        """Whether the top's own listing may have changed since this was last asked.

        An entry created, deleted or renamed in a directory moves the directory's mtime and
        ctime; a stamp within the clock's granularity of now is not trusted (a change in the
        same tick would leave it as it is), so it counts as moved the next time too.
        """
        try:
            st = os.lstat(self.top)
        except OSError:
            return True
        key = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        moved = key != self._top_key or self._top_racy
        self._top_key = key
        stamp = max(st.st_mtime_ns, st.st_ctime_ns)
        # A whole-second stamp suggests a coarse filesystem: its window is wider.
        coarse = COARSE_WINDOW_NS if st.st_mtime_ns % 1_000_000_000 == 0 else 0
        self._top_racy = stamp >= self.walker.racy_from() - coarse
        return moved

    @property
    def top(self) -> str:
        return self.walker.top

    def baseline(self) -> None:
        """Take the first snapshot (no changes reported)."""
        self.snap = self.walker.snapshot()

    def full(self) -> dict[str, Change]:
        """Walk everything; the changes since the live snapshot."""
        old = self.snap
        self.snap = self.walker.snapshot(old)
        return changes(old, self.snap)

    def refresh(self, paths: Iterable[str], dirs: Iterable[str]) -> dict[str, Change]:
        """Rescan only the dirty ``paths`` and ``dirs`` (relative); the changes seen."""
        snap, walker = self.snap, self.walker
        racy_from = walker.racy_from()
        found: dict[str, Change] = {}
        todo = set(paths)
        todo.update(snap.multi)
        exclude = walker.exclude
        for d in sorted(dirs, key=path_depth):
            kids = snap.dirs.get(d)
            if kids is None:
                if d:
                    todo.add(d)  # not listed (new, or beyond reach): look at the entry itself
                continue
            try:
                with os.scandir(f"{self.top}/{d}" if d else self.top) as it:
                    now = {de.name: de.inode() for de in it}
            except (FileNotFoundError, NotADirectoryError):
                if d:
                    todo.add(d)
                    continue
                now = {}  # the top itself is gone: everything under it is deleted
            except OSError as exc:
                snap.errors[d] = f"unlistable: {exc.strerror or exc}"
                continue
            prefix = f"{d}/" if d else ""
            todo.update(prefix + name for name in kids if name not in now)
            for name, ino in now.items():
                e = kids.get(name)
                if (e is None or e.inode != ino) and prefix + name not in exclude:
                    todo.add(prefix + name)
        for path in sorted(todo, key=path_depth):  # parents before children
            self._update(path, found, racy_from)
        return found

    def _update(self, path: str, found: dict[str, Change], racy_from: int) -> None:
        snap, walker = self.snap, self.walker
        if path in walker.exclude:
            return
        depth = path_depth(path)
        if walker.max_depth is not None and depth > walker.max_depth:
            return
        parent, _, name = path.rpartition("/")
        kids = snap.dirs.get(parent)
        if kids is None:
            return  # its parent is gone or unlisted: handled with the parent
        full = f"{self.top}/{path}"
        old = kids.get(name)
        try:
            st: os.stat_result | None = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as exc:
            snap.errors[path] = f"unstattable: {exc.strerror or exc}"
            return
        new = walker.make(None, full, st, old, racy_from) if st is not None else None
        if new is old:
            return
        if (
            old is not None
            and old.kind == "dir"
            and (new is None or new.kind != "dir" or new.inode != old.inode)
        ):
            self._drop_children(path, found)
        if new is None:
            if old is not None:
                del kids[name]
                snap.multi.discard(path)
                merge_change(found, path, old, None)
            return
        kids[name] = new
        if new.kind != "dir" and new.nlink > 1:
            if path not in snap.multi:
                snap.multi.add(path)
                self._join_links(path, new, found, racy_from)
        else:
            snap.multi.discard(path)
        merge_change(found, path, old, new)
        reach = walker.max_depth is None or depth < walker.max_depth
        if new.kind == "dir" and path not in snap.dirs and reach:
            for d in walker.walk_into(snap, path, None, racy_from):
                prefix = f"{d}/"
                for n, e in snap.dirs[d].items():
                    merge_change(found, prefix + n, None, e)

    def _join_links(
        self, path: str, entry: Entry, found: dict[str, Change], racy_from: int
    ) -> None:
        """A new hard link to ``entry``: its other paths in the tree are watched as links
        from now on (a write through one changes all, with no event naming the others)."""
        inode, device = entry.inode, entry.device
        others = [
            f"{d}/{n}" if d else n
            for d, kids in self.snap.dirs.items()
            for n, e in kids.items()
            if e.inode == inode and e.device == device and e.kind != "dir"
        ]
        for other in others:
            if other != path and other not in self.snap.multi:
                self.snap.multi.add(other)
                self._update(other, found, racy_from)  # its link count moved too

    def _drop_children(self, path: str, found: dict[str, Change]) -> None:
        snap = self.snap
        stack = [path]
        while stack:
            d = stack.pop()
            kids = snap.dirs.pop(d, None)
            if not kids:
                continue
            for n, e in kids.items():
                child = f"{d}/{n}"
                snap.multi.discard(child)
                merge_change(found, child, e, None)
                stack.append(child)

    def effects(self, found: dict[str, Change]) -> list[tuple[str, Change]]:
        """``found`` keyed by effect path (with this tree's prefix)."""
        prefix = self.prefix
        return [(prefix + p, c) for p, c in found.items()]


def window_effects(window: dict[str, Change]) -> tuple[FsEffect, ...]:
    """The effects recorded in a window of changes, sorted by path."""
    out: list[FsEffect] = []
    for path in sorted(window):
        old, new = window[path]
        out.extend(effects_for(path, old, new))
    return tuple(out)
