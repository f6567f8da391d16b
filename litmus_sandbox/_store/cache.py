"""The step-verdict cache (SQLite).

Keyed by judge fingerprint + step content hash + context hash, so one judge's verdicts
are never served for another, and a re-score pays only for steps never judged under
that fingerprint. Only successful judgments are stored: errors are never cached.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

import msgspec

from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import ConfigError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS step_verdicts (
    judge TEXT NOT NULL,
    step TEXT NOT NULL,
    context TEXT NOT NULL,
    judgment BLOB NOT NULL,
    PRIMARY KEY (judge, step, context)
) WITHOUT ROWID
"""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(StepJudgment).decode

CacheKey = tuple[str, str, str]


class VerdictCache:
    """A persistent map ``(judge, step hash, context hash) -> StepJudgment``."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:") -> None:
        self.path = os.fspath(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # A crash may lose the last few entries; that only costs re-judging them,
            # while a full fsync per judged step made on-disk scoring ten times slower.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{self.path}: not a usable verdict cache ({exc})") from None
        self._lock = threading.Lock()

    def get(self, key: CacheKey) -> StepJudgment | None:
        with self._lock:
            row = self._db.execute(
                "SELECT judgment FROM step_verdicts WHERE judge=? AND step=? AND context=?", key
            ).fetchone()
        if row is None:
            return None
        try:
            return _decode(row[0])
        except msgspec.DecodeError:
            return None  # a damaged entry is a miss, never a wrong verdict

    def put(self, key: CacheKey, judgment: StepJudgment) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO step_verdicts VALUES (?, ?, ?, ?)",
                (*key, _encode(judgment)),
            )

    def put_many(self, items: Iterable[tuple[CacheKey, StepJudgment]]) -> None:
        """Store several judgments in one transaction."""
        rows = [(*key, _encode(judgment)) for key, judgment in items]
        if not rows:
            return
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO step_verdicts VALUES (?, ?, ?, ?)", rows)

    def missing(self, keys: Iterable[CacheKey]) -> int:
        """How many distinct keys are not cached (the judge calls a score would take)."""
        unique = set(keys)
        with self._lock:
            return sum(
                1
                for key in unique
                if self._db.execute(
                    "SELECT 1 FROM step_verdicts WHERE judge=? AND step=? AND context=?", key
                ).fetchone()
                is None
            )

    def __len__(self) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(*) FROM step_verdicts").fetchone()
        return int(n)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> VerdictCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
