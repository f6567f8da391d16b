"""Benchmark: ``litmus-sandbox gate`` over N verdict pairs, against the reference ``run_gate``.

    .venv/bin/python bench/gate_bench.py [--pairs 1000000] [--orders shuffled,same]
        [--formats table,json,jsonl] [--repeats 2] [--repeats-at-scale 1]
        [--columnar-peer] [--no-native]

Workloads (``gate_workloads.py``) are generated in a temporary directory (``$TMPDIR``),
deterministically from ``--seed``, and deleted after: a legacy baseline, its candidate in
each order of ``--orders`` (the baseline's order, ``same``, or ``shuffled``), and with
native verdicts at the base size only.

Implementations, each run in its own fresh subprocess (so ``ru_maxrss`` is its own),
repeated ``--repeats`` times, interleaved:

* ``reference``: ``json.loads`` per line into frozen dataclasses and the reference's
  ``gate_trajectory`` / ``run_gate``, exactly as written in the report (counts only).
* ``litmus/FORMAT``: the ``gate`` command as a user runs it (``main(["gate", ...,
  "--format", FORMAT, "-o", "/dev/null"])``): read both files as it decides, write the
  whole report. Its outcome counts are taken from the summary it computed.
* ``floor``: the least a pure-Python gate does (``gate_workloads.floor_gate``): msgspec
  decoding with the provenance kept as ``msgspec.Raw``, the candidate streamed a block at
  a time and popped from a dict of the baseline, outcome counts only; no checks, no
  report. The floor under any gate in Python, measured beside the others.
* ``floor+checks``: the floor plus what the issue asks of any gate over these files, each
  the cheapest sound way (``gate_workloads.checked_floor_gate``): no duplicate key (colons
  against implied members, each distinct provenance checked once), provenance known, a
  case at most once a side, the cases that are not plain passes written out in order.
* ``columnar`` (with ``--columnar-peer``; needs ``pip install polars``, no dependency of
  this project): polars' multi-threaded NDJSON reader and hash join computing the
  outcome counts with column expressions: no Python object per case, no report.

The base size is ``min(--pairs, --base-pairs)`` (1,000,000): every implementation runs
there, and the speed-up is measured there. Past it (``--pairs 10000000``), only
litmus-sandbox runs at ``--pairs``; the reference and the peer are run at the base size
and their time and memory over imports scaled linearly (both are linear: a dict per side
and a list per file), which the results say.

Each worker measures its wall time, its own CPU time (user and kernel: on a shared
machine, others' load stretches wall time far more than CPU time, and memory-bound code
the most), its resident set after its imports and its peak after; memory per case is
``(peak - after imports) / pairs``. Speed-ups are given both ways. Every run's counts must match the generator's,
and the reference and litmus-sandbox must agree on every legacy pair's class, or the
benchmark fails. The table is printed and the results go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "gate_bench.json"
# Benchmark the working tree. Run as a script, sys.path[0] is bench/, and the editable
# install's finder then resolves ``litmus_sandbox`` to an empty namespace package.
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))

from gate_workloads import (  # noqa: E402  (after the path above)
    ORDERS,
    Measured,
    checked_floor_gate,
    floor_gate,
    generate_legacy,
    generate_native,
    reference_gate,
)

FORMATS = ("table", "json", "jsonl", "junit", "markdown")
#: The speed-up asked of litmus-sandbox over the reference, 1M shuffled pairs, table.
GOAL_SPEEDUP = 4.0
#: The peak resident set asked of litmus-sandbox at 10M pairs, any format.
GOAL_PEAK = 1.5e9


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


# ---------------------------------------------------------------- worker (one subprocess)


class WorkerResult(TypedDict):
    impl: str
    workload: str
    seconds: float
    cpu_seconds: float
    rss_after_imports: int
    rss_peak: int
    vmhwm_peak: int | None
    counts: dict[str, int]


def _maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def _vmhwm_bytes() -> int | None:
    """Peak RSS of this process's own address space (Linux), to cross-check ru_maxrss."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def worker(impl: str, workload: str, baseline_path: str, candidate_path: str) -> WorkerResult:
    fn: Callable[[str, str], Measured]
    if impl.startswith("litmus/"):
        import litmus_sandbox._cli.main  # noqa: F401 - imported before the memory baseline

        fmt = impl.split("/", 1)[1]

        def fn(b: str, c: str) -> Measured:
            return litmus_gate(b, c, fmt)

    elif impl == "columnar":
        import polars  # noqa: F401 - imported before the memory baseline is taken

        fn = columnar_gate
    elif impl == "duckdb":
        import duckdb  # noqa: F401 - imported before the memory baseline is taken

        fn = duckdb_peer
    elif impl == "floor":
        fn = floor_gate
    elif impl == "floor+checks":
        fn = checked_floor_gate
    else:
        fn = reference_gate
    rss_after_imports = _maxrss_bytes()
    cpu0 = time.process_time()
    counts, _, seconds, keep = fn(baseline_path, candidate_path)
    cpu = time.process_time() - cpu0  # the worker's own CPU, kernel included: steadier
    result = WorkerResult(
        impl=impl,
        workload=workload,
        seconds=seconds,
        cpu_seconds=cpu,
        rss_after_imports=rss_after_imports,
        rss_peak=_maxrss_bytes(),
        vmhwm_peak=_vmhwm_bytes(),
        counts=counts,
    )
    del keep
    return result


# ---------------------------------------------------------------- driver


def _run_worker(impl: str, workload: str, b: Path, c: Path) -> WorkerResult:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", impl]
    cmd += ["--workload", workload, "--baseline-file", str(b), "--candidate-file", str(c)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(
            f"worker {impl}/{workload} failed (exit {proc.returncode}):\n{proc.stderr}"
        )
    result: WorkerResult = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _agree(ref: dict[str, int], ours: dict[str, int]) -> list[str]:
    """How the reference and litmus-sandbox disagree on the legacy pairs' classes."""
    problems = [
        f"{key}: reference {ref.get(key, 0)}, litmus {ours.get(key, 0)}"
        for key in ("REGRESSION", "NEEDS_REBASELINE")
        if ref.get(key, 0) != ours.get(key, 0)
    ]
    if ref.get("PASS", 0) != ours.get("PASS", 0) + ours.get("IMPROVEMENT", 0):
        problems.append("PASS: reference PASS != litmus PASS + IMPROVEMENT")
    return problems


class Summary(TypedDict):
    impl: str
    workload: str
    pairs: int
    measured_at: int
    runs: int
    median_seconds: float
    seconds: list[float]
    median_cpu_seconds: float
    peak_rss: int
    peak_over_imports: int
    bytes_per_case: float
    scaled: bool


def _summarize(runs: list[WorkerResult], measured_at: int, pairs: int) -> Summary:
    """Median time and the highest peak; scaled linearly from ``measured_at`` pairs."""
    factor = pairs / measured_at
    secs = [r["seconds"] for r in runs]
    over = max(r["rss_peak"] - r["rss_after_imports"] for r in runs)
    base = min(r["rss_after_imports"] for r in runs)
    return Summary(
        impl=runs[0]["impl"],
        workload=runs[0]["workload"],
        pairs=pairs,
        measured_at=measured_at,
        runs=len(runs),
        median_seconds=statistics.median(secs) * factor,
        seconds=secs,
        median_cpu_seconds=statistics.median(r["cpu_seconds"] for r in runs) * factor,
        peak_rss=int(base + over * factor),
        peak_over_imports=int(over * factor),
        bytes_per_case=over / measured_at,
        scaled=factor != 1,
    )


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def _generate(d: Path, pairs: int, seed: int, orders: list[str], native: bool) -> dict[str, Any]:
    """Write the workloads into ``d`` in a subprocess (Linux carries a process's RSS
    high-water mark into the children it spawns: the driver must stay small)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--generate", str(d)]
    cmd += ["--pairs", str(pairs), "--seed", str(seed), "--orders", ",".join(orders)]
    cmd += [] if native else ["--no-native"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"generator failed (exit {proc.returncode}):\n{proc.stderr}")
    generated: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return generated


def _generate_here(d: Path, pairs: int, seed: int, orders: list[str], native: bool) -> None:
    candidates = {o: d / f"legacy-candidate-{o}.jsonl" for o in orders}
    legacy = generate_legacy(pairs, seed, d / "legacy-baseline.jsonl", candidates)
    out: dict[str, Any] = {"legacy": legacy, "native": None}
    if native:
        out["native"] = generate_native(
            pairs, seed, d / "native-baseline.jsonl", d / "native-candidate.jsonl"
        )
    print(json.dumps(out))


def _csv(value: str, allowed: tuple[str, ...]) -> list[str]:
    items = [v for v in value.split(",") if v]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(allowed)}, not {value!r}")
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=1_000_000, help="verdict pairs")
    ap.add_argument("--base-pairs", type=int, default=1_000_000, help="where all impls run")
    ap.add_argument("--repeats", type=int, default=2, help="runs per implementation")
    ap.add_argument(
        "--repeats-at-scale", type=int, default=1, help="runs per format past the base size"
    )
    ap.add_argument("--seed", type=int, default=3, help="workload seed")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    ap.add_argument(
        "--orders",
        type=lambda v: _csv(v, ORDERS),
        default=["shuffled", "same"],
        help="candidate orders: shuffled, window (out of order within 256), same",
    )
    ap.add_argument(
        "--formats",
        type=lambda v: _csv(v, FORMATS),
        default=["table", "json", "jsonl"],
        help=f"report formats of litmus-sandbox ({', '.join(FORMATS)})",
    )
    ap.add_argument("--no-native", action="store_true", help="skip the native workload")
    ap.add_argument(
        "--peer-at-scale",
        action="store_true",
        help="also run the DuckDB peer at --pairs (not only at the base size)",
    )
    ap.add_argument("--columnar-peer", action="store_true", help="also time polars")
    ap.add_argument("--generate", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--baseline-file", help=argparse.SUPPRESS)
    ap.add_argument("--candidate-file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        res = worker(args.worker, args.workload, args.baseline_file, args.candidate_file)
        print(json.dumps(res), flush=True)
        os._exit(0)  # skip tearing down millions of objects at exit: nothing is left to measure
    if args.generate:
        _generate_here(Path(args.generate), args.pairs, args.seed, args.orders, not args.no_native)
        return 0
    if args.pairs < 1 or args.repeats < 1:
        ap.error("--pairs and --repeats must be positive")
    if args.columnar_peer:
        try:
            import polars  # noqa: F401
        except ImportError:
            ap.error("--columnar-peer needs polars: pip install polars")
    return _drive(args)


def _drive(args: argparse.Namespace) -> int:
    pairs: int = args.pairs
    base = min(pairs, args.base_pairs)
    sizes = [base] if base == pairs else [base, pairs]
    summaries: list[Summary] = []
    all_runs: list[WorkerResult] = []
    failures: list[str] = []
    file_bytes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="litmus-gate-bench-") as tmp:
        for size in sizes:
            d = Path(tmp) / str(size)
            d.mkdir()
            t0 = time.perf_counter()
            native = size == base and not args.no_native
            expected = _generate(d, size, args.seed, args.orders, native)
            print(
                f"generated {size:,} pairs ({', '.join(args.orders)}) in {time.perf_counter() - t0:.0f} s"
            )
            b = d / "legacy-baseline.jsonl"
            plan: list[tuple[str, str, Path, Path]] = []
            for order in args.orders:
                c = d / f"legacy-candidate-{order}.jsonl"
                file_bytes[f"{size}/{order}"] = b.stat().st_size + c.stat().st_size
                if size == base:
                    plan.append(("reference", f"legacy/{order}", b, c))
                    plan.append(("floor", f"legacy/{order}", b, c))
                    plan.append(("floor+checks", f"legacy/{order}", b, c))
                if size == base or args.peer_at_scale:
                    plan.append(("duckdb", f"legacy/{order}", b, c))
                    if args.columnar_peer:
                        plan.append(("columnar", f"legacy/{order}", b, c))
                plan.extend((f"litmus/{fmt}", f"legacy/{order}", b, c) for fmt in args.formats)
            if native:
                nb, nc = d / "native-baseline.jsonl", d / "native-candidate.jsonl"
                plan.append(("litmus/table", "native/shuffled", nb, nc))
            runs: dict[tuple[str, str], list[WorkerResult]] = {(i, w): [] for i, w, _, _ in plan}
            for rep in range(args.repeats if size == base else args.repeats_at_scale):
                # Interleaved, who goes first alternating, so drift on a noisy machine is shared.
                for impl, workload, bf, cf in plan if rep % 2 == 0 else plan[::-1]:
                    r = _run_worker(impl, workload, bf, cf)
                    runs[(impl, workload)].append(r)
                    all_runs.append(r)
                    print(
                        f"  {size:>10,} run {rep + 1} {impl:<16} {workload:<16}"
                        f"{r['seconds']:8.2f} s  cpu {r['cpu_seconds']:6.2f} s"
                        f"  peak {_mib(r['rss_peak'])} MiB",
                        flush=True,
                    )
                    want_key = "reference" if impl == "reference" else "litmus"
                    want = (
                        expected["legacy"][want_key]
                        if workload.startswith("legacy")
                        else expected["native"]
                    )
                    if r["counts"] != want:
                        failures.append(f"{impl} {workload} {size}: {r['counts']} != {want}")
            for (impl, _), rs in runs.items():
                summaries.append(_summarize(rs, size, size))
                if (
                    size == base
                    and size != pairs
                    and impl in ("reference", "floor", "floor+checks", "columnar")
                ):
                    summaries.append(_summarize(rs, size, pairs))  # scaled to --pairs
            for order in args.orders:
                ref = runs[("reference", f"legacy/{order}")] if size == base else []
                lit = runs[(f"litmus/{args.formats[0]}", f"legacy/{order}")]
                for r1, r2 in zip(ref, lit, strict=False):
                    failures.extend(_agree(r1["counts"], r2["counts"]))
    return _report(args, summaries, all_runs, failures, file_bytes, base)


def _report(
    args: argparse.Namespace,
    summaries: list[Summary],
    runs: list[WorkerResult],
    failures: list[str],
    file_bytes: dict[str, int],
    base: int,
) -> int:
    print()
    print(
        f"{'pairs':>11} {'impl':<16} {'workload':<16} {'median s':>9} {'x ref':>6} "
        f"{'cpu s':>7} {'x ref':>6} {'peak MiB':>9} {'B/case':>7}"
    )
    by = {(s["pairs"], s["impl"], s["workload"]): s for s in summaries}
    for s in summaries:
        ref = by.get((s["pairs"], "reference", s["workload"]))
        ratio = f"{ref['median_seconds'] / s['median_seconds']:6.1f}" if ref else "     -"
        cpu = s["median_cpu_seconds"]
        cpu_ratio = f"{ref['median_cpu_seconds'] / cpu:6.1f}" if ref else "     -"
        mark = f" (scaled from {s['measured_at']:,})" if s["scaled"] else ""
        print(
            f"{s['pairs']:>11,} {s['impl']:<16} {s['workload']:<16} {s['median_seconds']:9.2f} "
            f"{ratio} {cpu:7.2f} {cpu_ratio} {_mib(s['peak_rss']):>9} "
            f"{s['bytes_per_case']:7.0f}{mark}"
        )
    goals: dict[str, Any] = {}
    key = (base, "reference", "legacy/shuffled")
    ours = (base, f"litmus/{args.formats[0]}", "legacy/shuffled")
    if key in by and ours in by:
        speedup = by[key]["median_seconds"] / by[ours]["median_seconds"]
        by_cpu = by[key]["median_cpu_seconds"] / by[ours]["median_cpu_seconds"]
        goals["speedup"] = {"value": speedup, "goal": GOAL_SPEEDUP, "met": speedup >= GOAL_SPEEDUP}
        goals["speedup_cpu"] = {
            "value": by_cpu,
            "goal": GOAL_SPEEDUP,
            "met": by_cpu >= GOAL_SPEEDUP,
        }
        print(
            f"\nspeed-up, {base:,} shuffled pairs, {args.formats[0]}: {speedup:.2f}x wall, "
            f"{by_cpu:.2f}x CPU (goal {GOAL_SPEEDUP}x)"
        )
    if args.pairs >= 10_000_000:
        peaks = {
            f"{s['impl']} {s['workload']}": s["peak_rss"]
            for s in summaries
            if s["pairs"] == args.pairs and s["impl"].startswith("litmus") and not s["scaled"]
        }
        top = max(peaks.values(), default=0)
        goals["peak_rss"] = {"value": top, "goal": GOAL_PEAK, "met": top <= GOAL_PEAK}
        print(
            f"peak RSS at {args.pairs:,} pairs, every format: at most {_mib(top)} MiB (goal 1.5 GB)"
        )
    if failures:
        print("FAIL: " + "; ".join(failures))
    import msgspec

    result = {
        "benchmark": "gate_bench",
        "pairs": args.pairs,
        "base_pairs": base,
        "repeats": args.repeats,
        "seed": args.seed,
        "orders": args.orders,
        "formats": args.formats,
        "file_bytes": file_bytes,
        "goals": goals,
        "scaled_note": "reference and columnar past the base size: measured there, time and "
        "memory over imports scaled linearly",
        "summaries": summaries,
        "runs": runs,
        "failures": failures,
        "environment": {
            "python": sys.version.split()[0],
            "msgspec": msgspec.__version__,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
        },
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
