"""What the commands check of their episode and verdict files before reading them.

* **An empty input is refused.** A stream that holds no record (zero bytes, or only blank
  lines) reads as nothing, and what a command then says ("scored 0 episodes", every case
  ``baseline_missing``) hides the mistake that most often made it: a step that wrote
  nothing, a path to the wrong file. It is one line naming the file and exit 2, unless
  ``--allow-empty-input`` (every command that reads these streams has it) says that an
  empty file holds none, as it reads.
* **The same file on both sides of a gate is refused**: through a symbolic link or a hard
  link too (the same device and inode), and the same object URL, since a run compared
  with itself always passes.
* **A folder, a prefix or a glob is the set of shards under it** (:func:`expand_inputs`,
  run on every command's arguments once they are parsed): each stream argument that names
  a set is replaced by its ``*.episodes.jsonl`` (or ``*.verdicts.jsonl``) shards, in name
  order, so every command reads a set as the files listed one by one. An empty shard is
  left out (it holds nothing to read); a set with nothing under it, or only empty shards,
  is refused as an empty file is (``--allow-empty-input``: read as holding nothing).

Files that cannot be opened are left to the readers, which name them the same way.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Literal

from litmus_sandbox._model.errors import LitmusError, RecordDecodeError
from litmus_sandbox._store.locations import (
    SUFFIX,
    Kind,
    display,
    has_magic,
    is_remote,
    local_path,
    on_disk,
)
from litmus_sandbox._store.sets import expand
from litmus_sandbox._store.streams import holds_no_record

__all__ = [
    "ALLOW_EMPTY_INPUT",
    "STREAM_ARGUMENTS",
    "add_allow_empty_input",
    "expand_inputs",
    "refuse_same_file",
    "require_records",
]

#: The arguments (by attribute) that name episode or verdict streams, several at a time:
#: each may be a folder, a prefix or a glob (:func:`expand_inputs`).
STREAM_ARGUMENTS: dict[str, Kind] = {
    "episodes": "episodes",
    "candidate_episodes": "episodes",
    "baseline_episodes": "episodes",
    "cassette": "episodes",
    "baseline": "verdicts",
    "candidate": "verdicts",
    "verdicts": "verdicts",
}

ALLOW_EMPTY_INPUT = "--allow-empty-input"
#: The shards the command's sets named, with a size known from their listing (so that
#: :func:`require_records` need not open each of a prefix's objects once more).
_FROM_SETS: ContextVar[frozenset[str]] = ContextVar("litmus_from_sets", default=frozenset())
_WHY = {"empty": "empty file", "blank": "only blank lines"}


def add_allow_empty_input(p: argparse.ArgumentParser, what: str, then: str = "") -> None:
    """The flag that accepts an empty episode or verdict file (``args.allow_empty_input``);
    ``what`` names the files, ``then`` says what reading one as empty does."""
    p.add_argument(
        ALLOW_EMPTY_INPUT,
        action="store_true",
        help=f"accept {what} that holds no record (zero bytes or only blank lines) as "
        f"holding none{then}; without it such a file is an error (exit 2)",
    )


def require_records(
    paths: Iterable[str | None],
    kind: Literal["episodes", "verdicts"],
    *,
    allow: bool = False,
    arg: str | None = None,
    then: str = "",
    flag: bool = True,
) -> None:
    """Refuse a file of ``paths`` that holds no record, unless ``allow``.

    ``arg`` is the flag that named the files (None: positional), ``then`` what reading the
    file as empty would lead to, said in the message; ``flag=False`` for an input that
    ``--allow-empty-input`` does not accept (the message does not offer it).

    Raises:
        LitmusError: ``ARG PATH: no KIND (empty file): THEN; pass --allow-empty-input ...``.
        RecordDecodeError: a file that is not a regular file (as its reader would).
    """
    if allow:
        return
    listed = _FROM_SETS.get()
    for path in paths:
        if path is None or not (is_remote(path) or os.path.exists(local_path(path) or path)):
            continue  # its reader says it is missing (an object: opening it says so)
        if path in listed:
            continue  # a set's shard, listed with its size: an empty one was left out

        state = holds_no_record(path)
        if state is None:
            continue
        where = f"{arg} {path}" if arg else path
        consequence = f": {then}" if then else ""
        offer = f"; pass {ALLOW_EMPTY_INPUT} if an empty input is expected" if flag else ""
        raise LitmusError(f"{where}: no {kind} ({_WHY[state]}){consequence}{offer}")


def refuse_same_file(
    a_arg: str, a_paths: Iterable[str], b_arg: str, b_paths: Iterable[str]
) -> None:
    """Refuse a file given on both sides (the same path, a symbolic or a hard link to it).

    Raises:
        LitmusError: names both arguments.
    """
    urls = {u for u in a_paths if is_remote(u)}
    for path in b_paths:
        if path in urls:
            raise LitmusError(
                f"{a_arg} {display(path)} and {b_arg} {display(path)} are the same object: a "
                "run compared with itself always passes; give each side its own"
            )
    seen: dict[tuple[int, int], str] = {}
    for path in a_paths:
        try:
            st = os.stat(on_disk(path))  # a file:// URL is the file it names
        except OSError:
            continue  # reported when it is read
        seen.setdefault((st.st_dev, st.st_ino), path)
    for path in b_paths:
        try:
            st = os.stat(on_disk(path))
        except OSError:
            continue
        other = seen.get((st.st_dev, st.st_ino))
        if other is not None:
            raise LitmusError(
                f"{a_arg} {other} and {b_arg} {path} are the same file: a run "
                "compared with itself always passes; give each side its own file"
            )


def expand_inputs(args: argparse.Namespace) -> None:
    """Replace each folder, prefix or glob among ``args``' stream arguments
    (:data:`STREAM_ARGUMENTS`) by the shards it names, in name order (see the module
    docstring); other locations stay as given.

    Raises:
        RecordDecodeError: a set with nothing under it, or a store that cannot be listed.
        LitmusError: a set of empty shards (unless ``--allow-empty-input``), or one object
            given twice.
        ConfigError: a URL with credentials in it.
        ModuleNotFoundError: a URL without its storage library (the extra ``cloud``).
    """
    allow = bool(getattr(args, "allow_empty_input", False))
    listed: set[str] = set()
    _FROM_SETS.set(frozenset())
    for attr, kind in STREAM_ARGUMENTS.items():
        given = getattr(args, attr, None)
        if not isinstance(given, list):
            continue  # absent, or an argument that names one file (export --verdicts)
        out: list[str] = []
        for location in given:
            out.extend(_shards(location, kind, allow=allow, listed=listed))
        _refuse_twice(out)
        setattr(args, attr, out)
    _FROM_SETS.set(frozenset(listed))


def _shards(location: str, kind: Kind, *, allow: bool, listed: set[str]) -> list[str]:
    shards = expand(location, kind)
    if shards is None:
        return [location]
    kept = [s.name for s in shards if s.size != 0]
    listed.update(s.name for s in shards if s.size)  # known to hold bytes: not opened again
    if kept or allow:
        return kept
    pattern = f"*{SUFFIX[kind]}"
    if shards:
        raise LitmusError(
            f"{display(location)}: no {kind} (every {pattern} under it is empty); pass "
            f"{ALLOW_EMPTY_INPUT} if an empty input is expected"
        )
    if has_magic(location):
        problem = "no object matches" if is_remote(location) else "no file matches"
    elif is_remote(location):
        problem = f"no {pattern} under this prefix"
    else:
        problem = f"not a regular file (a directory holding no {pattern})"
    raise RecordDecodeError(display(location), None, problem)


def _refuse_twice(names: list[str]) -> None:
    """Refuse an object named twice in one argument list (a local file given twice is
    refused by the command, which knows its links too)."""
    seen: set[str] = set()
    for name in names:
        if not is_remote(name):
            continue
        if name in seen:
            raise LitmusError(f"{display(name)}: given twice; its records would count twice")
        seen.add(name)
