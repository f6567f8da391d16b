"""How a step-verdict cache is named: a path, ``sqlite:///PATH`` or a Redis URL
(:func:`sqlite_path`), the files a SQLite cache writes (:func:`local_files`), and a URL
as messages show it, its password masked (:func:`display_url`). Pure functions, imported
by both stores and by :mod:`~litmus_sandbox._store.step_cache`, which opens them."""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from litmus_sandbox._model.errors import ConfigError

__all__ = ["display_url", "local_files", "sqlite_path"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})
_SQLITE_PREFIX = "sqlite:///"


def sqlite_path(spec: str | os.PathLike[str]) -> str | None:
    """The SQLite file ``spec`` names, or None when it names a Redis server.

    Raises:
        ConfigError: an unknown scheme, or ``sqlite://`` with no path.
    """
    if not isinstance(spec, str):
        return os.fspath(spec)
    found = _SCHEME.match(spec)
    if found is None:
        return spec
    scheme = found[1].lower()
    if scheme == "sqlite":
        path = spec[len(_SQLITE_PREFIX) :] if spec[:10].lower() == _SQLITE_PREFIX else ""
        if not path:
            raise ConfigError(
                f"cache {display_url(spec)!r}: write sqlite:///PATH "
                "(sqlite:///relative/path or sqlite:////absolute/path)"
            )
        return path
    if scheme in _REDIS_SCHEMES:
        return None
    raise ConfigError(
        f"cache {display_url(spec)!r}: unknown scheme {scheme!r} "
        "(a path, sqlite:///PATH, redis://HOST:PORT/DB, rediss://… or unix://…)"
    )


def local_files(spec: str | os.PathLike[str]) -> list[Path]:
    """The local files the cache ``spec`` names would write (none for Redis).

    Raises:
        ConfigError: as :func:`sqlite_path`.
    """
    path = sqlite_path(spec)
    if path is None or path == ":memory:":
        return []
    return [Path(f"{path}{end}") for end in ("", "-wal", "-shm", "-journal")]


def display_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages; never the secret)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unreadable URL>"
    if parts.password is None and "password=" not in parts.query.lower():
        return url
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        name = user.partition(":")[0]
        netloc = f"{name}:***@{host}"
    query = urllib.parse.urlencode(
        [
            (k, "***" if k.lower() == "password" else v)
            for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="*",
    )
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))
