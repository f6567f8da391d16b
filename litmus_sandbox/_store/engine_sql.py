"""The SQL of the gate's join engine (``_store/engine.py``), and how many parts its
group-by on the case id runs in.

The engine keeps every verdict in DuckDB, a row each (``side``, ``pos``, ``key``, ``safe``,
``code``), behind the view ``verdicts``. One group-by on the case id gives each case its
place in gate order, its verdicts a side and a side's code and ``safe``, and tells the
plain passes apart; the cases handed on are sorted into gate order (``todo``), and the
verdicts of those with epochs or a verdict kept whole are written beside them (``odd``),
in the same order. Past what DuckDB's memory limit holds, the group-by runs in parts
(:func:`parts`), by a hash of the case id.
"""

from __future__ import annotations

from litmus_sandbox._store.verdict_columns import WHOLE

__all__ = [
    "GROUPED",
    "IS_ODD",
    "KEPT_WHOLE",
    "NOT_PLAIN",
    "ODD",
    "ODD_PAGE",
    "PAGE",
    "ROW_BYTES",
    "ROW_BYTES_EVERY_CASE",
    "SCHEMA",
    "parts",
]

#: What a verdict costs the group-by on the case id, about, in bytes (see :func:`parts`):
#: with the plain passes left out, and with every case kept (then every case waits, in
#: DuckDB, for the sort into gate order). Measured at 10M pairs (20M verdicts,
#: 22-character ids) under a 512 MiB limit, the temporary folder at its peak: in one part
#: 2.4 GB; the table in four parts 0.8 GB; JSON in four 1.0 GB, in six 0.8 GB. Each part
#: reads the verdicts again: four parts took the table 53 s, six 63 s.
ROW_BYTES = 100
ROW_BYTES_EVERY_CASE = 150

SCHEMA = """
CREATE TABLE decoded (side UTINYINT, pos UBIGINT, key VARCHAR, safe BOOLEAN, code INTEGER);
CREATE TABLE whole (side UTINYINT, pos UBIGINT, rec BLOB);
CREATE TABLE excluded (key VARCHAR);
"""
# Gate order, epochs and plain passes in one group-by (see the module docstring): a
# case's place, its verdicts a side, and a side's code and ``safe`` as ``2 * code + safe``
# (those of its verdict, when it has one); ``{part}`` narrows it to one part. The cases
# handed on are then sorted into gate order (``todo``): ``rowid`` is a case's rank there.
GROUPED = """
SELECT key, place, n - nc AS nb, nc, coalesce(bw, 0) AS bw, coalesce(cw, 0) AS cw
FROM (
  SELECT key,
         min(pos + side * $baseline)::BIGINT AS place,
         count(*)::INTEGER AS n,
         sum(side)::INTEGER AS nc,
         min(CASE side WHEN 0 THEN 2 * code + safe::INTEGER END) AS bw,
         min(CASE side WHEN 1 THEN 2 * code + safe::INTEGER END) AS cw
  FROM verdicts {part} GROUP BY key
)
{where}
"""
# Not a plain pass: not one verdict a side, both safe (odd), of one code, not negative.
NOT_PLAIN = """
WHERE NOT (n = 2 AND nc = 1 AND bw = cw AND bw >= 1 AND bw % 2 = 1)
   OR key IN (SELECT key FROM excluded)
"""
PAGE = "SELECT * FROM todo WHERE rowid >= $lo AND rowid < $hi"
KEPT_WHOLE = (2 * WHOLE, 2 * WHOLE + 1)
# The verdicts of the cases with epochs or a verdict kept whole, in gate order.
ODD = f"""
CREATE TABLE odd AS
SELECT v.key, v.safe, v.code, w.rec
FROM {{todo}} t JOIN verdicts v ON v.key = t.key
LEFT JOIN whole w ON v.code = {WHOLE} AND w.side = v.side AND w.pos = v.pos
WHERE {{odd}}
ORDER BY t.place, v.side, v.pos
"""
# Epochs, or a verdict kept whole (``2 * WHOLE + safe``).
IS_ODD = f"t.nb > 1 OR t.nc > 1 OR t.bw IN {KEPT_WHOLE} OR t.cw IN {KEPT_WHOLE}"
ODD_PAGE = "SELECT * FROM odd WHERE rowid >= $lo AND rowid < $hi"


def parts(rows: int, limit: int, *, every_case: bool = False) -> int:
    """How many parts the group-by on the case id runs in: one while its ``rows``
    verdicts, at :data:`ROW_BYTES` each (:data:`ROW_BYTES_EVERY_CASE` with
    ``every_case``), fit DuckDB's ``limit``; else enough parts that each does."""
    cost = ROW_BYTES_EVERY_CASE if every_case else ROW_BYTES
    return max(1, -(-rows * cost // limit))
