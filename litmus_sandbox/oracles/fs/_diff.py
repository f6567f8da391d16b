"""From two states of a path to effects: the diff of the filesystem oracle. Pure.

:func:`effects_for` decides what one path's change means (``created``, ``deleted``,
``modified``, ``metadata``, ``symlink``); :func:`changes` finds the paths that changed
between two snapshots of one tree, by identity first, since walks reuse the
:class:`Entry` objects of unchanged entries.
"""

from __future__ import annotations

import msgspec

from litmus_sandbox._model.records import FsEffect, FsOp
from litmus_sandbox.oracles.fs._entry import Entry, Snapshot

__all__ = ["changes", "diff", "display_path", "effects_for"]

_EMPTY: dict[str, Entry] = {}


def display_path(path: str) -> str:
    """``path`` made safe for JSON: undecodable bytes become ``\\xNN`` escapes."""
    try:
        path.encode()
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path


def _created(path: str, e: Entry) -> FsEffect:
    kind = e.kind
    return FsEffect(
        op="symlink" if kind == "symlink" else "created",
        path=display_path(path),
        entry=kind,
        after_sha256=e.sha256,
        after_size=e.size if kind == "file" else None,
        after_mode=e.mode,
        target=display_path(e.target) if e.target is not None else None,
        error=e.error,
    )


def _deleted(path: str, e: Entry) -> FsEffect:
    kind = e.kind
    return FsEffect(
        op="deleted",
        path=display_path(path),
        entry=kind,
        before_sha256=e.sha256,
        before_size=e.size if kind == "file" else None,
        before_mode=e.mode,
        target=display_path(e.target) if e.target is not None else None,
    )


def _content_changed(old: Entry, new: Entry) -> bool:
    if old.sha256 is not None and new.sha256 is not None:
        return old.sha256 != new.sha256
    # No hash on one side (unreadable, or an unhashed tripwire baseline): the key decides.
    a, b = old.st, new.st
    if (a.st_size, a.st_mtime_ns, a.st_ino, a.st_dev) != (
        b.st_size,
        b.st_mtime_ns,
        b.st_ino,
        b.st_dev,
    ):
        return True
    # A ctime move alone is a content change unless a mode change explains it.
    return a.st_ctime_ns != b.st_ctime_ns and old.mode == new.mode


def effects_for(
    path: str, old: Entry | None, new: Entry | None, *, retimed: bool = False
) -> list[FsEffect]:
    """The effects that turn ``old`` into ``new`` at ``path`` (either may be None).

    One effect per path, except a change of entry type, which is ``deleted`` then
    ``created`` (or ``symlink``). A file whose times were set (``retimed``: evidence saw
    ``utime`` and no write) with its content kept is ``metadata``, with both modification
    times; otherwise owners, link counts and times alone are not effects; a file deleted
    and recreated is ``modified`` when its content or mode differs, and nothing when both
    are the same.
    """
    if old is None:
        return [] if new is None else [_created(path, new)]
    if new is None:
        return [_deleted(path, old)]
    kind = new.kind
    if old.kind != kind:
        return [_deleted(path, old), _created(path, new)]
    if kind == "symlink":
        if old.target == new.target:
            return []
        return [
            FsEffect(
                op="symlink",
                path=display_path(path),
                entry=kind,
                before_mode=old.mode,
                after_mode=new.mode,
                target=display_path(new.target) if new.target is not None else None,
            )
        ]
    is_file = kind == "file"
    op: FsOp
    # A file's times set (utime) with its content kept is a metadata change - when evidence
    # says so (``retimed``): a write of the same bytes moves mtime too, and a directory's
    # mtime moves with its listing, which its entries' effects tell.
    retimed = retimed and is_file and old.mtime_ns != new.mtime_ns
    # Content unknown on one side (an unhashed tripwire baseline): the key decides, unless
    # evidence says only the times were set.
    unknown = old.sha256 is None or new.sha256 is None
    if is_file and _content_changed(old, new) and not (retimed and unknown):
        op = "modified"
    elif old.mode != new.mode or retimed:
        op = "metadata"
    else:
        return []
    effect = FsEffect(
        op=op,
        path=display_path(path),
        entry=kind,
        before_sha256=old.sha256,
        after_sha256=new.sha256,
        before_size=old.size if is_file else None,
        after_size=new.size if is_file else None,
        before_mode=old.mode,
        after_mode=new.mode,
        error=new.error,
    )
    if op == "metadata" and retimed:
        effect = msgspec.structs.replace(
            effect, before_mtime_ns=old.mtime_ns, after_mtime_ns=new.mtime_ns
        )
    return [effect]


def changes(before: Snapshot, after: Snapshot) -> dict[str, tuple[Entry | None, Entry | None]]:
    """``{path: (old, new)}`` for every path whose entry is not the very same object."""
    out: dict[str, tuple[Entry | None, Entry | None]] = {}
    old_dirs = before.dirs
    for d, kids in after.dirs.items():
        prefix = f"{d}/" if d else ""
        old_kids = old_dirs.get(d, _EMPTY)
        for name, e in kids.items():
            o = old_kids.get(name)
            if o is not e:  # walks share unchanged Entry objects: identity first
                out[prefix + name] = (o, e)
    new_dirs = after.dirs
    for d, old_kids in old_dirs.items():
        prefix = f"{d}/" if d else ""
        kids = new_dirs.get(d, _EMPTY)
        for name, o in old_kids.items():
            if name not in kids:
                out[prefix + name] = (o, None)
    return out


def diff(before: Snapshot, after: Snapshot, *, prefix: str = "") -> tuple[FsEffect, ...]:
    """The effects between two snapshots of one tree, sorted by path.

    ``prefix`` is prepended to every path (tripwire trees use their absolute top + "/").
    """
    found = changes(before, after)
    out: list[FsEffect] = []
    for path in sorted(found):
        out.extend(effects_for(prefix + path, *found[path]))
    return tuple(out)
