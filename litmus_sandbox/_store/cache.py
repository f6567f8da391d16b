"""The step-verdict cache (SQLite), with claims on the steps in flight.

Keyed by judge fingerprint + step content hash + context hash, so one judge's verdicts
are never served for another, and a re-score pays only for steps never judged under
that fingerprint. Only successful judgments are stored: errors are never cached. Beside
them, the results of emulated tools (``emulation_cache.py``).

Theory of operation
-------------------
One connection per :class:`VerdictCache`, in autocommit mode, shared by threads under a
lock. A read is one statement. Every write is a ``BEGIN IMMEDIATE`` transaction: it takes
the database's write lock before it reads, so a claim's look-then-take is atomic between
the processes that share the file (a writer waits up to ``_BUSY_TIMEOUT`` for the lock).

Beside the verdicts, a claims table holds one row per step some scorer is judging: its
holder and when the claim expires (see :mod:`litmus_sandbox._store.claims`, whose
:class:`StepClaims` this implements). :meth:`VerdictCache.claim` serves a stored verdict,
takes a free, expired or dead holder's claim, or says until when another holder's claim
lives; :meth:`~VerdictCache.put_many` stores judgments and drops their claims in one
transaction; :meth:`~VerdictCache.refresh` and :meth:`~VerdictCache.release` extend and
drop claims. Time is the ``clock`` given (wall-clock seconds by default, which every
process of the host shares).

Any SQLite failure - a full disk, an I/O error, a lock held past the timeout - is a
:class:`CacheError` naming the cache's path and what failed.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import msgspec

from litmus_sandbox._core.emulation import EmulationAnswer, EmulationKey
from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import CacheError, ConfigError
from litmus_sandbox._store.cache_urls import local_files
from litmus_sandbox._store.claims import (
    CacheKey,
    Claim,
    claim_ttl_from_env,
    claimable,
    holder_alive,
    new_owner,
)
from litmus_sandbox._store.emulation_cache import EMULATION_TABLE, decode_answer, encode_answer

__all__ = ["CacheKey", "VerdictCache"]

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS step_verdicts (
    judge TEXT NOT NULL,
    step TEXT NOT NULL,
    context TEXT NOT NULL,
    judgment BLOB NOT NULL,
    PRIMARY KEY (judge, step, context)
) WITHOUT ROWID
""",
    """
CREATE TABLE IF NOT EXISTS step_claims (
    judge TEXT NOT NULL,
    step TEXT NOT NULL,
    context TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (judge, step, context)
) WITHOUT ROWID
""",
    EMULATION_TABLE,
)
_WHERE = "judge=? AND step=? AND context=?"
_GET = f"SELECT judgment FROM step_verdicts WHERE {_WHERE}"
_PUT = "INSERT OR REPLACE INTO step_verdicts VALUES (?, ?, ?, ?)"
_HOLDER = f"SELECT owner, expires FROM step_claims WHERE {_WHERE}"
_TAKE = "INSERT OR REPLACE INTO step_claims VALUES (?, ?, ?, ?, ?)"
_REFRESH = f"UPDATE step_claims SET expires=? WHERE {_WHERE} AND owner=?"
_DROP = f"DELETE FROM step_claims WHERE {_WHERE} AND owner=?"
_GET_EMULATED = (
    "SELECT answer FROM emulated_results WHERE emulator=? AND tool=? AND args=? AND context=?"
)
_PUT_EMULATED = "INSERT OR REPLACE INTO emulated_results VALUES (?, ?, ?, ?, ?)"
#: Seconds a write waits for another process's write lock.
_BUSY_TIMEOUT = 30.0

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(StepJudgment).decode


class VerdictCache:
    """A persistent map ``(judge, step hash, context hash) -> StepJudgment``, with claims
    on steps in flight (see the module docstring).

    Args:
        path: the SQLite file (made with its folder when missing), or ``:memory:``.
        claim_ttl: seconds a claim lives unless refreshed (None: ``$LITMUS_CACHE_CLAIM_TTL``,
            else 30).
        clock: the time claims expire by (shared by every process of the cache).
        owner: this scorer's name in its claims (None: host, pid and a nonce).
        alive: whether a claim's holder may still run (False: its claim is taken at once).

    Raises:
        ConfigError: ``path`` is not a verdict cache, or the claims' lifetime variable is
            not a positive number.
        CacheError: the file cannot be opened or set up (a full disk, an I/O error).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        claim_ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        alive: Callable[[str], bool] = holder_alive,
    ) -> None:
        self.path = os.fspath(path)
        self.location = self.path
        self.claim_ttl = claim_ttl if claim_ttl is not None else claim_ttl_from_env()
        self.owner = owner if owner is not None else new_owner()
        self._clock = clock
        self._alive = alive
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
                for table in _SCHEMA:
                    self._db.execute(table)
        except CacheError as exc:
            self._db.close()
            if isinstance(exc.__context__, sqlite3.OperationalError):
                raise
            problem = exc.__context__
            raise ConfigError(f"{self.path}: not a usable verdict cache ({problem})") from None

    def clock(self) -> float:
        """The time claims expire by."""
        return self._clock()

    # ------------------------------------------------------------ verdicts

    def get(self, key: CacheKey) -> StepJudgment | None:
        with self._lock, self._guard("reading a verdict"):
            row = self._db.execute(_GET, key).fetchone()
        return _judgment(row)

    def get_many(self, keys: Sequence[CacheKey]) -> list[StepJudgment | None]:
        with self._lock, self._guard("reading verdicts"):
            rows = [self._db.execute(_GET, key).fetchone() for key in keys]
        return [_judgment(row) for row in rows]

    def put(self, key: CacheKey, judgment: StepJudgment) -> None:
        self.put_many([(key, judgment)])

    def put_many(self, items: Iterable[tuple[CacheKey, StepJudgment]]) -> None:
        """Store several judgments, and drop this scorer's claims on their steps, in one
        transaction."""
        rows = [(*key, _encode(judgment)) for key, judgment in items]
        if not rows:
            return
        with self._write(f"storing {len(rows)} judgment(s)") as db:
            db.executemany(_PUT, rows)
            db.executemany(_DROP, [(*row[:3], self.owner) for row in rows])

    def missing(self, keys: Iterable[CacheKey]) -> int:
        """How many distinct keys are not cached (the judge calls a score would take)."""
        unique = set(keys)
        with self._lock, self._guard("reading verdicts"):
            return sum(1 for key in unique if self._db.execute(_GET, key).fetchone() is None)

    def files(self) -> list[Path]:
        """The database file and SQLite's companions (its journal, WAL and shared memory)."""
        return local_files(Path(self.path))

    def __len__(self) -> int:
        with self._lock, self._guard("counting verdicts"):
            (n,) = self._db.execute("SELECT COUNT(*) FROM step_verdicts").fetchone()
        return int(n)

    # ------------------------------------------------------------ emulated results

    def get_emulation(self, key: EmulationKey) -> EmulationAnswer | None:
        """The emulated result kept for ``key`` (``emulation_cache.py``), or None."""
        with self._lock, self._guard("reading an emulated result"):
            row = self._db.execute(_GET_EMULATED, key).fetchone()
        return None if row is None else decode_answer(row[0])

    def put_emulation(self, key: EmulationKey, answer: EmulationAnswer) -> None:
        """Keep one emulated result."""
        with self._write("storing an emulated result") as db:
            db.execute(_PUT_EMULATED, (*key, encode_answer(answer)))

    # ------------------------------------------------------------ claims

    def claim(self, keys: Sequence[CacheKey]) -> list[Claim]:
        """For each key: its verdict when stored; else this scorer's claim when the step
        is unclaimed, claimed by this scorer, expired or held by a dead process; else
        until when its live holder's claim lasts. One transaction for all ``keys``."""
        out: list[Claim] = []
        if not keys:
            return out
        with self._write(f"claiming {len(keys)} step(s)") as db:
            now = self._clock()
            until = now + self.claim_ttl
            for key in keys:
                judgment = _judgment(db.execute(_GET, key).fetchone())
                if judgment is not None:
                    out.append(Claim(judgment=judgment))
                    continue
                row = db.execute(_HOLDER, key).fetchone()
                holder, expires = (str(row[0]), float(row[1])) if row else (None, 0.0)
                if claimable(holder, expires, self.owner, now, self._alive):
                    db.execute(_TAKE, (*key, self.owner, until))
                    out.append(Claim(held=True, until=until))
                else:
                    out.append(Claim(until=expires))
        return out

    def refresh(self, keys: Iterable[CacheKey]) -> None:
        """Extend this scorer's claims on ``keys`` to a full lifetime from now."""
        keys = list(keys)
        if not keys:
            return
        with self._write(f"refreshing {len(keys)} claim(s)") as db:
            until = self._clock() + self.claim_ttl
            db.executemany(_REFRESH, [(until, *key, self.owner) for key in keys])

    def release(self, keys: Iterable[CacheKey]) -> None:
        """Drop this scorer's claims on ``keys``: another scorer may judge them now."""
        keys = list(keys)
        if not keys:
            return
        with self._write(f"releasing {len(keys)} claim(s)") as db:
            db.executemany(_DROP, [(*key, self.owner) for key in keys])

    def claims(self) -> list[tuple[CacheKey, str, float]]:
        """Every claim in the cache: step, holder, expiry (for tests and diagnostics)."""
        with self._lock, self._guard("reading claims"):
            rows = self._db.execute("SELECT * FROM step_claims").fetchall()
        return [((str(j), str(s), str(c)), str(o), float(e)) for j, s, c, o, e in rows]

    # ------------------------------------------------------------ plumbing

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
