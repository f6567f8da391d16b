"""Filesystem snapshots and their diff: the pure half of the filesystem oracle.

Theory of operation
-------------------
A :class:`Snapshot` maps each path under a top directory (relative, POSIX style) to an
:class:`Entry`: the ``lstat`` result (never following symlinks) plus what was read from
the entry: the sha256 of a regular file's content, the text of a symlink's target.

Whether an entry changed is decided by its *key* - type and mode, size, mtime_ns,
ctime_ns, inode, device - as git decides with its index. mtime alone is not enough: a
same-size rewrite followed by ``os.utime`` restoring the old mtime keeps size and mtime,
but the kernel still moves ctime (and a delete-and-recreate moves the inode), and ctime
cannot be set from user space. Content is hashed only when the key changed, and for
*racy* entries: those whose mtime or ctime falls within the filesystem's timestamp
granularity of the moment the snapshot was taken, since a later write inside the same
clock tick would leave the key unchanged (git's "racy clean" problem).

Reading is careful: files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with
``fstat`` to be the regular file that was listed, so a FIFO, a device or a symlink swapped
in at the last moment is never opened or followed; an entry that vanishes between
listing and reading is treated as gone; an entry that cannot be read is recorded with its
error and no hash. Content is hashed in fixed-size chunks through one reused buffer.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from collections.abc import Iterator, Mapping

from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox.oracles.fs._stat_helper import StatHelper, shared_helper
from litmus_sandbox.oracles.fs._stat_worker import GONE, Row, open_beneath

__all__ = ["Entry", "Snapshot", "Walker", "path_depth"]

#: Kernel file timestamps come from a coarse clock that ticks every 1-10 ms (HZ=1000..100),
#: so a write within 20 ms of a snapshot may keep an unchanged timestamp.
_FINE_WINDOW_NS = 20_000_000
#: A timestamp with no sub-second part suggests a whole-second filesystem (FAT: 2 s).
COARSE_WINDOW_NS = 2_000_000_000

_KINDS = {
    stat.S_IFREG: "file",
    stat.S_IFDIR: "dir",
    stat.S_IFLNK: "symlink",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "char",
    stat.S_IFBLK: "block",
}
_S_IFMT = 0o170000
_S_IFDIR = stat.S_IFDIR
_S_IFREG = stat.S_IFREG
_S_IFLNK = stat.S_IFLNK
# Entry.flags: a directory (walked into), or a non-directory with several hard links.
_DIR, _MULTI = 1, 2

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO swapped in for a file must not block; fstat then refuses it.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# O_NOATIME keeps our reads from touching atime (only allowed to the owner or root).
_NOATIME = getattr(os, "O_NOATIME", 0)
# open() errors meaning "this is no longer a regular file": a symlink (O_NOFOLLOW), a socket.
_SWAPPED = frozenset({errno.ELOOP, errno.ENXIO, errno.EISDIR})
_REPLACED = "replaced while reading"


class Entry:
    """One path in a snapshot: its ``lstat`` result and what was read from it.

    ``sha256`` is set for regular files that were hashed (None when unreadable, or for
    a tripwire baseline that is not hashed); ``target`` for symlinks; ``error`` says why
    a file could not be read.
    """

    __slots__ = ("ctime_ns", "error", "flags", "mtime_ns", "racy", "sha256", "st", "target")

    def __init__(
        self,
        st: os.stat_result,
        *,
        sha256: str | None = None,
        target: str | None = None,
        error: str | None = None,
        racy: bool = False,
    ) -> None:
        self.st = st
        # Copied out of ``st``: the full walk looks at them for every entry.
        self.mtime_ns = st.st_mtime_ns
        self.ctime_ns = st.st_ctime_ns
        fmt = st.st_mode & _S_IFMT
        self.flags = _DIR if fmt == _S_IFDIR else _MULTI if st.st_nlink > 1 else 0
        self.sha256 = sha256
        self.target = target
        self.error = error
        self.racy = racy

    @property
    def kind(self) -> str:
        """``file``, ``dir``, ``symlink``, ``fifo``, ``socket``, ``char``, ``block``, ``other``."""
        return _KINDS.get(self.st.st_mode & _S_IFMT, "other")

    @property
    def mode(self) -> int:
        """Permission bits (with setuid, setgid and sticky), without the file type."""
        return stat.S_IMODE(self.st.st_mode)

    @property
    def size(self) -> int:
        return self.st.st_size

    @property
    def inode(self) -> int:
        return self.st.st_ino

    @property
    def device(self) -> int:
        return self.st.st_dev

    @property
    def nlink(self) -> int:
        return self.st.st_nlink

    def key(self) -> tuple[int, int, int, int, int, int]:
        """What decides whether the entry changed: type+mode, size, mtime, ctime, inode, device."""
        st = self.st
        return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Entry):
            return NotImplemented
        return (
            self.key() == other.key()
            and self.sha256 == other.sha256
            and self.target == other.target
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-looking value type: not hashable

    def __repr__(self) -> str:
        extra = f" sha256={self.sha256[:12]}" if self.sha256 else ""
        extra += f" -> {self.target!r}" if self.target is not None else ""
        extra += f" error={self.error!r}" if self.error else ""
        return f"<Entry {self.kind} {self.mode:o} size={self.size} ino={self.inode}{extra}>"


def _same_key(a: os.stat_result, b: os.stat_result) -> bool:
    return (
        a.st_mode == b.st_mode
        and a.st_size == b.st_size
        and a.st_mtime_ns == b.st_mtime_ns
        and a.st_ctime_ns == b.st_ctime_ns
        and a.st_ino == b.st_ino
        and a.st_dev == b.st_dev
    )


class Snapshot(Mapping[str, Entry]):
    """The state of a directory tree: relative POSIX path -> :class:`Entry`.

    ``top`` is the absolute, resolved directory the paths are relative to (the top
    itself is not an entry). ``taken_ns`` is the wall-clock time the walk started.
    ``errors`` maps paths that could not be listed or inspected to the reason.

    Entries are held per directory (``dirs``: relative directory, ``""`` for the top ->
    name -> entry): a walk looks names up in small dictionaries, and a directory's
    listing is the keys of its own. A directory appears in ``dirs`` only once listed.
    """

    __slots__ = ("dirs", "errors", "multi", "taken_ns", "top")

    def __init__(self, top: str) -> None:
        self.top = top
        self.dirs: dict[str, dict[str, Entry]] = {}
        #: Non-directory entries with more than one hard link: their content can change
        #: through a path that no event for this tree names.
        self.multi: set[str] = set()
        self.errors: dict[str, str] = {}
        self.taken_ns = 0

    def __getitem__(self, path: str) -> Entry:
        parent, _, name = path.rpartition("/")
        kids = self.dirs.get(parent)
        if kids is None or name not in kids:
            raise KeyError(path)
        return kids[name]

    def get_entry(self, path: str) -> Entry | None:
        """The entry at ``path``, or None."""
        parent, _, name = path.rpartition("/")
        kids = self.dirs.get(parent)
        return None if kids is None else kids.get(name)

    def __iter__(self) -> Iterator[str]:
        for d, kids in self.dirs.items():
            prefix = f"{d}/" if d else ""
            for name in kids:
                yield prefix + name

    def __len__(self) -> int:
        return sum(len(kids) for kids in self.dirs.values())

    def hardlinks(self) -> tuple[tuple[str, ...], ...]:
        """Groups of two or more paths in this snapshot that share one inode."""
        by_inode: dict[tuple[int, int], list[str]] = {}
        for path in self.multi:
            e = self[path]
            by_inode.setdefault((e.device, e.inode), []).append(path)
        return tuple(sorted(tuple(sorted(g)) for g in by_inode.values() if len(g) > 1))


def path_depth(rel: str) -> int:
    """How deep ``rel`` is: 0 for the top, 1 for its entries, and so on."""
    return rel.count("/") + 1 if rel else 0


class Walker:
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

    A walker is used by one thread at a time (it owns the hashing buffer).

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
        if hash_chunk <= 0:
            raise ConfigError("hash_chunk must be a positive number of bytes")
        self.top = os.path.realpath(top)
        self.exclude = exclude
        self.max_depth = max_depth
        self.hash_new = hash_new
        self.hash_chunk = hash_chunk
        self.use_helper = use_helper
        self.helper_min_entries = helper_min_entries
        self._buf: bytearray | None = None  # allocated at the first hash: walks may need none
        self.hashed = 0  # files hashed so far (for benchmarks and tests)

    # ------------------------------------------------------------ reading one entry

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
            if st.st_mode & _S_IFMT != _S_IFREG:
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
        if prev is not None and not prev.racy and _same_key(prev.st, st):
            if prev.st == st:
                return prev
            return Entry(st, sha256=prev.sha256, target=prev.target, error=prev.error)
        fmt = st.st_mode & _S_IFMT
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
                if st.st_mode & _S_IFMT != _S_IFREG:
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

    # ------------------------------------------------------------ walking

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
                    if flags == _DIR:
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
                    if flags == _DIR:
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
        (:mod:`._fs_stat_helper`); the snapshot is the same either way.
        """
        snap = Snapshot(self.top)
        snap.taken_ns = time.time_ns()
        racy_from = snap.taken_ns - _FINE_WINDOW_NS
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

    def racy_from(self) -> int:
        """Entries stamped at or after this instant are racy for a walk starting now."""
        return time.time_ns() - _FINE_WINDOW_NS


_EMPTY: dict[str, Entry] = {}


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
        if e is None or e.flags != _DIR:
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
        if kids is None or (
            errors[path].startswith("unlistable") if e is None else e.flags != _DIR
        ):
            del errors[path]
