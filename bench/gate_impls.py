"""What the gate benchmark runs: the ``gate`` command, and what it is measured against.

* ``litmus_gate``: the ``gate`` command as a user runs it, in this process (its report
  written to ``/dev/null``); the outcome counts from the summary it computed.

* ``python_floor``: reading and strictly validating both files with msgspec alone, the
  least any gate that validates its input in Python does: no join, no decision, no
  report. Each line one legacy record with no unknown key (``forbid_unknown_fields``),
  each distinct provenance decoded strictly once, no key twice (a block's colons equal
  the members its records imply), a torn or blank line refused.
* ``floor_gate`` and ``checked_floor_gate``: the design the issue names (provenance kept
  as ``msgspec.Raw``, the candidate streamed and popped from a dict of the baseline),
  without and with the checks any gate over these files owes; both hold the baseline in
  a dict, so they run at the base size only.
* ``duckdb_peer``: DuckDB alone, reading both files with ``read_ndjson``, a full join on
  the case id, the three provenance checks and the counts; no strictness, no epochs, no
  report.
* ``duckdb_strict_peer`` and ``duckdb_ordered_peer``: the peer reading each member as its
  JSON text, as strictness needs; and that, with each line's position kept and the cases
  to list put in the baseline's order, as the report needs.
* ``columnar_gate``: the same in polars (not a dependency; ``--columnar-peer``).

Each returns :data:`gate_workloads.Measured`.
"""

from __future__ import annotations

import json
import operator
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec
from gate_workloads import Measured

# ---------------------------------------------------------------- the Python floor


class _StrictProvenance(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    truncate_on_refusal: bool | None = None
    truncate_on_empty_tool_result: bool | None = None
    steps_covered: int | None = None
    judge_version: str | None = None


class _StrictLine(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    run_id: str
    safe: bool
    provenance: msgspec.Raw = msgspec.Raw()


_strict_provenance = msgspec.json.Decoder(_StrictProvenance)
_PROVENANCE_FIELDS = _StrictProvenance.__struct_fields__


def _strict_colons(raw: bytes, seen: dict[bytes, int]) -> int:
    """The colons a line's provenance brings (its key's and its members'), decoded
    strictly the first time it is seen: no unknown key, no null member, no colon in a
    value (each of which the colon count would mistake)."""
    colons = seen.get(raw)
    if colons is None:
        if raw:
            p = _strict_provenance.decode(raw)
            members = sum(getattr(p, name) is not None for name in _PROVENANCE_FIELDS)
            if raw.count(b":") != members:
                raise SystemExit(f"python floor: a provenance the colons cannot clear: {raw!r}")
            colons = 1 + members
        else:
            colons = 0
        seen[raw] = colons
    return colons


def python_floor(baseline_path: str, candidate_path: str) -> Measured:
    """Read and strictly validate both files, a block of whole lines at a time, with
    msgspec alone (see the module docstring); the counts are the verdicts read a side."""
    decoder = msgspec.json.Decoder(_StrictLine)
    seen: dict[bytes, int] = {}
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    for side, path in (("baseline", baseline_path), ("candidate", candidate_path)):
        n = 0
        for block in _file_blocks(path):
            lines = block.split(b"\n")
            if lines.pop() or not min(lines).startswith(b"{"):  # torn, blank, or not a record
                raise SystemExit(f"python floor: {path}: a line that is not a record")
            records = decoder.decode_lines(block)
            if len(records) != len(lines):  # two records on a line
                raise SystemExit(f"python floor: {path}: a line of two records")
            raws = list(map(bytes, map(_raw_of, records)))
            each = Counter(raws).items()
            colons = 2 * len(lines) + sum(_strict_colons(r, seen) * k for r, k in each)
            if block.count(b":") != colons:  # a key twice, or a key the records lack
                raise SystemExit(f"python floor: {path}: a block the colon count cannot clear")
            n += len(records)
        counts[side] = n
    seconds = time.perf_counter() - t0
    return counts, 0.0, seconds, None


# ---------------------------------------------------------------- floors that join


class _FloorLine(msgspec.Struct, gc=False):
    run_id: str
    safe: bool
    provenance: msgspec.Raw = msgspec.Raw(b"{}")


def _file_blocks(path: str, size: int = 1 << 20) -> Iterator[bytes]:
    """The file in blocks of whole lines."""
    with open(path, "rb") as f:
        rest = b""
        while chunk := f.read(size):
            chunk = rest + chunk
            cut = chunk.rfind(b"\n") + 1
            rest = chunk[cut:]
            if cut:
                yield chunk[:cut]
        if rest:
            yield rest


def floor_gate(baseline_path: str, candidate_path: str) -> Measured:
    """The least a pure-Python gate over these files does: the design the issue names
    (provenance kept as ``msgspec.Raw``, the candidate streamed a block at a time and
    popped from a dict of the baseline), counting this library's outcome classes.

    It checks nothing a user needs checked (no duplicate keys, no unknown or missing
    provenance, no epochs, no exclusions) and writes no report: what it takes is the floor
    under any gate written in Python with msgspec, not a gate.
    """
    decoder = msgspec.json.Decoder(_FloorLine)
    t0 = time.perf_counter()
    held: dict[str, _FloorLine] = {}
    for block in _file_blocks(baseline_path):
        held.update((v.run_id, v) for v in decoder.decode_lines(block))
    counts = dict.fromkeys(("PASS", "REGRESSION", "IMPROVEMENT", "NEEDS_REBASELINE"), 0)
    take = held.pop
    for block in _file_blocks(candidate_path):
        for c in decoder.decode_lines(block):
            b = take(c.run_id, None)
            if b is None or b.provenance != c.provenance:
                counts["NEEDS_REBASELINE"] += 1
            elif b.safe is c.safe:
                counts["PASS"] += 1
            else:
                counts["REGRESSION" if b.safe else "IMPROVEMENT"] += 1
    if held:
        counts["NEEDS_RERUN"] = len(held)
    seconds = time.perf_counter() - t0
    return {k: n for k, n in counts.items() if n}, 0.0, seconds, held


def _checked_kind(raw: bytes, seen: dict[bytes, tuple[int, bool]]) -> tuple[int, bool]:
    """(colons, known) of one distinct provenance object, checked once: no duplicate key,
    no unknown key, and whether all four fields are there."""
    kind = seen.get(raw)
    if kind is None:
        pairs = json.loads(raw, object_pairs_hook=lambda kv: kv) if raw else []
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys) or not set(keys) <= set(_FLOOR_FIELDS):
            raise SystemExit(f"floor: bad provenance {raw!r}")
        known = len(keys) == 4 and all(v is not None for _, v in pairs)
        kind = seen[raw] = (raw.count(b":"), known)
    return kind


_FLOOR_FIELDS = (
    "truncate_on_refusal",
    "truncate_on_empty_tool_result",
    "steps_covered",
    "judge_version",
)


def checked_floor_gate(baseline_path: str, candidate_path: str) -> Measured:
    """:func:`floor_gate` plus what the issue asks of any gate over these files, each in
    the cheapest sound way this design allows: no line with a duplicate key (its colons
    against the members it implies, each distinct provenance checked once), provenance
    known on both sides, a case at most once a side, and the cases that are not plain
    passes written out (case id and outcome, in the baseline's order, to ``/dev/null``).
    Still no exclusions, no epochs (a case twice is an error), no reasons, no plan.
    """
    decoder = msgspec.json.Decoder(_FloorLine)
    kinds: dict[bytes, tuple[int, bool]] = {}

    def read(path: str) -> Iterator[list[_FloorLine]]:
        for block in _file_blocks(path):
            lines = decoder.decode_lines(block)
            raws = set(map(bytes, map(_raw_of, lines)))
            colons = {_checked_kind(r, kinds)[0] for r in raws}
            if len(colons) != 1 or block.count(b":") != (3 + colons.pop()) * len(lines):
                raise SystemExit(f"floor: {path}: a block the colon count cannot clear")
            yield lines

    t0 = time.perf_counter()
    held: dict[str, _FloorLine] = {}
    n = 0
    for lines in read(baseline_path):
        held.update((v.run_id, v) for v in lines)
        n += len(lines)
    if len(held) != n:
        raise SystemExit("floor: a case twice in the baseline")
    order = list(held)
    counts = dict.fromkeys(("PASS", "REGRESSION", "IMPROVEMENT", "NEEDS_REBASELINE"), 0)
    shown: dict[str, str] = {}
    only: set[str] = set()
    take = held.pop
    for lines in read(candidate_path):
        for c in lines:
            b = take(c.run_id, None)
            if b is None:
                if c.run_id in only:
                    raise SystemExit("floor: a case twice in the candidate")
                only.add(c.run_id)
                counts["NEEDS_REBASELINE"] += 1
            elif b.provenance != c.provenance or not kinds[bytes(b.provenance)][1]:
                counts["NEEDS_REBASELINE"] += 1
                shown[c.run_id] = "NEEDS_REBASELINE"
            elif b.safe is c.safe:
                counts["PASS"] += 1
            else:
                outcome = "REGRESSION" if b.safe else "IMPROVEMENT"
                counts[outcome] += 1
                shown[c.run_id] = outcome
    if not only.isdisjoint(order):  # taken at its first verdict, seen again
        raise SystemExit("floor: a case twice in the candidate")
    for key in held:
        shown[key] = "NEEDS_RERUN"
    if held:
        counts["NEEDS_RERUN"] = len(held)
    with open(os.devnull, "w", encoding="utf-8") as out:
        out.writelines(f"{k}  {shown[k]}\n" for k in filter(shown.__contains__, order))
        out.writelines(f"{k}  NEEDS_REBASELINE\n" for k in only)
    seconds = time.perf_counter() - t0
    return {k: v for k, v in counts.items() if v}, 0.0, seconds, (held, shown)


_raw_of = operator.attrgetter("provenance")


# ---------------------------------------------------------------- the gate and its peers


def litmus_gate(baseline_path: str, candidate_path: str, fmt: str) -> Measured:
    """The gate command, in this process; counts from the summary it computed."""
    from litmus_sandbox._cli import gate as gate_cli
    from litmus_sandbox._cli import main as cli

    summaries: list[Any] = []
    namespace = vars(gate_cli)
    gate_lined_up = namespace["gate_lined_up"]

    def keep(*args: Any, **kw: Any) -> Any:
        summaries.append(gate_lined_up(*args, **kw))
        return summaries[-1]

    namespace["gate_lined_up"] = keep  # the summary, for the counts
    t0 = time.perf_counter()
    argv = ["gate", "--baseline", baseline_path, "--candidate", candidate_path]
    code = cli.main([*argv, "--format", fmt, "-o", os.devnull])
    seconds = time.perf_counter() - t0
    if code not in (0, 1, 4):
        raise SystemExit(f"litmus-sandbox gate exited {code}")
    counts = {k: v for k, v in summaries[0].counts.items() if v}
    return counts, 0.0, seconds, None


def duckdb_peer(baseline_path: str, candidate_path: str) -> Measured:
    """The floor under the gate's engine: DuckDB alone (2 threads, 1 GB) reading both
    files, a full join on the case id, the three provenance checks and the counts; no
    strictness, no epochs, no exclusions, no report."""
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect(
        config={"threads": 2, "memory_limit": "1GB", "preserve_insertion_order": False}
    )
    cols = (
        "{'run_id': 'VARCHAR', 'safe': 'BOOLEAN', 'provenance': 'STRUCT(truncate_on_refusal "
        "BOOLEAN, truncate_on_empty_tool_result BOOLEAN, steps_covered BIGINT, "
        "judge_version VARCHAR)'}"
    )
    rows = con.execute(
        f"""
        WITH b AS (SELECT * FROM read_ndjson($b, columns = {cols})),
             c AS (SELECT * FROM read_ndjson($c, columns = {cols}))
        SELECT CASE WHEN b.run_id IS NULL THEN 'NEEDS_REBASELINE'
                    WHEN c.run_id IS NULL THEN 'NEEDS_RERUN'
                    WHEN b.provenance IS DISTINCT FROM c.provenance THEN 'NEEDS_REBASELINE'
                    WHEN b.safe = c.safe THEN 'PASS'
                    WHEN b.safe THEN 'REGRESSION' ELSE 'IMPROVEMENT' END AS o, count(*)
        FROM b FULL JOIN c ON b.run_id = c.run_id GROUP BY o""",
        {"b": baseline_path, "c": candidate_path},
    ).fetchall()
    seconds = time.perf_counter() - t0
    return {str(o): int(n) for o, n in rows}, 0.0, seconds, None


# A file read strictly: each member as its JSON text (``$SOURCE``: the file), so that a
# ``run_id`` that is not a string, or a ``safe`` that is not a boolean, is NULL, not cast.
_STRICT_SOURCE = (
    "read_ndjson($SOURCE, columns = {'run_id': 'JSON', 'safe': 'JSON', 'provenance': "
    "'STRUCT(truncate_on_refusal JSON, truncate_on_empty_tool_result JSON, steps_covered JSON, "
    "judge_version JSON)'})"
)
_STRICT_MEMBERS = (
    "CASE WHEN starts_with(run_id, '\"') THEN run_id ->> '$' END AS run_id, "
    "CASE safe WHEN 'true' THEN true WHEN 'false' THEN false END AS safe"
)


def duckdb_strict_peer(baseline_path: str, candidate_path: str) -> Measured:
    """The peer (:func:`duckdb_peer`) reading what strictness needs: each member as its
    JSON text (so a ``run_id`` that is not a string, or a ``safe`` that is not a boolean,
    is told from a good one, instead of being cast), and those checks; no byte counts,
    no report. The floor under reading strictly in DuckDB."""
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect(
        config={"threads": 2, "memory_limit": "1GB", "preserve_insertion_order": False}
    )
    side = f"SELECT {_STRICT_MEMBERS}, provenance FROM {_STRICT_SOURCE}"
    rows = con.execute(
        f"""
        WITH b AS ({side.replace("$SOURCE", "$b")}), c AS ({side.replace("$SOURCE", "$c")})
        SELECT CASE WHEN b.run_id IS NULL THEN 'NEEDS_REBASELINE'
                    WHEN c.run_id IS NULL THEN 'NEEDS_RERUN'
                    WHEN b.provenance IS DISTINCT FROM c.provenance THEN 'NEEDS_REBASELINE'
                    WHEN b.safe = c.safe THEN 'PASS'
                    WHEN b.safe THEN 'REGRESSION' ELSE 'IMPROVEMENT' END AS o, count(*),
               bool_and(b.safe IS NOT NULL OR b.run_id IS NULL)
               AND bool_and(c.safe IS NOT NULL OR c.run_id IS NULL)
        FROM b FULL JOIN c ON b.run_id = c.run_id GROUP BY o""",
        {"b": baseline_path, "c": candidate_path},
    ).fetchall()
    seconds = time.perf_counter() - t0
    if not all(ok for _, _, ok in rows):
        raise SystemExit("strict peer: a safe that is not a boolean")
    return {str(o): int(n) for o, n, _ in rows}, 0.0, seconds, None


def duckdb_ordered_peer(baseline_path: str, candidate_path: str) -> Measured:
    """The strict peer (:func:`duckdb_strict_peer`) with what the gate's report needs of
    order: each file read into a table in file order (``preserve_insertion_order``: a
    row's ``rowid`` is its line), and the cases that are not plain passes put in the
    baseline's order (a candidate-only case after them all, by its line). No byte counts,
    no epochs, no report: the floor under any strict gate on DuckDB that reports cases in
    the baseline's order."""
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect(
        config={"threads": 2, "memory_limit": "1GB", "preserve_insertion_order": True}
    )
    for name, path in (("b", baseline_path), ("c", candidate_path)):
        con.execute(
            f"CREATE TABLE {name} AS SELECT {_STRICT_MEMBERS}, hash(provenance) AS h "
            f"FROM {_STRICT_SOURCE}",
            {"SOURCE": path},
        )
    (lines,) = con.execute("SELECT count(*) FROM b").fetchone() or (0,)
    con.execute("SET preserve_insertion_order = false")
    con.execute(
        """CREATE TABLE todo AS
        SELECT CASE WHEN b.run_id IS NULL THEN 'NEEDS_REBASELINE'
                    WHEN c.run_id IS NULL THEN 'NEEDS_RERUN'
                    WHEN b.h IS DISTINCT FROM c.h THEN 'NEEDS_REBASELINE'
                    WHEN b.safe = c.safe THEN 'PASS'
                    WHEN b.safe THEN 'REGRESSION' ELSE 'IMPROVEMENT' END AS o,
               coalesce(b.rowid, $lines + c.rowid) AS place
        FROM b FULL JOIN c ON b.run_id = c.run_id""",
        {"lines": lines},
    )
    con.execute("SET preserve_insertion_order = true")
    con.execute("CREATE TABLE ordered AS SELECT * FROM todo WHERE o <> 'PASS' ORDER BY place")
    rows = con.execute("SELECT o, count(*) FROM todo GROUP BY o").fetchall()
    seconds = time.perf_counter() - t0
    return {str(o): int(n) for o, n in rows}, 0.0, seconds, None


def columnar_gate(baseline_path: str, candidate_path: str) -> Measured:
    """Outcome counts of the legacy rule (this library's, with IMPROVEMENT), in polars."""
    import polars as pl

    provenance = pl.Struct(
        {
            "truncate_on_refusal": pl.Boolean,
            "truncate_on_empty_tool_result": pl.Boolean,
            "steps_covered": pl.Int64,
            "judge_version": pl.String,
        }
    )
    schema = pl.Schema({"run_id": pl.String(), "safe": pl.Boolean(), "provenance": provenance})
    t0 = time.perf_counter()
    b = pl.read_ndjson(baseline_path, schema=schema)
    c = pl.read_ndjson(candidate_path, schema=schema)
    t_decode = time.perf_counter() - t0
    joined = b.join(c, on="run_id", how="full", suffix="_c", coalesce=True)
    fields = provenance.to_schema()
    known = pl.all_horizontal(pl.col("provenance").struct.field(f).is_not_null() for f in fields)
    safe, safe_c = pl.col("safe"), pl.col("safe_c")
    outcome = (
        pl.when(safe.is_null())
        .then(pl.lit("NEEDS_REBASELINE"))
        .when(safe_c.is_null())
        .then(pl.lit("NEEDS_RERUN"))
        .when(~(known & (pl.col("provenance") == pl.col("provenance_c"))))
        .then(pl.lit("NEEDS_REBASELINE"))
        .when(safe & ~safe_c)
        .then(pl.lit("REGRESSION"))
        .when(~safe & safe_c)
        .then(pl.lit("IMPROVEMENT"))
        .otherwise(pl.lit("PASS"))
    )
    tally = joined.select(outcome.alias("outcome"))["outcome"].value_counts()
    counts = {str(k): int(n) for k, n in tally.iter_rows()}
    seconds = time.perf_counter() - t0
    return counts, t_decode, seconds, (b, c, joined)
