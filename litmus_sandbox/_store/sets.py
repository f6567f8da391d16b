"""The sets of streams that a folder, a prefix or a glob names.

Theory of operation
-------------------
A location (``locations.py``) names a *set* of shards when it is

* a glob (``*``, ``?`` or ``[`` in it, and no such file): every match, a folder among them
  standing for the shards under it;
* a folder, or a prefix of an object store (a URL ending with ``/``, or one under which
  objects are): every ``*.KIND.jsonl`` under it, at any depth, hidden names aside (the
  partial files of writers still writing).

A set is listed in name order (the whole location, compared as text), which is the order
its readers read it: shard names start with their UTC time (``shards.py``), so that is
the order they were started in. Anything else (a file, a missing path, an object) is
itself, and its reader says what is wrong with it. An object store is listed by
``remote.py`` (the extra ``cloud``), imported only for a URL.
"""

from __future__ import annotations

import glob
import os

from litmus_sandbox._store.locations import SUFFIX, Kind, Shard, check_url, has_magic, local_path

__all__ = ["expand"]


def expand(location: str, kind: Kind) -> list[Shard] | None:
    """The shards ``location`` names when it names a set (see the module docstring), in
    name order; None when it names one stream (or nothing: its reader says so).

    Raises:
        ConfigError: a URL with credentials, or a ``file://`` URL of another host.
        ModuleNotFoundError: a URL whose storage library is not installed.
    """
    path = local_path(location)
    if path is None:
        from litmus_sandbox._store.remote import expand_remote

        return expand_remote(check_url(location), SUFFIX[kind])
    if os.path.isdir(path):
        return _under(path, kind)
    if os.path.lexists(path) or not has_magic(path):
        return None
    found: list[Shard] = []
    for match in sorted(glob.glob(path, recursive=True)):
        if os.path.isdir(match):
            found.extend(_under(match, kind))
        elif os.path.isfile(match):
            found.append(Shard(match, os.path.getsize(match)))
    return found


def _under(folder: str, kind: Kind) -> list[Shard]:
    """Every ``*.KIND.jsonl`` file under ``folder``, at any depth, in name order (the
    hidden ones aside: the partial files of writers still writing)."""
    pattern = os.path.join(glob.escape(folder), "**", f"*{SUFFIX[kind]}")
    out = []
    for match in sorted(glob.glob(pattern, recursive=True)):
        try:
            if os.path.isfile(match):
                out.append(Shard(match, os.path.getsize(match)))
        except OSError:
            continue  # gone since it was listed
    return out
