"""A file of plain legacy verdicts read by DuckDB itself, as strictly as the readers.

Theory of operation
-------------------
Most verdict files a gate sees at scale are the reference harness's: one legacy verdict
a line, ``run_id``, ``safe`` and ``provenance``, nothing else. DuckDB's JSON reader parses
them on every core, but it is looser than our readers: it ignores unknown keys, accepts
trailing commas and skips blank lines. So a file is taken here only when what DuckDB
parsed *and* three counts of the file's bytes prove that each line is exactly such a
record; any other file is left to the readers (``verdict_columns.read_columns``), which
name the bad line (``file:line``). Nothing is guessed: a file this module is unsure of
costs time, never a record.

The proof. DuckDB reads each line's three members as JSON text. It refuses a line that
is not one JSON object (two records on a line, a torn or malformed line, a duplicate
key, a control character, bad UTF-8), so a line gives at most one row. One aggregate
over the rows, grouped by the provenance's text, says whether every ``run_id`` is a
string and every ``safe`` is ``true`` or ``false``; each distinct provenance is then
decoded strictly here (no unknown, duplicate or null member, no colon or comma inside a
value). A line's object holds at least the members it is known to hold, and every
member brings one colon and every member but the first one comma. Colons and commas
inside strings, unknown keys, ``null`` members and trailing commas only add to the
counts. So when the file's newlines equal the rows, its colons and commas equal those
the rows' members imply, no line has anything else, and no line was skipped.

The rows stay in a table of their own, in the file's order (the scan that keeps them
preserves it, so a row's ``rowid`` is its line), beside a small table of each
provenance's code (``verdict_columns.Kinds``): the engine reads them through a view,
never copying them. The byte counts are taken by NumPy in a thread while DuckDB
scans (both leave the GIL), a slice of the file at a time.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec

from litmus_sandbox._core.inputs import SideInputs
from litmus_sandbox._model.records import LegacyProvenance
from litmus_sandbox._store.files import max_line_bytes
from litmus_sandbox._store.locations import local_path
from litmus_sandbox._store.verdict_columns import Kinds, legacy_line

if TYPE_CHECKING:
    import duckdb

__all__ = ["read_plain_legacy"]

#: Distinct provenances a file may have and still be taken here.
MAX_KINDS = 1 << 16
#: Files smaller than this are left to the readers, as fast there as DuckDB's scan.
MIN_BYTES = 1 << 20
#: Bytes of the file compared at a time.
_SLICE = 1 << 22
_FIELDS = LegacyProvenance.__struct_fields__
_provenance = msgspec.json.Decoder(LegacyProvenance)
#: Characters DuckDB would read as a glob in a path.
_GLOB = frozenset("*?[]{}")

_SOURCE = (
    "read_ndjson($path, columns = {'run_id': 'JSON', 'safe': 'JSON', 'provenance': "
    "'STRUCT(truncate_on_refusal JSON, truncate_on_empty_tool_result JSON, "
    "steps_covered JSON, judge_version JSON)'}, format = 'newline_delimited', records = true)"
)
# The rows in file order (``rowid``): a ``run_id`` that is not a string, or a ``safe``
# that is not a boolean, is NULL; the provenance is known by a hash of its members' JSON
# text (and of whether it is there at all).
_ROWS = f"""
CREATE TABLE __table__ AS
SELECT CASE WHEN starts_with(run_id, '"') THEN run_id ->> '$' END AS key,
       CASE safe WHEN 'true' THEN true WHEN 'false' THEN false END AS safe,
       hash(provenance, provenance IS NULL) AS h
FROM {_SOURCE}
"""
# Each distinct provenance: its hash, its first line, its rows, and whether any of them
# is bad.
_KINDS = """
SELECT h, min(rowid), count(*), bool_or(key IS NULL OR safe IS NULL) FROM __table__ GROUP BY h
"""


@dataclass
class _Bytes:
    """What the counting thread found of the file's bytes."""

    newlines: int = 0
    colons: int = 0
    commas: int = 0
    longest: int = 0
    #: Where each line ends (its newline's offset), for a line named by its number.
    ends: Any = None
    error: BaseException | None = None

    def line(self, fd: int, number: int) -> bytes:
        """Line ``number`` (from 0) of the file ``fd``, without its newline."""
        start = int(self.ends[number - 1]) + 1 if number else 0
        return os.pread(fd, int(self.ends[number]) - start, start)


def read_plain_legacy(
    connect: Callable[[], duckdb.DuckDBPyConnection],
    f: BinaryIO,
    path: str,
    table: str,
    kinds: Kinds,
    inputs: SideInputs | None = None,
) -> int | None:
    """Read the file ``path``, open as ``f``, into the table ``table`` of the DuckDB
    ``connect`` gives (called only for a file that may be plain) if it is plain legacy
    verdicts (see the module docstring): its rows (``key``, ``safe``, ``h``; ``rowid``
    the line, from 0) and ``{table}_kinds`` (``h``, ``code``: each provenance's code in
    ``kinds``). The number of rows; else None, and no table is left (a file DuckDB
    refuses included: the readers then say what is wrong with it).

    Raises:
        duckdb.Error: out of memory or of room for the spill, while appending.
    """
    import duckdb

    local = _plain_local_file(path)
    if local is None:
        return None
    opened = os.fstat(f.fileno())
    if opened.st_size < max(1, MIN_BYTES) or not os.path.samestat(opened, os.stat(local)):
        return None  # small or empty, or not the file DuckDB would read
    fd, size = f.fileno(), opened.st_size
    if os.pread(fd, 1, size - 1) != b"\n" or os.pread(fd, 3, 0) == b"\xef\xbb\xbf":
        return None  # a torn last line (a warning), or a byte-order mark
    db = connect()
    found = _Bytes()
    counter = threading.Thread(target=_count, args=(fd, size, found), daemon=True)
    try:
        counter.start()
        counting = True
    except RuntimeError:  # no room for a thread: count once DuckDB is done
        counting = False
    try:
        db.execute("SET preserve_insertion_order = true")  # rowid: the line
        db.execute(_ROWS.replace("__table__", table), {"path": local})
        groups = db.execute(_KINDS.replace("__table__", table)).fetchall()
    except duckdb.InterruptException:
        raise KeyboardInterrupt from None  # Ctrl-C: not a file for the readers to try
    except duckdb.Error:
        groups = None  # not JSON lines: the readers will say where
    finally:
        db.execute("SET preserve_insertion_order = false")
        if counting:
            counter.join()
        else:
            _count(fd, size, found)
    taken = False
    try:
        if isinstance(found.error, MemoryError):
            return None  # the readers need less at a time
        if found.error is not None:
            raise found.error
        proven = None
        if groups is not None and len(groups) <= MAX_KINDS:
            proven = _prove(groups, found, fd, max_line_bytes(), kinds)
        if proven is None:
            return None
        codes, provenances, rows = proven
        db.register("proven_kinds", codes)
        try:
            db.execute(f"CREATE TABLE {table}_kinds AS SELECT h, code FROM proven_kinds")
        finally:
            db.unregister("proven_kinds")
        taken = True
    finally:
        found.ends = None
        if not taken:
            db.execute(f"DROP TABLE IF EXISTS {table}")
    if inputs is not None:
        inputs.add_legacy(rows, provenances)
    return rows


def _plain_local_file(path: str) -> str | None:
    """The absolute path of ``path`` if it is a regular local file DuckDB reads as it is
    named (no glob character, no ``~``), else None."""
    try:
        local = local_path(path)
    except Exception:  # a URL the readers refuse: let them say why
        return None
    if local is None or _GLOB.intersection(local):
        return None
    local = os.path.abspath(local)
    try:
        if not stat.S_ISREG(os.stat(local).st_mode):
            return None
    except OSError:
        return None
    return local


def _count(fd: int, size: int, out: _Bytes) -> None:
    """Count the newlines, colons and commas of the file ``fd`` (``size`` bytes), read a
    slice at a time into one buffer (a slice that stays in the cache, and no fresh pages
    to fault in: three times as fast as a new buffer a slice); where its lines end, and
    the longest line."""
    import numpy as np

    try:
        ends = []
        into = bytearray(min(_SLICE, size))  # what the file is read into
        view = memoryview(into)
        buffer = np.frombuffer(into, dtype=np.uint8)  # the same bytes, for NumPy
        hits = np.empty(len(buffer), dtype=np.bool_)
        for at in range(0, size, _SLICE):
            want = min(_SLICE, size - at)
            n = os.preadv(fd, [view[:want]], at)
            if n < want:  # the file shrank: no proof, the readers say
                out.newlines = -1
                return
            part, found = buffer[:n], hits[:n]
            out.colons += int(np.count_nonzero(np.equal(part, 0x3A, out=found)))
            out.commas += int(np.count_nonzero(np.equal(part, 0x2C, out=found)))
            lines = np.flatnonzero(np.equal(part, 0x0A, out=found))
            lines += at
            ends.append(lines)
        out.ends = np.concatenate(ends) if ends else np.empty(0, dtype=np.intp)
        out.newlines = len(out.ends)
        if out.newlines:
            out.longest = max(int(out.ends[0]) + 1, int(np.diff(out.ends).max(initial=0)))
    except BaseException as e:  # raised again by the caller
        out.error = e.with_traceback(None)


def _prove(
    groups: list[tuple[Any, ...]], found: _Bytes, fd: int, cap: int, kinds: Kinds
) -> tuple[dict[str, Any], list[LegacyProvenance], int] | None:
    """The codes of the distinct provenances (a table for DuckDB, by hash), the
    provenances, and the rows, if the groups and the byte counts prove the file plain
    (see the module docstring); else None."""
    import numpy as np

    if found.longest >= cap:
        return None  # a line the readers would refuse as too long
    rows = colons = commas = 0
    hashes: list[int] = []
    codes: list[int] = []
    provenances: list[LegacyProvenance] = []
    for h, first, n, bad in groups:
        if bad or first >= found.newlines:
            return None
        try:
            raw = bytes(legacy_line.decode(found.line(fd, first)).provenance)
            p = _provenance.decode(raw) if raw else LegacyProvenance()
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        members = sum(getattr(p, name) is not None for name in _FIELDS) if raw else -1
        if raw and (raw.count(b":") != members or raw.count(b",") != max(members - 1, 0)):
            return None  # a null member, or a colon or comma inside a value
        # run_id and safe; and the provenance key with its own members.
        rows += n
        colons += n * (2 + 1 + members)
        commas += n * (1 + (members >= 0) + max(members - 1, 0))
        hashes.append(h)
        codes.append(kinds.code(p))
        provenances.append(p)
    if (rows, colons, commas) != (found.newlines, found.colons, found.commas):
        return None
    table = {"h": np.array(hashes, dtype=np.uint64), "code": np.array(codes, dtype=np.int32)}
    return table, provenances, rows
