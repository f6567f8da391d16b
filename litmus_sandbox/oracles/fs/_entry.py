"""Filesystem snapshots as data: what an entry is, and when it changed.

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

Entries are read by :mod:`._read` and snapshots taken by :mod:`._snapshot`; this module
does no I/O.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping

__all__ = [
    "COARSE_WINDOW_NS",
    "DIR",
    "FINE_WINDOW_NS",
    "MULTI",
    "S_IFMT",
    "Entry",
    "Snapshot",
    "path_depth",
    "same_key",
]

#: Kernel file timestamps come from a coarse clock that ticks every 1-10 ms (HZ=1000..100),
#: so a write within 20 ms of a snapshot may keep an unchanged timestamp.
FINE_WINDOW_NS = 20_000_000
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
S_IFMT = 0o170000
_S_IFDIR = stat.S_IFDIR
#: Entry.flags: a directory (walked into), or a non-directory with several hard links.
DIR, MULTI = 1, 2


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
        fmt = st.st_mode & S_IFMT
        self.flags = DIR if fmt == _S_IFDIR else MULTI if st.st_nlink > 1 else 0
        self.sha256 = sha256
        self.target = target
        self.error = error
        self.racy = racy

    @property
    def kind(self) -> str:
        """``file``, ``dir``, ``symlink``, ``fifo``, ``socket``, ``char``, ``block``, ``other``."""
        return _KINDS.get(self.st.st_mode & S_IFMT, "other")

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


def same_key(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two ``lstat`` results have the same key (see :meth:`Entry.key`)."""
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
