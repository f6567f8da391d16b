"""The filesystem oracle: what tools did to the disk, whatever they told the agent.

Theory of operation
-------------------
:class:`FsProbe` keeps a live :class:`Snapshot` of the sandbox root (see ``_entry.py``
for the entry key and racy entries, ``_read.py`` for hashing) and refreshes it at every
call boundary. Changes seen by a refresh belong to every call in flight at that moment
(a *window* per call, opened by ``before_call`` and closed by ``after_call``); changes seen
while no call is in flight belong to nobody and are returned by ``finish()``, with
whatever the end-of-episode verification pass finds: a full walk of everything, which
does not trust watchdog at all.

Between boundaries, a watchdog observer on the root marks dirty paths and directories, so
that a boundary rescans only those (``_tree.py``); a barrier makes sure the events of
a finished call have been handled first, and any sign that events were lost (inotify
queue overflow, an error, a barrier timing out) turns the next refresh into a full walk
(``_watch.py``). With ``use_watchdog=False`` every boundary is a full walk: slower, and
the same effects.

Effects are :class:`FsEffect` records, one per path (two for a change of entry type):

* ``created`` / ``deleted`` / ``modified`` (content: sha256 differs) / ``metadata`` (only
  the permission bits changed) / ``symlink`` (a symlink created or retargeted; ``target``
  is its text, never followed). ``entry`` is ``file``, ``dir``, ``symlink``, ``fifo``,
  ``socket``, ``char``, ``block`` or ``other``; modes are permission bits.
* A file deleted and recreated between two boundaries is ``modified`` when its content or
  mode differs (with both hashes), and no effect when they are the same. Timestamps,
  owners and link counts alone are not effects; a directory's listing changing is told by
  its entries' effects, not by the directory.

Tripwires
---------
Directories outside the root (by default the user's home, ``/dev/shm``, ``/var/tmp`` and
the system temp directory; ``_tripwires.py`` says how deep each is watched, within a
budget the header reports) are observed the same way; the root, everything under it and
the ``ignore`` paths are left out. **A tripwire effect has an absolute path** (it starts
with ``/``), while root effects have relative POSIX paths (:func:`is_tripwire_effect`).
An effect outside the root lands on a call only with evidence that the call made it
(``_attribution.py``): its audit events, or its process tree; the same evidence finds
what the call did where no tripwire reaches. At every boundary a tripwire's top is also
re-checked synchronously (its listing, and the keys of the files directly in it, when it
has at most 1,024 entries), and the paths a call's evidence names are looked at, so
those effects land in the right call; other changes arrive through watchdog and may land
one boundary late. Tripwires see every process, not only the tools: keep the episode
stream and the harness's own files out of them (``ignore``). Their baseline is not hashed
(a home directory may hold gigabytes), so a tripwire ``modified`` effect has no
``before_sha256``.

Known limits: calls that overlap share the changes seen while both ran (the sandbox
records those as unattributed); the root directory's ctime moves at every barrier; a
rename out of the root holds watchdog's queue for 0.5 s (it waits for a matching
rename-in); a FIFO swapped in for a file between ``lstat`` and ``open`` is opened
non-blocking (never read); a handler is added to watchdog's loggers to see its warnings
(with logging unconfigured, they are then no longer printed to stderr), and when those
warnings are silenced the probe walks everything at every boundary instead; names that
are not valid UTF-8 are reported with ``\\xNN`` escapes; POSIX only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Effects, FsEffect
from litmus_sandbox.oracles import _audit as audit
from litmus_sandbox.oracles.fs._attribution import Attributor, Reach
from litmus_sandbox.oracles.fs._diff import diff as _diff
from litmus_sandbox.oracles.fs._entry import Entry, Snapshot
from litmus_sandbox.oracles.fs._inotify import InotifyTops
from litmus_sandbox.oracles.fs._read import EntryReader
from litmus_sandbox.oracles.fs._snapshot import Walker
from litmus_sandbox.oracles.fs._tree import Change, Tree, merge_change, window_effects
from litmus_sandbox.oracles.fs._tripwires import (
    DEFAULT_TRIPWIRE_MAX_ENTRIES,
    PathLike,
    Plan,
    default_tripwires,
    plan_tripwires,
)
from litmus_sandbox.oracles.fs._watch import Hints, Watch, watchdog_logs_visible

__all__ = [
    "DEFAULT_TRIPWIRE_MAX_ENTRIES",
    "Entry",
    "FsProbe",
    "Snapshot",
    "default_tripwires",
    "diff",
    "is_tripwire_effect",
    "snapshot",
]

#: A tripwire's top is re-checked at every boundary when it has at most this many entries.
_SYNC_TOP_MAX = 1024


def snapshot(
    root: PathLike, *, previous: Snapshot | None = None, hash_chunk: int = 1 << 20
) -> Snapshot:
    """Walk ``root`` and return its :class:`Snapshot` (every regular file hashed).

    With ``previous`` (an earlier snapshot of the same root), hashes are reused for
    entries whose key did not change and that were not racy.

    Raises:
        ConfigError: ``root`` is not a directory, or ``hash_chunk`` is not positive.
    """
    if hash_chunk <= 0:
        raise ConfigError("hash_chunk must be a positive number of bytes")
    if not os.path.isdir(root):
        raise ConfigError(f"cannot snapshot {os.fspath(root)!r}: not a directory")
    return Walker(root, hash_chunk=hash_chunk).snapshot(previous)


def diff(before: Snapshot, after: Snapshot) -> tuple[FsEffect, ...]:
    """The effects that turn ``before`` into ``after`` (two snapshots of one root), by path."""
    return _diff(before, after)


def is_tripwire_effect(effect: FsEffect) -> bool:
    """True for an effect outside the sandbox root (seen by a tripwire: absolute path)."""
    return effect.path.startswith("/")


class FsProbe:
    """Filesystem side effects of each call under ``root``, and escapes through tripwires.

    Implements the sandbox's ``Probe`` protocol (``name = "fs"``).

    Args:
        root: the sandbox root; it must exist when the episode starts.
        tripwires: directories outside the root to watch; None means the user's home and
            the system temp directory; ``()`` means none.
        use_watchdog: narrow each boundary's rescan with watchdog's hints (False: walk
            everything at every boundary; same effects, slower).
        hash_chunk: bytes read at a time when hashing (huge files stream through it).
        limiter: bounds the worker threads used for blocking filesystem work.
        ignore: paths outside the root whose changes are not tripwire effects (the
            episode stream, logs the harness itself writes).
        tripwire_max_entries: the budget of entries watched recursively in all tripwires
            together (``_tripwires.py``).
    """

    name = "fs"
    #: A change seen while two calls overlap could be either's: the sandbox records it as
    #: unattributed rather than guess.
    exact_attribution = False

    def __init__(
        self,
        root: PathLike,
        *,
        tripwires: Sequence[PathLike] | None = None,
        use_watchdog: bool = True,
        hash_chunk: int = 1 << 20,
        limiter: anyio.CapacityLimiter | None = None,
        ignore: Sequence[PathLike] = (),
        tripwire_max_entries: int = DEFAULT_TRIPWIRE_MAX_ENTRIES,
    ) -> None:
        if hash_chunk <= 0:
            raise ConfigError("hash_chunk must be a positive number of bytes")
        self.root = Path(root)
        self._tripwires = list(tripwires) if tripwires is not None else None
        self._ignore = list(ignore)
        self.use_watchdog = use_watchdog
        self.hash_chunk = hash_chunk
        self._limiter = limiter
        self._tripwire_max = tripwire_max_entries
        self._lock: anyio.Lock | None = None
        self._trees: list[tuple[Tree, Hints | None]] = []
        self._plans: list[Plan] = []
        #: Indices in ``_trees`` of the directories beside the root that are many: watched
        #: by ``_beside`` (one inotify descriptor), else compared only when finishing.
        self._at_end: set[int] = set()
        self._beside: InotifyTops | None = None
        self._beside_dirty = False
        self._watch: Watch | None = None
        self._degraded: str | None = None
        self._windows: dict[str, dict[str, Change]] = {}
        self._between: list[FsEffect] = []
        #: The evidence each call in flight collects (``_audit``), and its context token.
        self._evidence: dict[str, tuple[audit.Evidence, Any]] = {}
        self._attributor = Attributor(Reach([], ()), EntryReader())
        self._stats = {"full_scans": 0, "narrow_scans": 0, "barrier_failures": 0}

    # ------------------------------------------------------------ introspection

    def describe(self) -> dict[str, Any]:
        """What this probe watches and how (recorded in the episode header)."""
        tripwires = self._tripwires if self._tripwires is not None else default_tripwires()
        out: dict[str, Any] = {
            "kind": "fs",
            "root": str(self.root),
            "hash": "sha256",
            "watchdog": self.use_watchdog,
            "tripwires": [os.fspath(t) for t in tripwires],
            "tripwire_paths": "absolute",
            # Inside the root, a call's window; outside, evidence (see _attribution.py).
            "attribution": {"root": "window", "outside_root": "evidence"},
        }
        if self._plans:
            watched = [p for p in self._plans if not p.at_end]
            out["tripwires_watched"] = [{"path": p.top, "recursive": p.recursive} for p in watched]
            cut = {p.top: p.cut for p in watched if p.cut is not None}
            # The budget of entries watched whole: which tripwires it left one level deep.
            out["tripwire_budget"] = {"entries": self._tripwire_max, "one_level": cut}
            if at_end := [p.top for p in self._plans if p.at_end]:
                # Many directories beside the root: how many, not which (it can be hundreds).
                out["beside_root"] = {
                    "directories": len(at_end),
                    "watched": "at each call" if self._beside is not None else "at the end",
                }
        degraded = self._degraded or (self._watch.broken if self._watch is not None else None)
        if degraded:
            out["degraded"] = degraded
        if self._watch is not None and self._watch.troubles:
            out["troubles"] = list(self._watch.troubles)
        return out

    @property
    def stats(self) -> dict[str, int]:
        """Counters: full walks, narrowed rescans, barrier failures, files hashed."""
        hashed = sum(tree.walker.hashed for tree, _ in self._trees)
        return {**self._stats, "hashed": hashed}

    def mark_all_dirty(self) -> None:
        """The overflow hook: distrust every hint, so the next refresh walks everything.

        Called when watchdog reports lost events; safe from any thread.
        """
        self._beside_dirty = True
        if self._watch is not None:
            self._watch.trouble("mark_all_dirty()")
        for _, hints in self._trees:
            if hints is not None:
                hints.mark_everything()

    # ------------------------------------------------------------ probe protocol

    def ignore(self, path: PathLike) -> None:
        """Keep ``path`` out of what is watched (root and tripwires) from the next start on.

        The sandbox calls this for its own files (its episode stream, a cassette it grows),
        so that recording into the root, or into the system temp dir, is never mistaken for
        a tool's effect or an escape.
        """
        self._ignore.append(path)

    async def start(self) -> None:
        """Take the baseline of the root and the tripwires and start watching.

        Raises:
            ConfigError: the root is not a directory.
        """
        await self.close()
        self._windows, self._between = {}, []
        self._stats = dict.fromkeys(self._stats, 0)
        await anyio.to_thread.run_sync(self._start_sync, limiter=self._limiter)
        self._lock = anyio.Lock()

    def _start_sync(self) -> None:
        root = os.path.realpath(self.root)
        if not os.path.isdir(root):
            raise ConfigError(f"sandbox root {os.fspath(self.root)!r} is not a directory")
        tripwires = self._tripwires if self._tripwires is not None else default_tripwires()
        self._plans = plan_tripwires(root, tripwires, self._ignore, self._tripwire_max)
        inside = frozenset(
            os.path.relpath(p, root)
            for p in map(os.path.realpath, self._ignore)
            if p != root and p.startswith(root.rstrip("/") + "/")
        )
        specs = [(Walker(root, exclude=inside, hash_chunk=self.hash_chunk), "", True, False)]
        for p in self._plans:
            walker = Walker(
                p.top,
                exclude=p.exclude,
                max_depth=None if p.recursive else 1,
                hash_new=False,
                hash_chunk=self.hash_chunk,
            )
            specs.append((walker, p.top.rstrip("/") + "/", p.recursive, p.at_end))
        self._degraded = None
        watching = self.use_watchdog
        if watching and not watchdog_logs_visible():
            self._degraded = "watchdog warnings are silenced: an overflow could not be seen"
            watching = False
        trees: list[tuple[Tree, Hints | None]] = []
        watched: list[tuple[Hints, bool]] = []
        beside: list[Hints] = []
        self._at_end = set()
        for walker, prefix, recursive, at_end in specs:
            hints = None
            if at_end:
                # Many directories: one inotify descriptor, read at each boundary (no
                # thread each); without it, they are compared only when finishing.
                self._at_end.add(len(trees))
                if watching:
                    hints = Hints(walker.top, exclude=walker.exclude, max_depth=1)
                    beside.append(hints)
            elif watching:
                hints = Hints(walker.top, exclude=walker.exclude, max_depth=walker.max_depth)
                watched.append((hints, recursive))
            trees.append((Tree(walker, prefix=prefix), hints))
        if watching:
            watch = Watch(watched)
            try:
                watch.start()  # before the baseline: nothing slips between walk and watch
            except Exception as exc:  # a platform refusal means full walks, not a crash
                watch.stop()
                self._degraded = f"watchdog did not start: {exc!r}"
                trees = [(tree, None) for tree, _ in trees]
            else:
                self._watch = watch
        if beside and self._watch is not None:
            self._beside = InotifyTops.open(beside)
            if self._beside is None:  # no inotify here: checked when finishing
                trees = [(t, None if i in self._at_end else h) for i, (t, h) in enumerate(trees)]
        self._trees = trees
        for tree, _ in trees:
            tree.baseline()
            tree.walker.hash_new = True  # from now on, new files are hashed everywhere
        reach = Reach(
            [(t.top, t.prefix, t.walker.exclude, t.walker.max_depth) for t, _ in trees],
            [os.path.realpath(p) for p in self._ignore],
        )
        self._attributor = Attributor(reach, EntryReader(hash_chunk=self.hash_chunk))
        audit.install()

    def _require_started(self) -> anyio.Lock:
        if self._lock is None:
            raise ConfigError("FsProbe.start() must be awaited before observing calls")
        return self._lock

    async def before_call(self, call_id: str) -> None:
        """Refresh (changes so far belong to calls in flight, or to nobody); open a window.

        Raises:
            ConfigError: the probe was not started.
        """
        async with self._require_started():
            self._distribute(await self._refresh())
            self._windows[call_id] = {}
        # After the refresh: the probe's own work is not the call's evidence.
        evidence = audit.Evidence(
            call_id, covered=self._attributor.reach.covered, known_dir=self._known_dir
        )
        self._evidence[call_id] = (evidence, audit.collect(evidence))

    async def after_call(self, call_id: str) -> Effects:
        """Refresh, close the call's window and return its effects, each with how it is
        tied to the call (see ``_attribution.py``).

        Raises:
            ConfigError: the probe was not started, or ``call_id`` never began.
        """
        collected = self._evidence.get(call_id)
        evidence = None
        if collected is not None:
            evidence = collected[0]
            audit.release(*collected)  # here: in the context that started collecting
        async with self._require_started():
            # Popped only now: until this call's window closes, what its evidence names is
            # routed to it alone, whichever call refreshes first.
            self._evidence.pop(call_id, None)
            effects = await anyio.to_thread.run_sync(
                self._close_sync, call_id, evidence, limiter=self._limiter
            )
        if effects is None:
            raise ConfigError(f"after_call({call_id!r}) without before_call")
        return Effects(fs=effects)

    def _close_sync(
        self, call_id: str, evidence: audit.Evidence | None
    ) -> tuple[FsEffect, ...] | None:
        """The refresh that closes a call's window, narrowed to what its evidence names too,
        and the window's effects, attributed (None: no such window)."""
        attributor = self._attributor
        extra = attributor.reach.hints(evidence, self._listed) if evidence is not None else {}
        changes, _ = self._refresh_sync(False, extra)
        self._distribute(changes, evidence)
        if evidence is not None and self._trees:
            targets = attributor.follow_links(evidence, self._trees[0][0].snap)
            if targets:  # written through links in the root: their targets are looked at too
                more = attributor.reach.hints(evidence, self._listed)
                changes, _ = self._refresh_sync(False, more)
                self._distribute(changes, evidence)
        window = self._windows.pop(call_id, None)
        if window is None:
            return None
        return attributor.attribute(call_id, window, evidence)

    async def finish(self) -> Effects:
        """Walk everything; return what no call explains.

        A call still in flight keeps its window: it may belong to another episode of the
        same sandbox, and its own ``after_call`` reports its effects.

        Raises:
            ConfigError: the probe was not started.
        """
        async with self._require_started():
            changes, late = await self._refresh_all(full=True)
            self._distribute(changes)
            # What the trees checked only now saw happened at some time in the episode:
            # it is the finishing episode's, never an open call's (maybe another episode's).
            effects = dict.fromkeys([*self._between, *window_effects(dict(late))])
            self._between = []
        # Seen while no call was in flight: no call to tie them to.
        return Effects(fs=tuple(_unattributed(e) for e in effects))

    async def close(self) -> None:
        """Stop watching (joins watchdog's threads); :meth:`start` may be awaited again."""
        self._lock = None
        for evidence, _ in self._evidence.values():
            evidence.closed = True
        self._evidence = {}
        beside, self._beside = self._beside, None
        if beside is not None:
            beside.close()
        watch, self._watch = self._watch, None
        if watch is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(watch.stop, limiter=self._limiter)

    # ------------------------------------------------------------ refreshing

    async def _refresh(self, *, full: bool = False) -> list[tuple[str, Change]]:
        changes, _ = await self._refresh_all(full=full)
        return changes

    async def _refresh_all(
        self, *, full: bool = False
    ) -> tuple[list[tuple[str, Change]], list[tuple[str, Change]]]:
        """(changes, changes a ``full`` refresh found in the trees planned ``at_end``:
        the finishing episode's, never an open call's)."""
        return await anyio.to_thread.run_sync(self._refresh_sync, full, limiter=self._limiter)

    def _refresh_sync(
        self, full: bool, extra: dict[int, set[str]] | None = None
    ) -> tuple[list[tuple[str, Change]], list[tuple[str, Change]]]:
        """(changes, changes a ``full`` refresh found in the trees planned ``at_end``).

        ``extra``: per tree, paths a call's evidence names, looked at whatever the hints
        say (a change watchdog has not handed over yet, or one beside the root, lands on
        the call that made it).
        """
        extra = extra or {}
        watch = self._watch
        out: list[tuple[str, Change]] = []
        late: list[tuple[str, Change]] = []
        # What the kernel queued up to now for the directories beside the root: only the
        # ones it names are looked at (there can be hundreds).
        touched = self._beside.drain() if self._beside is not None else set()
        if self._beside_dirty:  # mark_all_dirty: every tree beside is rescanned too
            self._beside_dirty = False
            touched = {h for i, (_, h) in enumerate(self._trees) if i in self._at_end and h}
        for i, (tree, hints) in enumerate(self._trees):
            named = extra.get(i)
            if i in self._at_end:
                if full:
                    if hints is not None:
                        hints.take()
                    late.extend(tree.effects(self._full(tree)))
                elif (hints is not None and hints in touched) or named:
                    paths, dirs, everything = (
                        hints.take()
                        if hints is not None and hints in touched
                        else (set(), set(), False)
                    )
                    if named:
                        paths |= named
                    if everything:
                        out.extend(tree.effects(self._full(tree)))
                    elif paths or dirs:
                        out.extend(tree.effects(tree.refresh(paths, dirs)))
                continue
            if watch is None or hints is None or watch.broken is not None or full:
                if hints is not None:
                    hints.take()
                changes = self._full(tree)
            else:
                # The root's barrier comes first: once it has passed, inotify has handed
                # every earlier event (of every tree) to watchdog.
                ok = watch.barrier(hints) if i == 0 else True
                if not ok:
                    self._stats["barrier_failures"] += 1
                paths, dirs, everything = hints.take()
                if named:
                    paths |= named
                if not ok or everything:
                    changes = self._full(tree)
                else:
                    if i > 0:
                        # A tripwire's events may trail the root's barrier by a thread hop:
                        # its top is re-checked now (listing, and files' keys) so direct
                        # changes land in the right call.
                        top = tree.snap.dirs.get("", {})
                        if len(top) <= _SYNC_TOP_MAX:
                            if tree.top_moved():  # else nothing was added or removed there
                                dirs.add("")
                            paths.update(n for n, e in top.items() if e.kind != "dir")
                    self._stats["narrow_scans"] += 1
                    changes = tree.refresh(paths, dirs)
            out.extend(tree.effects(changes))
        return out, late

    def _full(self, tree: Tree) -> dict[str, Change]:
        self._stats["full_scans"] += 1
        return tree.full()

    def _known_dir(self, path: str) -> bool:
        """Whether ``path`` is a folder of the root as its snapshot lists it: reached
        through folders only, never a link (from the tool's thread: dictionary reads)."""
        if not self._trees:
            return False
        tree = self._trees[0][0]
        top = tree.top
        if path == top:
            return True
        if not path.startswith(top) or path[len(top) : len(top) + 1] != "/":
            return False
        return path[len(top) + 1 :] in tree.snap.dirs

    def _listed(self, tree: int, rel: str) -> bool:
        """Whether tree ``tree``'s snapshot has listed directory ``rel``."""
        return rel in self._trees[tree][0].snap.dirs

    def _distribute(
        self, changes: list[tuple[str, Change]], closing: audit.Evidence | None = None
    ) -> None:
        """Hand ``changes`` to the windows of the calls in flight: a change outside the root
        that a call's evidence names goes to that call alone (``closing``: the evidence of
        the call whose window is being closed, no longer collecting)."""
        if not changes:
            return
        if not self._windows:
            # Nobody's window: these changes span only this interval, so they become effects
            # now (merging them with another interval's, across calls, would be wrong).
            self._between.extend(window_effects(dict(changes)))
            return
        # A copy: a call starting in the event loop adds its evidence meanwhile.
        open_calls = list(self._evidence.items())
        evidence = [(cid, ev) for cid, (ev, _) in open_calls if cid in self._windows]
        if closing is not None and closing.call_id in self._windows:
            evidence.append((closing.call_id, closing))
        for path, (old, new) in changes:
            owners = (
                [cid for cid, ev in evidence if ev.claims(path)]
                if evidence and path.startswith("/")
                else []
            )
            for cid in owners or self._windows:
                merge_change(self._windows[cid], path, old, new)

    def _forget_hints(self) -> None:
        """Tests only: wait for pending events, then drop them, as an overflow would."""
        if self._watch is not None and self._trees:
            root_hints = self._trees[0][1]
            if root_hints is not None:
                self._watch.barrier(root_hints)
        for _, hints in self._trees:
            if hints is not None:
                hints.take()


def _unattributed(effect: FsEffect) -> FsEffect:
    """``effect`` seen while no call was in flight: tied to none."""
    return msgspec.structs.replace(effect, attribution="none")
