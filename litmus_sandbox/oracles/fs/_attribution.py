"""Which call made a filesystem change, by evidence: the attribution of the fs oracle.

Theory of operation
-------------------
The snapshots see every change, whoever made it. Inside the sandbox root, which only the
run writes, a change seen during a call's window is the call's (``window``, as always;
calls that overlapped are told apart by the sandbox's ledger). Outside the root, a change
lands on a call only with evidence that the call made it (``oracles/_evidence.py``): the
call's own audit events (``audit``) or its process tree's report (``process``). A change
outside the root that no evidence ties to the call is ``none`` (the sandbox records it as
unattributed, naming the call in flight ``during``), except for a call part of which ran
where no evidence reaches (a process not watched, an adapter's server): it has nothing but
its window (``window``).

Evidence also finds what no snapshot watches: a path a call touched outside every tree (a
tripwire's depth, a directory no tripwire holds) gets its effect from the state the audit
hook kept before the change and the state now (:meth:`Attributor.synthesize`). A write
through a symlink in the root is recorded at its real target; a rename is recorded as a
move (``moved_to`` on the deleted side, ``moved_from`` on the created one), matched by the
rename's own evidence or by an unchanged inode and content.

:class:`Reach` says which tree (if any) holds a path, so that evidence narrows the next
refresh to the paths it names and is never double counted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

import msgspec

from litmus_sandbox._model.records import Attribution, FsEffect
from litmus_sandbox.oracles._evidence import Evidence, Touch
from litmus_sandbox.oracles.fs._diff import display_path, effects_for
from litmus_sandbox.oracles.fs._entry import Entry, Snapshot, path_depth
from litmus_sandbox.oracles.fs._read import EntryReader

__all__ = ["Attributor", "Reach"]

Change = tuple[Entry | None, Entry | None]

#: Audit and process operations that bring an entry into being, or end it.
_BIRTHS = frozenset({"created", "moved_to", "symlinked", "linked"})
_DEATHS = frozenset({"removed", "moved_from"})
#: Operations that change an entry's attributes (times, mode) but not its content.
_RETIMED = frozenset({"attrib", "retimed"})


class Reach:
    """Which observed tree holds a path (``trees``: top, effect prefix, exclusions, depth;
    the sandbox root first, whose effects are relative), and the paths left out."""

    def __init__(
        self, trees: Sequence[tuple[str, str, frozenset[str], int | None]], ignored: Iterable[str]
    ) -> None:
        self._trees = [
            (top.rstrip("/") + "/", prefix, ex, depth) for top, prefix, ex, depth in trees
        ]
        self.root = trees[0][0] if trees else ""
        self._ignored = tuple(p.rstrip("/") for p in ignored)
        # What ``covered`` asks from the audit hook, at every write a tool makes: one
        # string test for the root watched whole (its usual case), C-level tests for the
        # paths left out.
        top = self._trees[0] if self._trees else None
        self._whole_root = top[0] if top is not None and not top[2] and top[3] is None else None
        self._ignored_set = frozenset(self._ignored)
        self._ignored_under = tuple(p + "/" for p in self._ignored)

    def locate(self, path: str) -> tuple[int, str] | None:
        """(index of the tree, path relative to its top) of the tree that holds ``path``."""
        for i, (top, _, exclude, depth) in enumerate(self._trees):
            if not path.startswith(top):
                continue
            rel = path[len(top) :]
            if depth is not None and path_depth(rel) > depth:
                continue
            if exclude and any(rel == ex or rel.startswith(ex + "/") for ex in exclude):
                continue
            return i, rel
        return None

    def ignored(self, path: str) -> bool:
        return path in self._ignored_set or path.startswith(self._ignored_under)

    def covered(self, path: str) -> bool:
        """Whether a snapshot knows ``path``'s state (or it is one of ours): the audit hook
        need not keep its state before."""
        if self._whole_root is not None and path.startswith(self._whole_root):
            return True
        return self.ignored(path) or self.locate(path) is not None

    def effect_path(self, path: str) -> str:
        """``path`` as effects name it: relative inside the root, absolute elsewhere."""
        root = self.root.rstrip("/") + "/"
        return path[len(root) :] if path.startswith(root) else path

    def hints(self, evidence: Evidence, listed: Callable[[int, str], bool]) -> dict[int, set[str]]:
        """Per tree, the paths ``evidence`` names there, with their ancestors that the
        tree has not listed (``listed(tree, dir)`` says; a directory made during the call
        is then walked): a change whose event was lost, or has not been handed over yet,
        is seen all the same. A named path is looked at itself, so its directory's listing
        is not read again (the events name the same paths as a rule: this costs next to
        nothing)."""
        out: dict[int, set[str]] = {}
        for path in [*evidence.touches, *evidence.trees]:
            found = self.locate(path)
            if found is None:
                continue
            i, rel = found
            paths = out.setdefault(i, set())
            while rel and rel not in paths:
                paths.add(rel)
                rel = rel.rpartition("/")[0]
                if not rel or listed(i, rel):
                    break
        return out


class Attributor:
    """Turns a call's window of changes and its evidence into its attributed effects."""

    def __init__(self, reach: Reach, reader: EntryReader) -> None:
        self.reach = reach
        self._reader = reader

    def follow_links(self, evidence: Evidence, root: Snapshot) -> list[str]:
        """Writes through symlinks: their real targets join the evidence (in the root, the
        snapshot says which written paths are links, and which folders became links
        during the call, which the hook took for folders). Returns the targets added."""
        added: list[str] = []
        prefix = self.reach.root.rstrip("/") + "/"
        for touch in list(evidence.touches.values()):
            inside = touch.path.startswith(prefix)
            if inside and _through_a_link(root, touch.path[len(prefix) :]):
                target = os.path.realpath(touch.path)
                if target != touch.path and evidence.late(target, "written", touch.source):
                    added.append(target)
                continue
            if not touch.follow:
                continue
            if inside:
                entry = root.get_entry(touch.path[len(prefix) :])
                if entry is None or entry.kind != "symlink":
                    continue
            else:
                try:
                    if not os.path.islink(touch.path):
                        continue
                except OSError:
                    continue
            target = os.path.realpath(touch.path)
            if target != touch.path and evidence.late(target, "written", touch.source):
                added.append(target)
        return added

    def attribute(
        self, call_id: str, window: dict[str, Change], evidence: Evidence | None
    ) -> tuple[FsEffect, ...]:
        """The effects of ``window`` (sorted by path) with how each is tied to the call,
        then what the evidence found beyond every tree, with renames paired."""
        triples: list[tuple[FsEffect, Entry | None, Entry | None]] = []
        root = self.reach.root.rstrip("/") + "/"
        links: dict[tuple[int, int], Attribution] | None = None
        retimes = evidence is not None and evidence.retimes
        for path in sorted(window):
            old, new = window[path]
            kind = self._kind(path, evidence)
            if kind == "none" and new is not None and new.nlink > 1:
                # The same file as one the call wrote under another name (a hard link).
                if links is None:
                    links = _linked(window, evidence, root)
                kind = links.get((new.device, new.inode), kind)
            retimed = (
                retimes
                and evidence is not None
                and evidence.retimed(path if path.startswith("/") else root + path)
            )
            triples.extend(
                (_tied(e, kind, call_id), old, new)
                for e in effects_for(path, old, new, retimed=retimed)
            )
        if evidence is not None:
            seen = {e.path for e, _, _ in triples}
            triples.extend(t for t in self.synthesize(evidence) if t[0].path not in seen)
        return tuple(_paired(triples, evidence, self.reach))

    def _kind(self, path: str, evidence: Evidence | None) -> Attribution:
        if not path.startswith("/"):
            return "window"  # the root: only the run writes there
        if evidence is None:
            return "window"
        claimed = evidence.claims(path)
        if claimed is not None:
            return claimed
        return "window" if evidence.blind else "none"

    def synthesize(self, evidence: Evidence) -> list[tuple[FsEffect, Entry | None, Entry | None]]:
        """Effects of the paths ``evidence`` names that no tree holds (outside the root)."""
        out: list[tuple[FsEffect, Entry | None, Entry | None]] = []
        racy_from = self._reader.racy_from()
        root = self.reach.root.rstrip("/") + "/"
        for touch in list(evidence.touches.values()):
            path = touch.path
            if path.startswith(root) or self.reach.covered(path):
                continue  # (the root's snapshot holds all of it, but what is left out)
            try:
                st: os.stat_result | None = os.lstat(path)
            except OSError:
                st = None
            new = self._reader.make(None, path, st, None, racy_from) if st is not None else None
            kind: Attribution = "process" if touch.source == "process" else "audit"
            for e in _from_touch(touch, new):
                old = _before(touch)
                out.append((_tied(e, kind, evidence.call_id), old, new))
        return out


def _through_a_link(snap: Snapshot, rel: str) -> bool:
    """Whether a folder on the way to ``rel`` is a link in ``snap`` (it was made one)."""
    parent = rel.rpartition("/")[0]
    if parent in snap.dirs:
        # Listed: a snapshot lists only folders it reached through folders (one made a
        # link is no longer listed), so no link is on the way. The usual case, at once.
        return False
    while parent:
        entry = snap.get_entry(parent)
        if entry is not None and entry.kind == "symlink":
            return True
        parent = parent.rpartition("/")[0]
    return False


def _linked(
    window: dict[str, Change], evidence: Evidence | None, root: str
) -> dict[tuple[int, int], Attribution]:
    """(device, inode) of the files with several links that the call's evidence names in
    ``window``, and which evidence: a write through one link changes them all."""
    out: dict[tuple[int, int], Attribution] = {}
    if evidence is None:
        return out
    for path, (_, new) in window.items():
        if new is None or new.nlink < 2:
            continue
        claimed = evidence.claims(path if path.startswith("/") else root + path)
        if claimed is not None:
            out[(new.device, new.inode)] = claimed
    return out


def _before(touch: Touch) -> Entry | None:
    return Entry(touch.before, sha256=touch.sha256) if touch.before is not None else None


def _from_touch(touch: Touch, new: Entry | None) -> list[FsEffect]:
    """The effects at ``touch.path`` from its state before (when known) and ``new``."""
    path = touch.path
    if touch.known:
        return effects_for(path, _before(touch), new)
    # What a process did, told after the fact (or a target reached through a link): the
    # state before is unknown; the operations say what it was.
    if new is None:
        if touch.ops & _DEATHS:
            return [FsEffect(op="deleted", path=display_path(path), entry="file")]
        return []
    (made,) = effects_for(path, None, new)
    if touch.ops & _BIRTHS:
        return [made]
    if new.kind == "file" and "written" in touch.ops:
        return [msgspec.structs.replace(made, op="modified")]
    if new.kind != "symlink" and touch.ops & _RETIMED:
        return [msgspec.structs.replace(made, op="metadata")]
    return []


def _tied(effect: FsEffect, kind: Attribution, call_id: str) -> FsEffect:
    if kind == "none":
        return msgspec.structs.replace(effect, attribution=kind, during=call_id)
    return msgspec.structs.replace(effect, attribution=kind)


def _paired(
    triples: list[tuple[FsEffect, Entry | None, Entry | None]],
    evidence: Evidence | None,
    reach: Reach,
) -> list[FsEffect]:
    """The effects, a rename's two sides told of each other (``moved_to``/``moved_from``):
    by the rename's own evidence, or by the same inode and content on both sides."""
    deleted = {e.path: i for i, (e, _, _) in enumerate(triples) if e.op == "deleted"}
    created = {e.path: i for i, (e, _, _) in enumerate(triples) if e.op != "deleted"}
    pairs: list[tuple[int, int]] = []
    if evidence is not None:
        for src_path, dst_path in evidence.moves:
            a = deleted.get(reach.effect_path(src_path))
            b = created.get(reach.effect_path(dst_path))
            if a is not None and b is not None:
                pairs.append((a, b))
    if deleted and created:
        gone: dict[tuple[int, int, str], int] = {}
        for i in deleted.values():
            old = triples[i][1]
            if old is not None and old.kind == "file" and old.sha256 is not None:
                gone[(old.device, old.inode, old.sha256)] = i
        for j in created.values():
            new = triples[j][2]
            if new is not None and new.kind == "file" and new.sha256 is not None:
                k = gone.get((new.device, new.inode, new.sha256))
                if k is not None:
                    pairs.append((k, j))
    out = [e for e, _, _ in triples]
    for i, j in pairs:
        src, dst = out[i], out[j]
        out[i] = msgspec.structs.replace(src, moved_to=dst.path)
        out[j] = msgspec.structs.replace(dst, moved_from=src.path)
    return out
