"""What the commands check of their episode and verdict files before reading them.

* **An empty input is refused.** A stream that holds no record (zero bytes, or only blank
  lines) reads as nothing, and what a command then says ("scored 0 episodes", every case
  ``baseline_missing``) hides the mistake that most often made it: a step that wrote
  nothing, a path to the wrong file. It is one line naming the file and exit 2, unless
  ``--allow-empty-input`` (every command that reads these streams has it) says that an
  empty file holds none, as it reads.
* **The same file on both sides of a gate is refused**: through a symbolic link or a hard
  link too (the same device and inode), since a run compared with itself always passes.

Files that cannot be opened are left to the readers, which name them the same way.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import Literal

from litmus_sandbox._model.errors import LitmusError
from litmus_sandbox._store.streams import holds_no_record

__all__ = ["ALLOW_EMPTY_INPUT", "add_allow_empty_input", "refuse_same_file", "require_records"]

ALLOW_EMPTY_INPUT = "--allow-empty-input"
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
    for path in paths:
        if path is None or not os.path.exists(path):
            continue  # its reader says it is missing
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
    seen: dict[tuple[int, int], str] = {}
    for path in a_paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # reported when it is read
        seen.setdefault((st.st_dev, st.st_ino), path)
    for path in b_paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        other = seen.get((st.st_dev, st.st_ino))
        if other is not None:
            raise LitmusError(
                f"{a_arg} {other} and {b_arg} {path} are the same file: a run "
                "compared with itself always passes; give each side its own file"
            )
