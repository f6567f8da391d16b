"""What the commands check of their episode and verdict files before reading them.

* **The same file on both sides of a gate is refused**: through a symbolic link or a hard
  link too (the same device and inode), since a run compared with itself always passes.

Files that cannot be opened are left to the readers, which name them the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from litmus_sandbox._model.errors import LitmusError

__all__ = ["refuse_same_file"]


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
