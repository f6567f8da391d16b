"""The gate's join engine: both sides' verdicts in DuckDB, lined up case by case.

Theory of operation
-------------------
The verdict files are read into columns (``_store/verdict_columns.py``: as strictly as the
readers, every bad line named ``file:line``) and appended to one DuckDB table, a row a
verdict: side (0 the baseline, 1 the candidate), its position in its side's stream, case
id, ``safe`` and code; a file DuckDB can read itself (``_store/duck_read.py``) stays in a
table of its own, and the view ``verdicts`` joins them all. Verdicts that cannot be made again from their columns are kept
whole in a second table, by side and position.

:meth:`DuckJoin.chunks` then lets SQL do the set work in one group-by on the case id:
each case's place in gate order (the position of the baseline's first verdict, or, for a
case only the candidate has, the baseline's length plus the candidate's first one), its
verdicts a side, each side's ``safe`` and code, and whether it is a *plain pass*: one
verdict a side, both safe, the same fully known legacy provenance, not excluded. Plain
passes are only counted (:attr:`DuckJoin.passes`) unless the report lists them. Every
other case is written in gate order to a table (an ordered insert, insertion order
kept: its ``rowid`` is then the case's rank, which the pages check), and read back a
page at a time as columns (``fetchnumpy``: no Python object per row but the values).
A page's cases of one legacy verdict a side are handed on as runs (``_core/runs.py``:
case ids and kinds, decided once per kind); the others as chunks, a side of one verdict
made again from its columns (``_store/engine_pages.py``). Only the cases with epochs or
a verdict kept whole have each verdict made on its own, from a second table in the same
order, paged alongside. The sans-io decider takes both
(:class:`~litmus_sandbox._core.decider.CaseDecider`).

What that group-by spills grows with the suite. Past what DuckDB's memory limit holds
(:func:`~litmus_sandbox._store.engine_sql.parts`), it runs in parts, by a hash of the
case id: each case falls wholly in one part, so each part's cases are exact, and they
are put in gate order together. The SQL is in ``_store/engine_sql.py``.

DuckDB runs under a memory limit (half of ``--memory-budget``: the rest is Python's, and
the report's), with its spill in a private temporary directory (``mkdtemp``, mode 0700)
removed on :meth:`DuckJoin.close`, on errors too. DuckDB and NumPy are imported here,
when a gate runs, never at the command line's start.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO

from litmus_sandbox._core.inputs import SideInputs
from litmus_sandbox._core.joins import Chunk
from litmus_sandbox._core.runs import LegacyRun
from litmus_sandbox._model.errors import UpstreamError
from litmus_sandbox._model.records import AnyVerdict, PolicyRecord
from litmus_sandbox._store import engine_pages, engine_sql
from litmus_sandbox._store.duck_read import read_plain_legacy
from litmus_sandbox._store.streams import ReadWarning
from litmus_sandbox._store.verdict_columns import (
    WHOLE,
    Columns,
    Kinds,
    read_columns,
    to_columns,
    unseal,
)

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


class DuckJoin:
    """Both sides of a gate in DuckDB (see the module docstring); a context manager.

    ``memory_budget``: bytes the gate may use; ``exclusions``: the excluded cases (never
    plain passes). Satisfies :class:`litmus_sandbox._core.suite.LinedUp`.
    """

    def __init__(self, *, memory_budget: int, exclusions: Mapping[str, str] = {}) -> None:
        self._dir = tempfile.mkdtemp(prefix="litmus-gate-")
        self._limit = max(_MIN_LIMIT, memory_budget // 2)
        self._excluded = frozenset(exclusions)
        self.kinds = Kinds()
        self._sizes = [0, 0]
        self._pending: list[tuple[int, Columns]] = []
        self._pending_rows = 0
        #: The view ``verdicts``: the verdicts decoded here, and each file DuckDB read.
        self._parts = ["SELECT side, pos, key, safe, code FROM decoded"]
        #: The tables of the files DuckDB read (each with its ``_kinds``).
        self._plain: list[str] = []
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
        # DuckDB draws a bar on standard output for a long query: where the report goes.
        db.execute("SET enable_progress_bar = false")
        db.execute(engine_sql.SCHEMA)
        if self._excluded:
            self._append("excluded", {"key": _objects(list(self._excluded))})
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
        self._flush()

        def plain(f: BinaryIO) -> bool:
            import duckdb

            table = f"plain{len(self._parts)}"
            try:
                rows = read_plain_legacy(lambda: self._db, f, path, table, self.kinds, inputs)
            except duckdb.Error as e:  # out of memory, or of room for the spill
                raise UpstreamError(f"the gate's join engine (DuckDB) failed: {e}") from e
            if rows is None:
                return False
            self._plain.append(table)
            self._parts.append(
                f"SELECT {side}::UTINYINT, ({self._sizes[side]} + p.rowid)::UBIGINT, p.key, "
                f"p.safe, k.code FROM {table} p JOIN {table}_kinds k ON p.h = k.h"
            )
            self._sizes[side] += rows
            return True

        read_columns(
            path,
            self.kinds,
            lambda c: self._add(side, c),
            warnings,
            policies,
            inputs=inputs,
            try_first=plain,
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
            # The columns of the parts end to end, at C speed (no Python loop per row).
            keys = _objects(list(chain.from_iterable(c.keys for c in parts)))
            safe = chain.from_iterable(c.safe for c in parts)
            codes = chain.from_iterable(c.codes for c in parts)
            self._append(
                "decoded",
                {
                    "side": np.full(n, side, dtype=np.uint8),
                    "pos": np.arange(start, start + n, dtype=np.uint64),
                    "key": keys,
                    "safe": np.fromiter(safe, dtype=np.bool_, count=n),
                    "code": np.fromiter(codes, dtype=np.int32, count=n),
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

    def chunks(self, *, plain: bool) -> Iterator[Chunk | LegacyRun]:
        """The cases in gate order, as chunks of (case ids, baseline sides, candidate
        sides), a side being a verdict, a list of verdicts (epochs) or None, and as runs
        of cases of one legacy verdict a side (``_core/runs.py``). ``plain``: the plain
        passes too; without it they are counted in :attr:`passes`."""
        self._flush()
        self._run(f"CREATE OR REPLACE VIEW verdicts AS {' UNION ALL '.join(self._parts)}")
        self._run("SET preserve_insertion_order = true")  # ``todo`` and ``odd`` in order
        cases = self._group(plain)
        last, odd_at = -1, 0
        for lo in range(0, cases, CHUNK):
            page = self._fetch(engine_sql.PAGE, {"lo": lo, "hi": lo + CHUNK})
            places = page["place"]
            if places[0] <= last or (len(places) > 1 and bool((places[1:] <= places[:-1]).any())):
                raise UpstreamError("the gate's join engine (DuckDB) lost the cases' order")
            last = int(places[-1])
            keys: list[str] = page["key"].tolist()
            kinded, segments = engine_pages.segments(self.kinds, keys, page, self._excluded)
            # The cases not in a run, as one chunk of the page (their verdicts with
            # epochs, or kept whole, fetched in one query), then cut between the runs.
            ks, bs, cs = keys, [], []
            if not kinded.all():
                if kinded.any():
                    rest = ~kinded
                    page = {name: column[rest] for name, column in page.items()}
                    ks = page["key"].tolist()
                bs = engine_pages.sides(self.kinds, ks, page["nb"], page["bw"])
                cs = engine_pages.sides(self.kinds, ks, page["nc"], page["cw"])
                odd_at = self._odd(ks, page, bs, cs, odd_at)
            at = 0
            for s, e, run in segments:
                if run is not None:
                    yield run
                else:
                    yield ks[at : at + e - s], bs[at : at + e - s], cs[at : at + e - s]
                    at += e - s

    def _group(self, plain: bool) -> int:
        """Write ``todo`` (the cases handed on, in gate order) and ``odd`` (the verdicts of
        those with epochs or a verdict kept whole); how many cases are handed on.

        Past what DuckDB holds in memory, the group-by runs in parts by a hash of the case
        id (each case wholly in one part), one after the other into ``grouped``, which
        bounds what it spills; the verdicts are dropped before ``grouped`` is sorted."""
        where = "" if plain else engine_sql.NOT_PLAIN
        params = {"baseline": self._sizes[0]}
        parts = engine_sql.parts(sum(self._sizes), self._limit, every_case=plain)
        if parts == 1:
            grouped = engine_sql.GROUPED.format(part="", where=where)
            self._run(f"CREATE TABLE todo AS {grouped} ORDER BY place", params)
            table = "todo"
        else:
            for k in range(parts):
                grouped = engine_sql.GROUPED.format(
                    part=f"WHERE hash(key) % {parts} = {k}", where=where
                )
                head = "CREATE TABLE grouped AS" if k == 0 else "INSERT INTO grouped"
                self._run(f"{head} {grouped}", params)
            table = "grouped"
        cases, verdicts, odd = self._counts(
            f"SELECT count(*), coalesce(sum(nb + nc), 0), count(*) FILTER ({engine_sql.IS_ODD}) "
            f"FROM {table} t"
        )
        # Every verdict is handed on but those of the plain passes, two each.
        self.passes = (sum(self._sizes) - verdicts) // 2
        if odd:
            self._run(engine_sql.ODD.format(todo=table, odd=engine_sql.IS_ODD))
        self._drop_verdicts()
        if table == "grouped":
            self._run("CREATE TABLE todo AS SELECT * FROM grouped ORDER BY place")
            self._run("DROP TABLE grouped")
        return cases

    def _drop_verdicts(self) -> None:
        """Drop the verdicts once lined up: their room (in memory, or spilled) is free for
        the sort and the pages."""
        self._run("DROP VIEW verdicts")
        for table in self._plain:
            self._run(f"DROP TABLE {table}")
            self._run(f"DROP TABLE {table}_kinds")
        self._run("DROP TABLE decoded")
        self._run("DROP TABLE whole")

    def _odd(self, keys: list[str], page: Any, bs: list[Any], cs: list[Any], at: int) -> int:
        """Fill in the sides of the page's cases with epochs or a verdict kept whole, from
        ``odd`` (the rows from ``at`` on); the row after theirs."""
        import numpy as np

        nb, nc = page["nb"], page["nc"]
        odd = (nb > 1) | (nc > 1) | (page["bw"] >> 1 == WHOLE) | (page["cw"] >> 1 == WHOLE)
        if not odd.any():
            return at
        rows = int((nb[odd] + nc[odd]).sum())
        got = self._fetch(engine_sql.ODD_PAGE, {"lo": at, "hi": at + rows})
        verdict = self.kinds.verdict
        made = [
            verdict(k, s, c) if c != WHOLE else unseal(r)
            for k, s, c, r in zip(
                got["key"].tolist(),
                got["safe"].tolist(),
                got["code"].tolist(),
                got["rec"].tolist(),
                strict=True,
            )
        ]
        row = 0
        for i in np.flatnonzero(odd).tolist():
            for sides, n in ((bs, int(nb[i])), (cs, int(nc[i]))):
                group = made[row : row + n]
                row += n
                if any(v.case_id != keys[i] for v in group):
                    raise UpstreamError("the gate's join engine (DuckDB) lost the cases' order")
                sides[i] = engine_pages.side_of(group)
        return at + rows

    def _run(self, sql: str, params: dict[str, Any] | None = None) -> None:
        import duckdb

        try:
            self._db.execute(sql, params)
        except duckdb.Error as e:  # out of memory, or of room for the spill
            raise UpstreamError(f"the gate's join engine (DuckDB) failed: {e}") from e

    def _counts(self, sql: str) -> tuple[int, ...]:
        import duckdb

        try:
            row = self._db.execute(sql).fetchone()
        except duckdb.Error as e:
            raise UpstreamError(f"the gate's join engine (DuckDB) failed: {e}") from e
        assert row is not None  # an aggregate has a row
        return tuple(map(int, row))

    def _fetch(self, sql: str, params: dict[str, Any]) -> dict[str, Any]:
        import duckdb

        try:
            return dict(self._db.execute(sql, params).fetchnumpy())
        except duckdb.Error as e:
            raise UpstreamError(f"the gate's join engine (DuckDB) failed: {e}") from e


def _objects(values: list[Any]) -> Any:
    """A NumPy array of Python objects (strings, bytes) for DuckDB to read."""
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
