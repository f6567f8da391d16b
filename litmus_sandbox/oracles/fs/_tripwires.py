"""Which directories outside the sandbox root are tripwires, and how deep each is watched.

By default: the user's home, shared memory (``/dev/shm``), ``/var/tmp`` and the system
temp directory (those that exist). Tripwires are watched whole within a *budget* of
entries, ``DEFAULT_TRIPWIRE_MAX_ENTRIES`` (20,000) for all of them together, spent in the
order they are given: one whose tree does not fit in what is left is watched one level
deep (its direct entries), and so is one that holds the root (the temp dir usually does:
the root has a watch of its own). The episode header says which were cut, and why
(``over_budget``, ``holds_root``). Deeper changes in a cut tripwire are found by evidence
(a call's audit events, its process tree), not by the tripwire. The root, everything
under it, the ``ignore`` paths and tripwires nested in another are left out of each tree.

The root's own surroundings are where ``../`` lands: whenever there are tripwires, the
root's parent is one too, and so is every directory between the root and a tripwire that
holds it (each one level deep), so a write to ``../x`` or ``../../x`` or a rename out of
the root is seen wherever the root sits under the temp dir or the home directory. The
directories beside the root in its parent are tripwires as well (whole when small). When
there are more than a few of them, or the parent is itself a tripwire (a root made by
``mkdtemp()`` right in the temp dir), they are planned ``at_end``: each one level deep,
never given a watchdog thread or a rescan at every boundary (hundreds would cost every
call). The probe watches them through one inotify descriptor it reads at each boundary
(``_inotify``), or, where it cannot, compares them with their baseline when finishing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "DEFAULT_TRIPWIRE_MAX_ENTRIES",
    "PathLike",
    "Plan",
    "default_tripwires",
    "plan_tripwires",
]

PathLike = str | os.PathLike[str]

#: Entries watched recursively in all tripwires together: a tripwire whose tree does not
#: fit in what is left (or that holds the root) is watched one level deep.
DEFAULT_TRIPWIRE_MAX_ENTRIES = 20_000
#: Directories every process shares, watched by default (tests point these elsewhere).
SHARED_TRIPWIRES: tuple[str, ...] = ("/dev/shm", "/var/tmp")


def default_tripwires() -> list[str]:
    """The user's home, the shared directories (``/dev/shm``, ``/var/tmp``) and the system
    temp directory, last (those that exist)."""
    out: list[str] = []
    with contextlib.suppress(RuntimeError, KeyError):  # no HOME and no passwd entry
        out.append(str(Path.home()))
    out.extend(d for d in SHARED_TRIPWIRES if os.path.isdir(d))
    out.append(tempfile.gettempdir())
    return out


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _count(top: str, exclude: frozenset[str], limit: int) -> int | None:
    """How many entries the tree under ``top`` holds; None past ``limit`` (stops early)."""
    count, stack = 0, [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(f"{top}/{rel}" if rel else top) as it:
                for de in it:
                    path = f"{rel}/{de.name}" if rel else de.name
                    if path in exclude:
                        continue
                    count += 1
                    if count > limit:
                        return None
                    if de.is_dir(follow_symlinks=False):
                        stack.append(path)
        except OSError:
            continue
    return count


def _surroundings(root: str, tops: list[str]) -> list[str]:
    """The root's parent, and the directories between it and a tripwire holding the root."""
    held = any(_under(root, t) for t in tops)
    out: list[str] = []
    d = os.path.dirname(root)
    while d not in tops and d != os.path.dirname(d):  # stop at a tripwire, or at "/"
        out.append(d)
        if not held:
            break  # no tripwire above: the parent alone
        d = os.path.dirname(d)
    return out


#: A parent with more directories than this beside the root is a shared place (a temp
#: dir): its directories are planned ``at_end`` (see the module docstring), not given a
#: watch and a rescan each.
_MAX_SIBLINGS = 16
#: At most this many directories beside the root are planned ``at_end``.
_MAX_CHECKED_AT_END = 1024


def _siblings(root: str, tops: list[str]) -> list[str]:
    """The directories beside the root in its parent (not links).

    ``../x`` lands in the parent, which is watched one level deep; a write into an
    existing directory next to the root (``../outside/x``, or through a symlink into it)
    lands one level deeper, where only a watch of that directory sees it.
    """
    parent = os.path.dirname(root)
    try:
        with os.scandir(parent) as it:
            found = [
                os.path.join(parent, e.name)
                for e in it
                if e.is_dir(follow_symlinks=False) and os.path.join(parent, e.name) != root
            ]
    except OSError:
        return []
    return sorted(d for d in found if d not in tops)


class Plan:
    """A tripwire as it will be watched."""

    def __init__(
        self,
        top: str,
        exclude: frozenset[str],
        recursive: bool,
        at_end: bool = False,
        cut: str | None = None,
    ) -> None:
        self.top = top
        self.exclude = exclude
        self.recursive = recursive
        #: One of the many directories beside the root: one level deep, watched through
        #: the probe's one inotify descriptor, or else compared only when it finishes.
        self.at_end = at_end
        #: Why a tripwire is watched one level deep: ``holds_root`` or ``over_budget``.
        self.cut = cut


def plan_tripwires(
    root: str, tripwires: Sequence[PathLike], ignore: Sequence[PathLike], limit: int
) -> list[Plan]:
    """The tripwires to watch around ``root`` (a resolved path), in the order given.

    Missing directories, the root itself and directories inside it are dropped; a
    tripwire is recursive when it does not hold the root and its tree fits in what is left
    of the budget of ``limit`` entries.
    """
    tops: list[str] = []
    for t in tripwires:
        top = os.path.realpath(t)
        if os.path.isdir(top) and not _under(top, root) and top not in tops:
            tops.append(top)
    at_end: list[str] = []
    if tops:
        given = os.path.dirname(root) in tops  # the root sits right in a tripwire (temp dir)
        around = _surroundings(root, tops)
        tops.extend(around)
        if around or given:  # the root's parent is watched: so are its other directories
            beside = _siblings(root, tops)
            if around and len(beside) <= _MAX_SIBLINGS:
                tops.extend(beside)
            else:
                at_end = beside[:_MAX_CHECKED_AT_END]
    ignored = [os.path.realpath(p) for p in ignore]
    plans = []
    budget = limit
    for top in tops:
        # Leave out the root, ignored paths, and tripwires nested inside this one.
        inner = [root, *ignored, *(t for t in tops if t != top)]
        exclude = frozenset(os.path.relpath(p, top) for p in inner if _under(p, top) and p != top)
        if _under(root, top):
            plans.append(Plan(top, exclude, recursive=False, cut="holds_root"))
            continue
        entries = _count(top, exclude, budget)
        if entries is None:
            plans.append(Plan(top, exclude, recursive=False, cut="over_budget"))
        else:
            budget -= entries
            plans.append(Plan(top, exclude, recursive=True))
    for top in at_end:
        if not any(_under(top, p) for p in ignored):
            inner = [p for p in ignored if _under(p, top) and p != top]
            exclude = frozenset(os.path.relpath(p, top) for p in inner)
            plans.append(Plan(top, exclude, recursive=False, at_end=True))
    return plans
