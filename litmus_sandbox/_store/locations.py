"""Where streams are: local paths, ``file://`` URLs and object-store URLs; and the sets of
shards that a folder, a prefix or a glob names.

Theory of operation
-------------------
A *location* is a string, one of:

==========================  ==========================================================
``-``                       standard input (where a reader allows it)
``PATH``                    a local path (relative or absolute)
``file:///ABS/PATH``        the same local path: no extra needed
``SCHEME://…``              anything else with a scheme of two letters or more is an
                            fsspec URL (``s3://bucket/key``, ``gs://…``), opened by
                            ``remote.py`` (extra ``cloud``)
==========================  ==========================================================

Credentials come only from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``,
…, read by the storage library itself): a URL that carries a user or password
(``s3://KEY:SECRET@bucket/…``) is refused before anything is opened, and said with that
part masked, so no secret reaches a header, a verdict, a report or an error line.

A location may also name a *set* of shards: a folder, a prefix or a glob (``sets.py``).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Literal

from litmus_sandbox._model.errors import ConfigError

__all__ = [
    "SUFFIX",
    "Kind",
    "Shard",
    "check_url",
    "display",
    "has_magic",
    "is_remote",
    "local_path",
    "name_of",
    "on_disk",
]

Kind = Literal["episodes", "verdicts"]
#: What the shards of each kind are called: every ``*.KIND.jsonl`` under a folder.
SUFFIX: dict[Kind, str] = {"episodes": ".episodes.jsonl", "verdicts": ".verdicts.jsonl"}

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
_MAGIC = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Shard:
    """One stream of a set: its location and its size in bytes (None: not known)."""

    name: str
    size: int | None


def scheme(location: str) -> str | None:
    """The URL scheme of ``location``, lower case, or None for a plain path."""
    m = _SCHEME.match(location)
    return m.group(1).lower() if m else None


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is a URL opened through fsspec (not a path, not ``file://``)."""
    return isinstance(location, str) and scheme(location) not in (None, "file")


def on_disk(location: str) -> str:
    """The local path a path or ``file://`` URL names, for comparing files (``location``
    itself for any other URL, or a URL the readers will refuse)."""
    try:
        return local_path(location) or location
    except ConfigError:
        return location


def local_path(location: str | os.PathLike[str]) -> str | None:
    """The local path ``location`` names (a path, or a ``file://`` URL), else None.

    Raises:
        ConfigError: a ``file://`` URL naming another host.
    """
    p = os.fspath(location)
    s = scheme(p)
    if s is None:
        return p
    if s != "file":
        return None
    parts = urllib.parse.urlsplit(p)
    if parts.netloc not in ("", "localhost"):
        raise ConfigError(f"{display(p)}: a file:// URL names this machine's files only")
    return urllib.parse.unquote(parts.path) or "/"


def display(location: str) -> str:
    """``location`` with any user and password masked (what messages show of a URL)."""
    if scheme(location) is None:
        return location
    head, sep, rest = location.partition("://")
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return f"{head}{sep}{netloc}{slash}{path}"


def check_url(url: str) -> str:
    """``url`` itself, once it is known to carry no credentials.

    Raises:
        ConfigError: the URL names a user or password.
    """
    rest = url.partition("://")[2]
    if "@" in rest.partition("/")[0]:
        raise ConfigError(
            f"{display(url)}: credentials in a URL are refused (they would be recorded); give "
            "them through the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
            "AWS_ENDPOINT_URL, or the storage library's own settings)"
        )
    return url


def has_magic(location: str) -> bool:
    """Whether ``location`` holds a glob's wildcards (``*``, ``?``, ``[``)."""
    return _MAGIC.search(location) is not None


def name_of(location: str) -> str:
    """The last part of ``location`` (a file's or an object's name)."""
    return location.rstrip("/").rpartition("/")[2]
