"""What the gate's group-by on the case id spills at scale, against the ways around it.

The gate lines its cases up with one group-by on the case id over both sides' verdicts
(``_store/engine.py``). At 10M pairs that group-by is what fills the temporary folder.
This benchmark builds synthetic verdict tables of the same shape in DuckDB (a side, a
position, a 22-character case id, ``safe``, a provenance code), then runs each way of
lining them up under the gate's memory limit, one process a way (so peaks are its own),
and reports its time and the peak of the spill folder, with each ratio to the gate's own
query in the same run.

Ways that group by a hash of the case id are *not exact*: two ids with one hash would be
taken for one case. They are here to measure what exactness costs, not as candidates.

    .venv/bin/python bench/gate_spill_bench.py --pairs 10000000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: The gate's aggregates (see ``_store/engine.py``), over a relation ``{src}``.
_AGGREGATES = """min(pos + side * $n)::BIGINT AS place, count(*)::INTEGER AS n,
 sum(side)::INTEGER AS nc, min(CASE side WHEN 0 THEN 2 * code + safe::INTEGER END) AS bw,
 min(CASE side WHEN 1 THEN 2 * code + safe::INTEGER END) AS cw"""
#: Way -> (exact?, queries). ``{src}`` is the verdicts; ``$n`` the pairs.
WAYS: dict[str, tuple[bool, list[str]]] = {
    "gate (group by id)": (
        True,
        [f"SELECT count(*) FROM (SELECT key, {_AGGREGATES} FROM v GROUP BY key)"],
    ),
    "group by id, count only": (
        True,
        ["SELECT count(*) FROM (SELECT key, count(*) FROM v GROUP BY key)"],
    ),
    "full join of the sides": (
        True,
        [
            "SELECT count(*) FROM (SELECT * FROM v WHERE side = 0) b FULL JOIN (SELECT * FROM v WHERE side = 1) c USING (key)"
        ],
    ),
    **{
        f"group by id, in {parts} parts": (
            True,
            [
                f"SELECT count(*) FROM (SELECT key, {_AGGREGATES} FROM v WHERE hash(key) % {parts} = {k} GROUP BY key)"
                for k in range(parts)
            ],
        )
        for parts in (2, 3, 4, 8)
    },
    "group by hash(id) (not exact)": (
        False,
        [f"SELECT count(*) FROM (SELECT hash(key) AS h, {_AGGREGATES} FROM v GROUP BY h)"],
    ),
    "group by md5(id) (not exact)": (
        False,
        [f"SELECT count(*) FROM (SELECT md5_number(key) AS h, {_AGGREGATES} FROM v GROUP BY h)"],
    ),
}
_TABLES = """
CREATE TABLE v AS
SELECT 0::UTINYINT AS side, i::UBIGINT AS pos, 'adv-multiturn/' || lpad(i::VARCHAR, 8, '0') AS key,
       (i % 7 <> 0) AS safe, (i % 50 = 0)::INTEGER AS code FROM range($n) t(i)
UNION ALL
SELECT 1::UTINYINT, i::UBIGINT, 'adv-multiturn/' || lpad(((i * 7919) % $n)::VARCHAR, 8, '0'),
       (((i * 7919) % $n) % 7 <> 0) <> (i % 13 = 0), 0 FROM range($n) t(i)
"""


def _spilled(folder: str) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.path.getsize(os.path.join(root, name))
    return total


def worker(way: str, pairs: int, limit: str, threads: int) -> dict[str, float]:
    """One way, in this process: its seconds and the spill folder's peak (bytes)."""
    import duckdb

    folder = tempfile.mkdtemp(prefix="spill-bench-")
    db = duckdb.connect(
        ":memory:",
        config={
            "memory_limit": limit,
            "temp_directory": os.path.join(folder, "spill"),
            "threads": threads,
            "preserve_insertion_order": False,
        },
    )
    db.execute("SET enable_progress_bar = false")
    db.execute(_TABLES, {"n": pairs})
    base = _spilled(folder)
    peak = [base]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], _spilled(folder))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    for query in WAYS[way][1]:
        db.execute(query, {"n": pairs} if "$n" in query else None).fetchall()
    seconds = time.perf_counter() - t0
    done.set()
    watcher.join()
    db.close()
    shutil.rmtree(folder, ignore_errors=True)
    return {"seconds": seconds, "spill_peak": float(peak[0]), "tables_spilled": float(base)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument(
        "--memory-limit", default="512MB", help="DuckDB's limit (the gate's: half its budget)"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--way", action="append", help="a way to run (repeatable; default: all)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.pairs, args.memory_limit, args.threads)))
        return 0
    rows = []
    ways = args.way or list(WAYS)
    for way in ways:
        if way not in WAYS:
            ap.error(f"no such way: {way!r} (ways: {', '.join(WAYS)})")
    for way in ways:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", way]
        cmd += ["--pairs", str(args.pairs), "--memory-limit", args.memory_limit]
        cmd += ["--threads", str(args.threads)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{way}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        rows.append((way, json.loads(done.stdout)))
    gate = dict(rows).get("gate (group by id)")
    print(f"{args.pairs:,} pairs, memory limit {args.memory_limit}, {args.threads} threads")
    print(f"{'way':<32} {'exact':<6} {'time':>8} {'spill peak':>11}  ratios to the gate's")
    for way, r in rows:
        ratio = ""
        if gate:
            ratio = f"{r['seconds'] / gate['seconds']:.2f}x time, {r['spill_peak'] / max(gate['spill_peak'], 1):.2f}x spill"
        print(
            f"{way:<32} {'yes' if WAYS[way][0] else 'no':<6} {r['seconds']:7.1f}s "
            f"{r['spill_peak'] / 2**20:8,.0f} MiB  {ratio}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
