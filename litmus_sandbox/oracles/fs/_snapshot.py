"""Snapshots of a directory tree: full walks, shared with the stat helper when large.

Theory of operation
-------------------
A :class:`Walker` lists one directory at a time through a descriptor opened with
``O_NOFOLLOW`` and ``lstat``-s its names relative to it, making each entry with
:meth:`~._read.EntryReader.make`. The hot path of a walk over a settled tree is one
``lstat`` per name compared with the previous snapshot's entry, which is then reused as
it is (no hash, no allocation); only what moved is read again.

A full walk of a large tree (the previous snapshot holds at least ``helper_min_entries``
entries) is split with the stat helper process (:mod:`._stat_helper`): it lists every
other directory the previous snapshot knew while this process lists the rest, and its
rows are merged as this process's own listings would be. Directories that appeared since
are then walked here, and listings no longer reachable from the top (a directory
replaced meanwhile) are dropped, so the snapshot is the same either way. A helper that
breaks or hangs costs its share of the work, never the walk.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from litmus_sandbox.oracles.fs._entry import DIR, FINE_WINDOW_NS, Entry, Snapshot, path_depth
from litmus_sandbox.oracles.fs._read import EntryReader
from litmus_sandbox.oracles.fs._stat_helper import StatHelper, shared_helper
from litmus_sandbox.oracles.fs._stat_worker import GONE, Row, open_beneath

__all__ = ["Walker"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_EMPTY: dict[str, Entry] = {}


class Walker(EntryReader):
    """Builds and refreshes snapshots of one directory tree.

    Args:
        top: the directory to snapshot (resolved to an absolute real path).
        exclude: relative paths to leave out, with everything under them.
        max_depth: deepest level recorded (1 = direct entries only); None = all.
        hash_new: hash files that have no previous entry. False for a tripwire baseline
            (a home directory may hold gigabytes); set it back to True once the baseline
            is taken, so that files created or changed later are hashed.
        hash_chunk: read size for hashing, in bytes.
        use_helper: let full walks of large trees share the work with the stat helper
            process (see :meth:`snapshot`).
        helper_min_entries: the smallest tree (entries in the previous snapshot) for
            which a full walk uses the helper.

    A walker is an :class:`~._read.EntryReader` (``make``, ``hashed``, ``racy_from``) used
    by one thread at a time (it owns the hashing buffer).

    Raises:
        ConfigError: ``hash_chunk`` is not positive.
    """

    def __init__(
        self,
        top: str | os.PathLike[str],
        *,
        exclude: frozenset[str] = frozenset(),
        max_depth: int | None = None,
        hash_new: bool = True,
        hash_chunk: int = 1 << 20,
        use_helper: bool = True,
        helper_min_entries: int = 4096,
    ) -> None:
        super().__init__(hash_new=hash_new, hash_chunk=hash_chunk)
        self.top = os.path.realpath(top)
        self.exclude = exclude
        self.max_depth = max_depth
        self.use_helper = use_helper
        self.helper_min_entries = helper_min_entries

    def walk_into(
        self, snap: Snapshot, start: str, previous: Snapshot | None, racy_from: int
    ) -> list[str]:
        """Walk the directory ``start`` (relative, "" = top) and below into ``snap``.

        Entries are reused from ``previous`` where their key did not change. Returns the
        directories listed (their entries are in ``snap.dirs``).
        """
        old_dirs = previous.dirs if previous is not None else {}
        listed: list[str] = []
        stack = [(start, path_depth(start))]
        while stack:
            rel, depth = stack.pop()
            if self._list_dir(snap, rel, depth, old_dirs, racy_from, stack):
                listed.append(rel)
        return listed

    def _list_dir(
        self,
        snap: Snapshot,
        rel: str,
        depth: int,
        old_dirs: Mapping[str, dict[str, Entry]],
        racy_from: int,
        below: list[tuple[str, int]],
        *,
        beneath: bool = False,
    ) -> bool:
        """List the one directory ``rel`` into ``snap.dirs``; True if it could be listed.

        Its subdirectories to walk (within ``max_depth``) are appended to ``below``.
        ``beneath``: ``rel`` is known only from an earlier snapshot, so it is opened one
        component at a time, never through a symlink (a path that no longer leads to a
        directory that way is gone from this tree).
        """
        errors, multi, exclude = snap.errors, snap.multi, self.exclude
        try:
            if beneath:
                fd = open_beneath(self.top, rel)
            else:
                fd = os.open(f"{self.top}/{rel}" if rel else self.top, _DIR_FLAGS)
        except OSError as exc:
            gone = exc.errno in GONE if beneath else isinstance(exc, FileNotFoundError)
            if not gone:
                errors.setdefault(rel, f"unlistable: {exc.strerror or exc}")
            return False
        try:
            names = os.listdir(fd)
        except OSError as exc:
            errors.setdefault(rel, f"unlistable: {exc.strerror or exc}")
            os.close(fd)
            return False
        prefix = f"{rel}/" if rel else ""
        descend = self.max_depth is None or depth + 1 < self.max_depth
        get = old_dirs.get(rel, _EMPTY).get
        lstat, make = os.lstat, self.make
        kids: dict[str, Entry] = {}
        try:
            for name in names:
                if exclude and prefix + name in exclude:
                    continue
                try:
                    st = lstat(name, dir_fd=fd)
                except OSError as exc:
                    if not isinstance(exc, FileNotFoundError):
                        errors[prefix + name] = f"unstattable: {exc.strerror or exc}"
                    continue
                old = get(name)
                # The hot path of a walk over a settled tree: ctime first (it moves with
                # any change), then the tuple part of stat_result in C, then mtime.
                if (
                    old is not None
                    and old.ctime_ns == st.st_ctime_ns
                    and old.st == st
                    and old.mtime_ns == st.st_mtime_ns
                    and not old.racy
                ):
                    e = old
                else:
                    made = make(fd, name, st, old, racy_from)
                    if made is None:
                        continue
                    e = made
                kids[name] = e
                if flags := e.flags:
                    if flags == DIR:
                        if descend:
                            below.append((prefix + name, depth + 1))
                    else:
                        multi.add(prefix + name)
        finally:
            os.close(fd)
        snap.dirs[rel] = kids
        return True

    def _merge_listing(
        self,
        snap: Snapshot,
        rel: str,
        rows: list[Row] | str | None,
        old_dirs: Mapping[str, dict[str, Entry]],
        racy_from: int,
        below: list[tuple[str, int]],
    ) -> None:
        """Put the helper's listing of ``rel`` into ``snap.dirs``, as :meth:`_list_dir` would.

        Rows whose stat matches the previous entry reuse it; any other row is ``lstat``-ed
        again here and made into an entry (hashed when needed) like in a walk.
        """
        if rows is None:  # gone
            return
        errors = snap.errors
        if isinstance(rows, str):
            errors.setdefault(rel, rows)
            return
        multi, exclude = snap.multi, self.exclude
        prefix = f"{rel}/" if rel else ""
        get = old_dirs.get(rel, _EMPTY).get
        kids: dict[str, Entry] = {}
        fd = -1
        child_depth = path_depth(rel) + 1
        try:
            for name, st_tuple, mtime_ns, ctime_ns in rows:
                if exclude and prefix + name in exclude:
                    continue
                old = get(name)
                if (
                    old is not None
                    and old.ctime_ns == ctime_ns
                    and old.st == st_tuple
                    and old.mtime_ns == mtime_ns
                    and not old.racy
                ):
                    e = old
                else:
                    if fd < 0:
                        try:
                            fd = open_beneath(self.top, rel)
                        except OSError as exc:
                            if exc.errno not in GONE:
                                errors.setdefault(rel, f"unlistable: {exc.strerror or exc}")
                            return
                    try:
                        st = os.lstat(name, dir_fd=fd)
                    except OSError as exc:
                        if not isinstance(exc, FileNotFoundError):
                            errors[prefix + name] = f"unstattable: {exc.strerror or exc}"
                        continue
                    made = self.make(fd, name, st, old, racy_from)
                    if made is None:
                        continue
                    e = made
                kids[name] = e
                if flags := e.flags:
                    if flags == DIR:
                        below.append((prefix + name, child_depth))
                    else:
                        multi.add(prefix + name)
        finally:
            if fd >= 0:
                os.close(fd)
        snap.dirs[rel] = kids

    def snapshot(self, previous: Snapshot | None = None) -> Snapshot:
        """A full walk; hashes are reused from ``previous`` where keys did not change.

        A large tree (``previous`` holding at least ``helper_min_entries`` entries) is
        walked together with the stat helper process when there is one
        (:mod:`._stat_helper`); the snapshot is the same either way.
        """
        snap = Snapshot(self.top)
        snap.taken_ns = time.time_ns()
        racy_from = snap.taken_ns - FINE_WINDOW_NS
        helper = self._helper_for(previous)
        if helper is None or previous is None:
            self.walk_into(snap, "", previous, racy_from)
            return snap
        try:
            self._split_walk(snap, previous, racy_from, helper)
        finally:
            helper.release()
        return snap

    def _helper_for(self, previous: Snapshot | None) -> StatHelper | None:
        if (
            not self.use_helper
            or previous is None
            or self.max_depth is not None
            or len(previous.dirs) < 2
            or len(previous) < self.helper_min_entries
        ):
            return None
        helper = shared_helper()
        if helper is None or not helper.try_acquire():
            return None
        return helper

    def _split_walk(
        self, snap: Snapshot, previous: Snapshot, racy_from: int, helper: StatHelper
    ) -> None:
        """A full walk sharing the directories ``previous`` listed with the helper.

        The helper lists every other known directory while this process lists the rest;
        directories that appeared since are then walked here, and listings that are no
        longer reachable from the top (a directory replaced meanwhile) are dropped.
        """
        old_dirs = previous.dirs
        known = list(old_dirs)
        theirs = known[1::2]
        sent = helper.send(self.top, theirs)
        below: list[tuple[str, int]] = []
        try:
            for rel in known[::2] if sent else known:
                self._list_dir(snap, rel, path_depth(rel), old_dirs, racy_from, below, beneath=True)
            listings = helper.receive() if sent else None
        except BaseException:
            if sent:
                helper.stop()  # its answer is never read: it must not answer the next walk
            raise
        if sent and listings is None:  # the helper broke: do its share here
            for rel in theirs:
                self._list_dir(snap, rel, path_depth(rel), old_dirs, racy_from, below, beneath=True)
        elif listings is not None:
            for rel, rows in listings:
                self._merge_listing(snap, rel, rows, old_dirs, racy_from, below)
        stack = [(rel, depth) for rel, depth in below if rel not in old_dirs]
        while stack:
            rel, depth = stack.pop()
            if rel not in snap.dirs:
                self._list_dir(snap, rel, depth, old_dirs, racy_from, stack)
        _prune_unreachable(snap)


def _prune_unreachable(snap: Snapshot) -> None:
    """Drop what a walk from the top would not have reached.

    A directory known from an earlier snapshot is listed by its path; if it or an
    ancestor was replaced meanwhile (by a file, or a symlink to elsewhere), that listing
    is not part of this tree, nor is anything recorded under it, nor an error met while
    listing it.
    """
    dirs = snap.dirs
    gone: list[str] = []
    for rel in sorted(dirs, key=path_depth):
        if not rel:
            continue
        parent, _, name = rel.rpartition("/")
        kids = dirs.get(parent)
        e = None if kids is None else kids.get(name)
        if e is None or e.flags != DIR:
            del dirs[rel]
            gone.append(rel)
    if gone:
        under = tuple(f"{rel}/" for rel in gone)
        snap.multi = {p for p in snap.multi if not p.startswith(under)}
    errors = snap.errors
    for path in [p for p in errors if p]:
        parent, _, name = path.rpartition("/")
        kids = dirs.get(parent)
        e = None if kids is None else kids.get(name)
        # Kept: a directory its parent lists that could not be listed itself, or an
        # entry named in its parent's directory that could not be stat-ed.
        if kids is None or (errors[path].startswith("unlistable") if e is None else e.flags != DIR):
            del errors[path]
