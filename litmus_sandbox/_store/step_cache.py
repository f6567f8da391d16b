"""What a step-verdict cache offers, and the one place a cache is opened from its URL.

Theory of operation
-------------------
The runtime scores through a :class:`StepCache`: verdicts by ``(judge fingerprint, step
content hash, context hash)`` (:data:`CacheKey`), and the claims on steps in flight of
:class:`~litmus_sandbox._store.claims.StepClaims`. Two stores implement it and the
runtime never asks which it has:

==========================  ==========================================================
``PATH`` (no scheme)        SQLite file, as always (:class:`VerdictCache`)
``sqlite:///PATH``          the same; everything after ``sqlite:///`` is the path, as
                            given (``sqlite:////abs/path``, ``sqlite:///relative``)
``redis://HOST:PORT/DB``    a Redis server shared by every scorer of a cluster
``rediss://…``, ``unix://``  the same over TLS, or a Unix socket (``?db=N``)
==========================  ==========================================================

:func:`open_cache` reads the form and opens the store. The Redis store's module imports
the ``redis`` client, an extra: without it, opening a ``redis://`` cache raises the
``ModuleNotFoundError`` the command line turns into its one-line missing-extra error.
Passwords in a URL are never shown: :func:`display_url` masks them in every message.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._store.cache_urls import display_url as display_url
from litmus_sandbox._store.cache_urls import local_files as local_files
from litmus_sandbox._store.cache_urls import sqlite_path as sqlite_path
from litmus_sandbox._store.claims import CacheKey, StepClaims

__all__ = [
    "CacheKey",
    "StepCache",
    "default_location",
    "display_url",
    "local_files",
    "open_cache",
    "sqlite_path",
]


class StepCache(StepClaims, Protocol):
    """A step-verdict cache: verdicts by key, claims on steps in flight."""

    #: Where the cache is, for messages: a path, or a URL with any password masked.
    location: str

    def get(self, key: CacheKey) -> StepJudgment | None:
        """The stored judgment of ``key``, or None (never stored, or not stored whole)."""
        ...

    def get_many(self, keys: Sequence[CacheKey]) -> list[StepJudgment | None]:
        """:meth:`get` of each key, in order (one round trip to a networked store)."""
        ...

    def put(self, key: CacheKey, judgment: StepJudgment) -> None:
        """Store one judgment."""
        ...

    def missing(self, keys: Iterable[CacheKey]) -> int:
        """How many distinct keys have no stored judgment."""
        ...

    def files(self) -> list[Path]:
        """The local files this cache writes (none for a networked one)."""
        ...

    def __len__(self) -> int: ...

    def close(self) -> None:
        """Close the connection (or file)."""
        ...

    def __enter__(self) -> StepCache: ...

    def __exit__(self, *exc: object) -> None: ...


def default_location() -> str:
    """``$LITMUS_CACHE`` (a path or a URL), else
    ``$XDG_CACHE_HOME/litmus-sandbox/verdicts.sqlite`` (``~/.cache`` without it): the
    cache ``score`` uses, and a sandbox keeps emulated results in, unless told another."""
    if env := os.environ.get("LITMUS_CACHE"):
        return env
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "litmus-sandbox" / "verdicts.sqlite")


def open_cache(spec: str | os.PathLike[str], *, claim_ttl: float | None = None) -> StepCache:
    """Open the step-verdict cache named by ``spec`` (see the module docstring).

    Args:
        spec: a path (a ``Path`` is always a path), ``sqlite:///PATH``, or a Redis URL.
        claim_ttl: seconds a claim lives (None: ``$LITMUS_CACHE_CLAIM_TTL``, else 30).

    Raises:
        ConfigError: an unknown scheme, an empty path, or a file that is not a cache.
        CacheError: the store cannot be opened or reached.
        ModuleNotFoundError: a Redis URL without the ``redis`` extra installed.
    """
    path = sqlite_path(spec)
    if path is not None:
        from litmus_sandbox._store.cache import VerdictCache

        return VerdictCache(path, claim_ttl=claim_ttl)
    from litmus_sandbox._store.redis_cache import RedisVerdictCache

    return RedisVerdictCache(os.fspath(spec), claim_ttl=claim_ttl)
