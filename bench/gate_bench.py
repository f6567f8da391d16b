"""Benchmark: ``litmus-sandbox gate`` over N verdict pairs, against a bare DuckDB peer, a
Python floor and the reference ``run_gate``.

    .venv/bin/python bench/gate_bench.py [--pairs 1000000] [--base-pairs 1000000]
        [--orders shuffled,same] [--formats table,json,jsonl] [--repeats 2]
        [--repeats-at-scale 1] [--peer-at-scale] [--columnar-peer] [--no-native]

Workloads (``gate_workloads.py``) are generated in a temporary directory (``$TMPDIR``),
deterministically from ``--seed``, and deleted after: a legacy baseline, its candidate in
each order of ``--orders`` (the baseline's order, ``same``, ``window``, or ``shuffled``),
and with native verdicts at the base size only.

What runs (``gate_impls.py``), each in its own fresh subprocess (so ``ru_maxrss`` is its
own), repeated ``--repeats`` times, interleaved: ``litmus/FORMAT`` (the ``gate`` command,
its report to ``/dev/null``), ``duckdb`` (the peer: DuckDB alone, join, checks, counts),
``duckdb-strict`` (the peer reading each member as JSON text, as strictness needs),
``duckdb-ordered`` (that, with each line's position kept and the listed cases put in the
baseline's order, as the report needs),
``python-floor`` (reading and strictly validating both files with msgspec alone, no join
and no report: how far any gate that validates in Python can get), ``reference``,
``floor`` and ``floor+checks`` (pure-Python gates), and ``columnar`` (polars, with
``--columnar-peer``).

The base size is ``min(--pairs, --base-pairs)``: everything runs there. Past it, the gate
runs at ``--pairs``, and with ``--peer-at-scale`` the peer and the Python floor too; the
reference and the dict-holding floors are run at the base size and their time and memory
over imports scaled linearly, which the results say.

Each worker measures its wall time, its own CPU time (user and kernel: on a shared
machine others' load stretches wall time far more than CPU time), its resident set after
its imports and its peak after; the driver gives it a temporary folder of its own
(``$TMPDIR`` and its working directory, where DuckDB spills) and polls the disk it holds
there, and notes the load average as it starts and ends. Every run's counts must match the
generator's, and the reference and litmus-sandbox must agree on every legacy pair's class,
or the benchmark fails. The tables are printed: every implementation, then each gate run
against the peer and the Python floor of the same run (and JSON against the table), with
the goals; the results go to ``--out``.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import platform
import resource
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
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

from gate_impls import (  # noqa: E402  (after the path above)
    checked_floor_gate,
    columnar_gate,
    duckdb_ordered_peer,
    duckdb_peer,
    duckdb_strict_peer,
    floor_gate,
    litmus_gate,
    python_floor,
)
from gate_workloads import (  # noqa: E402
    ORDERS,
    Measured,
    generate_legacy,
    generate_native,
    reference_gate,
)

FORMATS = ("table", "json", "jsonl", "junit", "markdown")
#: The speed-up asked of litmus-sandbox over the reference, 1M shuffled pairs, table.
GOAL_SPEEDUP = 4.0
#: The peak resident set asked of litmus-sandbox at 10M pairs, any format.
GOAL_PEAK = 1.5e9
#: Shuffled legacy pairs (issue 31): the table within this of the DuckDB peer's wall time,
#: JSON within this of the table's, and at most this much temporary disk.
GOAL_PEER, GOAL_JSON, GOAL_TEMP = 1.5, 2.0, 1e9


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
    #: Set by the driver: the most temporary disk the worker held (bytes), and the load
    #: averages (1 minute) when it started and ended.
    temp_peak: int
    load: tuple[float, float]


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
    elif impl in ("duckdb", "duckdb-strict", "duckdb-ordered"):
        import duckdb  # noqa: F401 - imported before the memory baseline is taken

        fn = {
            "duckdb": duckdb_peer,
            "duckdb-strict": duckdb_strict_peer,
            "duckdb-ordered": duckdb_ordered_peer,
        }[impl]
    elif impl == "python-floor":
        fn = python_floor
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
        temp_peak=0,
        load=(0.0, 0.0),
    )
    del keep
    return result


# ---------------------------------------------------------------- driver


def _run_worker(impl: str, workload: str, b: Path, c: Path) -> WorkerResult:
    """Run one worker in a subprocess with a temporary folder of its own (``$TMPDIR``
    and its working directory, where DuckDB spills), watched for the disk it holds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", impl]
    cmd += ["--workload", workload, "--baseline-file", str(b), "--candidate-file", str(c)]
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="worker-", dir=b.parent) as tmp:
        env = {**os.environ, "TMPDIR": tmp}
        with subprocess.Popen(
            cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            watch = _TempWatch(proc.pid, tmp)
            stdout, stderr = proc.communicate()
            watch.stop()
    if proc.returncode != 0:
        raise SystemExit(f"worker {impl}/{workload} failed (exit {proc.returncode}):\n{stderr}")
    result: WorkerResult = json.loads(stdout.strip().splitlines()[-1])
    result["temp_peak"] = watch.peak
    result["load"] = (load0, os.getloadavg()[0])
    return result


class _TempWatch:
    """The most disk a process holds under a folder, polled: the files there, and the
    files it holds open there, unlinked ones included (a spooled report's temporary
    files are unlinked at once, DuckDB's spill files are not)."""

    def __init__(self, pid: int, folder: str, every: float = 0.2) -> None:
        self.peak = 0
        self._pid, self._folder, self._every = pid, folder, every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._every):
            self.peak = max(self.peak, self._held())

    def _held(self) -> int:
        seen: dict[tuple[int, int], int] = {}
        fds = f"/proc/{self._pid}/fd"
        with contextlib.suppress(OSError):
            for fd in os.listdir(fds):
                with contextlib.suppress(OSError):
                    if os.readlink(f"{fds}/{fd}").startswith(self._folder):
                        st = os.stat(f"{fds}/{fd}")
                        if stat.S_ISREG(st.st_mode):
                            seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
        for root, _, files in os.walk(self._folder):
            for name in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(root, name))
                    seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
        return sum(seen.values())


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
    #: The most temporary disk any run held; the load averages its runs saw.
    temp_peak: int
    loads: list[float]


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
        temp_peak=max(r["temp_peak"] for r in runs),
        loads=[x for r in runs for x in r["load"]],
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
        help="also run the DuckDB peer and the Python floor at --pairs (not only at the base)",
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
    # The gate runs as installed: its modules compiled once (installing a wheel compiles
    # them; a checkout run with PYTHONDONTWRITEBYTECODE would compile them every run).
    compileall.compile_dir(HERE.parent / "litmus_sandbox", quiet=1)
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
                    plan.append(("duckdb-strict", f"legacy/{order}", b, c))
                    plan.append(("duckdb-ordered", f"legacy/{order}", b, c))
                    plan.append(("python-floor", f"legacy/{order}", b, c))
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
                        f"  peak {_mib(r['rss_peak'])} MiB  temp {_mib(r['temp_peak'])} MiB"
                        f"  load {r['load'][0]:.1f}-{r['load'][1]:.1f}",
                        flush=True,
                    )
                    want_key = "reference" if impl == "reference" else "litmus"
                    want = (
                        expected["legacy"][want_key]
                        if workload.startswith("legacy")
                        else expected["native"]
                    )
                    if impl == "python-floor":  # no outcomes: the verdicts read a side
                        want = {"baseline": size, "candidate": size}
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
    ratios = _ratios(by, args.pairs, goals)
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
        "ratios": ratios,
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


def _ratios(
    by: dict[tuple[int, str, str], Summary], pairs: int, goals: dict[str, Any]
) -> list[dict[str, Any]]:
    """Print and return each gate run against the DuckDB peer and the Python floor of the
    same run (wall time, and CPU time), and JSON against the table; the goals at
    ``pairs`` go to ``goals``."""
    out: list[dict[str, Any]] = []
    print(f"\n{'pairs':>11} {'workload':<16} {'impl':<14} {'wall s':>7} {'cpu s':>7}"
          f" {'/peer':>6} {'/floor':>6} {'cpu/peer':>8} {'temp MiB':>8}  load")  # fmt: skip
    for (n, impl, workload), s in sorted(by.items()):
        peer, floor = by.get((n, "duckdb", workload)), by.get((n, "python-floor", workload))
        if not impl.startswith("litmus/") or peer is None or floor is None or s["scaled"]:
            continue
        row: dict[str, Any] = {
            "pairs": n,
            "workload": workload,
            "impl": impl,
            "seconds": s["median_seconds"],
            "cpu_seconds": s["median_cpu_seconds"],
            "peer_seconds": peer["median_seconds"],
            "peer_cpu_seconds": peer["median_cpu_seconds"],
            "python_floor_seconds": floor["median_seconds"],
            "over_peer": s["median_seconds"] / peer["median_seconds"],
            "over_python_floor": s["median_seconds"] / floor["median_seconds"],
            "cpu_over_peer": s["median_cpu_seconds"] / peer["median_cpu_seconds"],
            "temp_peak": s["temp_peak"],
            "peak_rss": s["peak_rss"],
            "loads": s["loads"],
        }
        table = by.get((n, "litmus/table", workload))
        if impl == "litmus/json" and table is not None:
            row["over_table"] = s["median_seconds"] / table["median_seconds"]
        out.append(row)
        print(
            f"{n:>11,} {workload:<16} {impl:<14} {row['seconds']:7.2f} {row['cpu_seconds']:7.2f}"
            f" {row['over_peer']:6.2f} {row['over_python_floor']:6.2f}"
            f" {row['cpu_over_peer']:8.2f} {_mib(row['temp_peak']):>8}"
            f"  {min(row['loads']):.1f}-{max(row['loads']):.1f}"
            + (f"  json/table {row['over_table']:.2f}" if "over_table" in row else "")
        )
    # The floors under the peer: what strictness costs, and strictness with the order.
    for (n, impl, workload), s in sorted(by.items()):
        peer = by.get((n, "duckdb", workload))
        if impl not in ("duckdb-strict", "duckdb-ordered") or peer is None:
            continue
        ratio = s["median_seconds"] / peer["median_seconds"]
        print(f"{n:>11,} {workload:<16} {impl:<14} {s['median_seconds']:7.2f}"
              f" {s['median_cpu_seconds']:7.2f} {ratio:6.2f}  (a floor: no gate is faster)")  # fmt: skip
        if n == pairs and workload == "legacy/shuffled":
            goals.setdefault("floors_over_peer", {})[impl] = ratio  # not goals: floors
    for row in out:
        if row["pairs"] != pairs or row["workload"] != "legacy/shuffled":
            continue
        if row["impl"] == "litmus/table":
            goals["over_peer"] = {"value": row["over_peer"], "goal": GOAL_PEER, "met": row["over_peer"] <= GOAL_PEER}  # fmt: skip
        if "over_table" in row:
            goals["json_over_table"] = {"value": row["over_table"], "goal": GOAL_JSON, "met": row["over_table"] <= GOAL_JSON}  # fmt: skip
        top = goals.setdefault("temp_peak", {"value": 0, "goal": GOAL_TEMP})
        top["value"] = max(top["value"], row["temp_peak"])
        top["met"] = top["value"] <= GOAL_TEMP
    return out


if __name__ == "__main__":
    sys.exit(main())
