"""The gate's join engine: both sides' verdicts in DuckDB, lined up case by case.

Theory of operation
-------------------
The verdict files are read into columns (``_store/verdict_columns.py``: as strictly as the
readers, every bad line named ``file:line``) and appended to one DuckDB table, a row a
verdict: side (0 the baseline, 1 the candidate), its position in its side's stream, case
id, ``safe`` and code. Verdicts that cannot be made again from their columns are kept
whole in a second table, by side and position.

:meth:`DuckJoin.chunks` then lets SQL do the set work in one group-by on the case id:
each case's place in gate order (the position of the baseline's first verdict, or, for a
case only the candidate has, the baseline's length plus the candidate's first one), its
epochs, and whether it is a *plain pass*: one verdict a side, both safe, the same fully
known legacy provenance, not excluded. Plain passes are only counted
(:attr:`DuckJoin.passes`) unless the report lists them; every other case comes back in
gate order, its verdicts in stream order, as the chunks the sans-io decider takes
(:class:`~litmus_sandbox._core.tally.CaseDecider`): only those become Python objects.

DuckDB runs under a memory limit (half of ``--memory-budget``: the rest is Python's, and
the report's), with its spill in a private temporary directory (``mkdtemp``, mode 0700)
removed on :meth:`DuckJoin.close`, on errors too. DuckDB and NumPy are imported here,
when a gate runs, never at the command line's start.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from litmus_sandbox._core.inputs import SideInputs
from litmus_sandbox._model.errors import UpstreamError
from litmus_sandbox._model.records import AnyVerdict, PolicyRecord
from litmus_sandbox._store.streams import ReadWarning
from litmus_sandbox._store.verdict_columns import WHOLE, Columns, Kinds, read_columns, to_columns

if TYPE_CHECKING:
    import duckdb

__all__ = ["DEFAULT_MEMORY_BUDGET", "DuckJoin"]

#: Bytes the gate may use by default (``--memory-budget``).
DEFAULT_MEMORY_BUDGET = 1 << 30
#: Rows appended to DuckDB at a time, and cases handed on at a time.
BATCH = 1 << 16
CHUNK = 16_384
#: The least memory DuckDB is given, whatever the budget.
_MIN_LIMIT = 64 << 20

_SCHEMA = """
CREATE TABLE verdicts (side UTINYINT, pos UBIGINT, key VARCHAR, safe BOOLEAN, code INTEGER);
CREATE TABLE whole (side UTINYINT, pos UBIGINT, rec BLOB);
CREATE TABLE excluded (key VARCHAR);
"""
# Gate order, epochs and plain passes in one group-by (see the module docstring).
_CASES = """
CREATE TABLE cases AS
SELECT key,
       coalesce(min(pos) FILTER (side = 0), $baseline + min(pos) FILTER (side = 1)) AS place,
       count(*) FILTER (side = 0) = 1 AND count(*) FILTER (side = 1) = 1
         AND min(code) >= 0 AND min(code) = max(code) AND bool_and(safe) AS plain
FROM verdicts GROUP BY key
"""
_EXCLUDED = "UPDATE cases SET plain = false WHERE plain AND key IN (SELECT key FROM excluded)"
_ROWS = """
SELECT v.key, v.side, v.safe, v.code, w.rec
FROM verdicts v JOIN cases c ON v.key = c.key
LEFT JOIN whole w ON v.code = {whole} AND w.side = v.side AND w.pos = v.pos
{where}
ORDER BY c.place, v.side, v.pos
"""


class DuckJoin:
    """Both sides of a gate in DuckDB (see the module docstring); a context manager.

    ``memory_budget``: bytes the gate may use; ``exclusions``: the excluded cases (never
    plain passes). Satisfies :class:`litmus_sandbox._core.suite.LinedUp`.
    """

    def __init__(self, *, memory_budget: int, exclusions: Mapping[str, str] = {}) -> None:
        self._dir = tempfile.mkdtemp(prefix="litmus-gate-")
        self._limit = max(_MIN_LIMIT, memory_budget // 2)
        self._exclusions = list(exclusions)
        self.kinds = Kinds()
        self._sizes = [0, 0]
        self._pending: list[tuple[int, Columns]] = []
        self._pending_rows = 0
        self._connection: duckdb.DuckDBPyConnection | None = None
        #: Plain passes counted in SQL (known once :meth:`chunks` is consumed).
        self.passes = 0

    @property
    def _db(self) -> duckdb.DuckDBPyConnection:
        """DuckDB, started at the first verdict (a file refused at once never starts it).

        Raises:
            UpstreamError: DuckDB could not start (no memory for it).
        """
        if self._connection is not None:
            return self._connection
        import duckdb

        try:
            db = duckdb.connect(
                ":memory:",
                config={
                    "memory_limit": f"{self._limit // 1024}KiB",
                    "temp_directory": os.path.join(self._dir, "spill"),
                    "threads": max(1, len(os.sched_getaffinity(0))),
                    "preserve_insertion_order": False,
                },
            )
        except duckdb.Error as e:
            raise UpstreamError(f"the gate's join engine (DuckDB) could not start: {e}") from e
        self._connection = db
        db.execute(_SCHEMA)
        if self._exclusions:
            self._append("excluded", {"key": _objects(self._exclusions)})
        return db

    def __enter__(self) -> DuckJoin:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close DuckDB and remove its spill."""
        try:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    # ------------------------------------------------------------ reading

    def add_file(
        self,
        side: int,
        path: str,
        warnings: list[ReadWarning] | None = None,
        policies: list[PolicyRecord] | None = None,
        inputs: SideInputs | None = None,
    ) -> None:
        """Append a verdict file's verdicts to ``side``, in file order (and what they say
        of how they were made to ``inputs``).

        Raises:
            RecordDecodeError, NewerVersionError: a bad line, named ``file:line``.
        """
        read_columns(
            path, self.kinds, lambda c: self._add(side, c), warnings, policies, inputs=inputs
        )
        self._flush()

    def add_verdicts(
        self, side: int, verdicts: Sequence[AnyVerdict], inputs: SideInputs | None = None
    ) -> None:
        """Append verdicts already decoded to ``side``, in order."""
        if inputs is not None:
            inputs.add(verdicts)
        self._add(side, to_columns(verdicts, self.kinds))
        self._flush()

    def _add(self, side: int, columns: Columns) -> None:
        self._pending.append((side, columns))
        self._pending_rows += len(columns)
        if self._pending_rows >= BATCH:
            self._flush()

    def _flush(self) -> None:
        import numpy as np

        pending, self._pending, self._pending_rows = self._pending, [], 0
        for side in (0, 1):
            parts = [c for s, c in pending if s == side]
            if not parts:
                continue
            start = self._sizes[side]
            n = sum(map(len, parts))
            self._sizes[side] = start + n
            keys = _objects([k for c in parts for k in c.keys])
            self._append(
                "verdicts",
                {
                    "side": np.full(n, side, dtype=np.uint8),
                    "pos": np.arange(start, start + n, dtype=np.uint64),
                    "key": keys,
                    "safe": np.array([s for c in parts for s in c.safe], dtype=np.bool_),
                    "code": np.array([x for c in parts for x in c.codes], dtype=np.int32),
                },
            )
            whole: list[tuple[int, bytes]] = []
            offset = start
            for c in parts:
                whole.extend((offset + i, rec) for i, rec in c.whole)
                offset += len(c)
            if whole:
                recs = np.empty(len(whole), dtype=object)
                recs[:] = [rec for _, rec in whole]
                self._append(
                    "whole",
                    {
                        "side": np.full(len(whole), side, dtype=np.uint8),
                        "pos": np.array([i for i, _ in whole], dtype=np.uint64),
                        "rec": recs,
                    },
                )

    def _append(self, table: str, columns: dict[str, Any]) -> None:
        import duckdb

        names = ", ".join(columns)
        db = self._db
        try:
            db.register("batch", columns)
            db.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM batch")
            db.unregister("batch")
        except duckdb.Error as e:  # out of memory, or of room for the spill
            raise UpstreamError(f"the gate's join engine (DuckDB) failed: {e}") from e

    # ------------------------------------------------------------ lining up

    def chunks(self, *, plain: bool) -> Iterator[tuple[list[str], list[Any], list[Any]]]:
        """The cases in gate order, as chunks of (case ids, baseline sides, candidate
        sides), a side being a verdict, a list of verdicts (epochs) or None. ``plain``:
        the plain passes too; without it they are counted in :attr:`passes`."""
        import duckdb

        self._flush()
        db = self._db
        try:
            db.execute(_CASES, {"baseline": self._sizes[0]})
            db.execute(_EXCLUDED)
            if not plain:
                row = db.execute("SELECT count(*) FROM cases WHERE plain").fetchone()
                self.passes = int(row[0]) if row else 0
            where = "" if plain else "WHERE NOT c.plain"
            cursor = db.execute(_ROWS.format(whole=WHOLE, where=where))
        except duckdb.Error as e:  # out of memory, or of room for the spill
            raise UpstreamError(f"the gate's join engine (DuckDB) failed: {e}") from e
        verdict = self.kinds.verdict
        keys: list[str] = []
        bs: list[Any] = []
        cs: list[Any] = []
        key: str | None = None
        sides: tuple[list[AnyVerdict], list[AnyVerdict]] = ([], [])
        while rows := cursor.fetchmany(BATCH):
            for k, side, safe, code, rec in rows:
                if k != key:
                    if key is not None:
                        keys.append(key)
                        bs.append(_side(sides[0]))
                        cs.append(_side(sides[1]))
                        if len(keys) >= CHUNK:
                            yield keys, bs, cs
                            keys, bs, cs = [], [], []
                    key, sides = k, ([], [])
                sides[side].append(verdict(k, safe, code) if code != WHOLE else pickle.loads(rec))
        if key is not None:
            keys.append(key)
            bs.append(_side(sides[0]))
            cs.append(_side(sides[1]))
        if keys:
            yield keys, bs, cs


def _side(verdicts: list[AnyVerdict]) -> AnyVerdict | list[AnyVerdict] | None:
    if not verdicts:
        return None
    return verdicts[0] if len(verdicts) == 1 else verdicts


def _objects(values: list[Any]) -> Any:
    """A NumPy array of Python objects (strings, bytes) for DuckDB to read."""
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
