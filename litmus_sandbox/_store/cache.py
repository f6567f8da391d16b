"""The step-verdict cache (SQLite).

Keyed by judge fingerprint + step content hash + context hash, so one judge's verdicts
are never served for another, and a re-score pays only for steps never judged under
that fingerprint. Only successful judgments are stored: errors are never cached.

Theory of operation
-------------------
One connection per :class:`VerdictCache`, in autocommit mode, shared by threads under a
lock. A read is one statement. Every write is a ``BEGIN IMMEDIATE`` transaction: it takes
the database's write lock before it reads, so a write is atomic between the processes
that share the file (a writer waits up to ``_BUSY_TIMEOUT`` for the lock).

Any SQLite failure - a full disk, an I/O error, a lock held past the timeout - is a
:class:`CacheError` naming the cache's path and what failed.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import msgspec

from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import CacheError, ConfigError

__all__ = ["CacheKey", "VerdictCache"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS step_verdicts (
    judge TEXT NOT NULL,
    step TEXT NOT NULL,
    context TEXT NOT NULL,
    judgment BLOB NOT NULL,
    PRIMARY KEY (judge, step, context)
) WITHOUT ROWID
"""
_WHERE = "judge=? AND step=? AND context=?"
_GET = f"SELECT judgment FROM step_verdicts WHERE {_WHERE}"
_PUT = "INSERT OR REPLACE INTO step_verdicts VALUES (?, ?, ?, ?)"
#: Seconds a write waits for another process's write lock.
_BUSY_TIMEOUT = 30.0

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(StepJudgment).decode

#: ``(judge fingerprint, step content hash, context hash)``: what a verdict is cached by.
CacheKey = tuple[str, str, str]


class VerdictCache:
    """A persistent map ``(judge, step hash, context hash) -> StepJudgment`` (see the
    module docstring).

    Args:
        path: the SQLite file (made with its folder when missing), or ``:memory:``.

    Raises:
        ConfigError: ``path`` is not a verdict cache.
        CacheError: the file cannot be opened or set up (a full disk, an I/O error).
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:") -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise CacheError(f"{self.path}: verdict cache: opening failed: {exc}") from None
        try:
            with self._guard("opening"):
                self._db.execute("PRAGMA journal_mode=WAL")
                # A power loss may lose the last few entries; that only costs re-judging
                # them, while a full fsync per write made on-disk scoring ten times slower.
                # A killed process loses nothing it committed.
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute(_SCHEMA)
        except CacheError as exc:
            self._db.close()
            if isinstance(exc.__context__, sqlite3.OperationalError):
                raise
            problem = exc.__context__
            raise ConfigError(f"{self.path}: not a usable verdict cache ({problem})") from None

    def get(self, key: CacheKey) -> StepJudgment | None:
        with self._lock, self._guard("reading a verdict"):
            row = self._db.execute(_GET, key).fetchone()
        return _judgment(row)

    def put(self, key: CacheKey, judgment: StepJudgment) -> None:
        self.put_many([(key, judgment)])

    def put_many(self, items: Iterable[tuple[CacheKey, StepJudgment]]) -> None:
        """Store several judgments in one transaction."""
        rows = [(*key, _encode(judgment)) for key, judgment in items]
        if not rows:
            return
        with self._write(f"storing {len(rows)} judgment(s)") as db:
            db.executemany(_PUT, rows)

    def missing(self, keys: Iterable[CacheKey]) -> int:
        """How many distinct keys are not cached (the judge calls a score would take)."""
        unique = set(keys)
        with self._lock, self._guard("reading verdicts"):
            return sum(1 for key in unique if self._db.execute(_GET, key).fetchone() is None)

    def __len__(self) -> int:
        with self._lock, self._guard("counting verdicts"):
            (n,) = self._db.execute("SELECT COUNT(*) FROM step_verdicts").fetchone()
        return int(n)

    def close(self) -> None:
        with self._lock, self._guard("closing"):
            self._db.close()

    def __enter__(self) -> VerdictCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn SQLite's errors into one :class:`CacheError` naming the file."""
        try:
            yield
        except sqlite3.Error as exc:
            raise CacheError(f"{self.path}: verdict cache: {what} failed: {exc}") from exc

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, committed, or rolled back on any error."""
        db = self._db
        with self._lock, self._guard(what):
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with suppress(sqlite3.Error):  # the error that got here is the one to tell
                        db.execute("ROLLBACK")
                raise


def _judgment(row: tuple[bytes] | None) -> StepJudgment | None:
    if row is None:
        return None
    try:
        return _decode(row[0])
    except msgspec.DecodeError:
        return None  # a damaged entry is a miss, never a wrong verdict
