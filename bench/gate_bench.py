"""Benchmark: decode + gate N verdict pairs, against a plain ``json`` + dataclasses baseline.

    .venv/bin/python bench/gate_bench.py [--pairs 1000000] [--repeats 3] [--seed 3]

Two workloads are generated in a temporary directory, deterministically from ``--seed``:

* **legacy**: a baseline and a candidate verdict file in the reference report's shape
  (``run_id``, ``safe``, ``provenance{truncate_on_refusal, truncate_on_empty_tool_result,
  steps_covered, judge_version}``), written with ``json.dumps`` like the reference harness
  would. Both implementations read it, so the speed-up is measured here.
* **native**: the same number of pairs in this library's verdict shape (``Verdict`` with
  full ``Provenance`` and a few ``StepVerdict`` each), written with ``write_verdicts``.
  Only litmus-sandbox reads it; its figures are reported for reference.

Implementations, each run in its own fresh subprocess (so ``ru_maxrss`` is its own), repeated
``--repeats`` times, interleaved:

* ``reference``: ``json.loads`` per line into frozen dataclasses and the reference's
  exception-based ``gate_trajectory`` / ``run_gate``, exactly as written in the report.
* ``litmus``: ``read_verdicts`` on both files, then ``gate`` (the full ``GateReport``).
* ``columnar`` (only with ``--columnar-peer``, which needs ``polars`` installed; it is not a
  dependency of this project): polars' multi-threaded NDJSON reader and hash join, computing
  the outcome counts with column expressions. It builds no Python object per case, checks no
  line and reports no case; it shows what a native columnar engine takes for the same files,
  on the same machine, in the same run: a bound on what the goal asks of any implementation
  that reads JSON.

Each worker measures the resident set after its imports and before reading anything, and
its peak after; memory per case is ``(peak - after imports) / pairs``. The two
implementations must agree on the comparable cases (REGRESSION counts equal,
NEEDS_REBASELINE counts equal, reference PASS = litmus PASS + IMPROVEMENT) and both must
match the generator's expected counts, or the benchmark fails.

The table is printed and the results are written to ``bench/results/gate_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "gate_bench.json"
# Benchmark the working tree. Run as a script, sys.path[0] is bench/, and the editable
# install's finder then resolves ``litmus_sandbox`` to an empty namespace package.
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))

IMPLS = ("reference", "litmus", "columnar")
WORKLOADS = ("legacy", "native")

# ---------------------------------------------------------------- the reference, verbatim


class TruncationPolicyMismatchError(RuntimeError):
    """Raised when a trajectory verdict is compared across incompatible truncation policies."""


@dataclass(frozen=True)
class ScoreProvenance:
    truncate_on_refusal: bool
    truncate_on_empty_tool_result: bool
    steps_covered: int
    judge_version: str


@dataclass(frozen=True)
class TrajectoryVerdict:
    run_id: str
    safe: bool
    provenance: ScoreProvenance


def gate_trajectory(
    baseline: TrajectoryVerdict,
    candidate: TrajectoryVerdict,
) -> str:
    """Return 'PASS', 'REGRESSION', or raise on incompatible provenance."""
    b, c = baseline.provenance, candidate.provenance
    if b.judge_version != c.judge_version:
        raise TruncationPolicyMismatchError(
            f"judge version differs: {b.judge_version!r} vs {c.judge_version!r}"
        )
    if b.truncate_on_refusal != c.truncate_on_refusal:
        raise TruncationPolicyMismatchError(
            "truncate_on_refusal differs between baseline and candidate; "
            "re-baseline required before comparison"
        )
    if b.truncate_on_empty_tool_result != c.truncate_on_empty_tool_result:
        raise TruncationPolicyMismatchError(
            "truncate_on_empty_tool_result differs; re-baseline required"
        )
    if b.steps_covered != c.steps_covered:
        raise TruncationPolicyMismatchError(
            f"step coverage differs ({b.steps_covered} vs {c.steps_covered}); "
            "trajectory verdict not comparable"
        )
    if baseline.safe and not candidate.safe:
        return "REGRESSION"
    return "PASS"


def run_gate(baseline: TrajectoryVerdict | None, candidate: TrajectoryVerdict) -> str:
    if baseline is None:
        return "NEEDS_REBASELINE"
    try:
        return gate_trajectory(baseline, candidate)
    except TruncationPolicyMismatchError:
        return "NEEDS_REBASELINE"


# ---------------------------------------------------------------- reference implementation


def _load_reference(path: str) -> list[TrajectoryVerdict]:
    out: list[TrajectoryVerdict] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line)
            p = d["provenance"]
            out.append(
                TrajectoryVerdict(
                    run_id=d["run_id"],
                    safe=d["safe"],
                    provenance=ScoreProvenance(
                        truncate_on_refusal=p["truncate_on_refusal"],
                        truncate_on_empty_tool_result=p["truncate_on_empty_tool_result"],
                        steps_covered=p["steps_covered"],
                        judge_version=p["judge_version"],
                    ),
                )
            )
    return out


#: (outcome counts, seconds decoding, seconds in all, what to keep alive until measured)
Measured = tuple[dict[str, int], float, float, object]


def reference_gate(baseline_path: str, candidate_path: str) -> Measured:
    """Decode both files and gate every candidate."""
    t0 = time.perf_counter()
    baseline = _load_reference(baseline_path)
    candidate = _load_reference(candidate_path)
    t_decode = time.perf_counter() - t0
    by_run: dict[str, TrajectoryVerdict] = {v.run_id: v for v in baseline}
    candidates: dict[str, TrajectoryVerdict] = {v.run_id: v for v in candidate}
    outcomes: dict[str, str] = {
        run_id: run_gate(by_run.get(run_id), c) for run_id, c in candidates.items()
    }
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    seconds = time.perf_counter() - t0
    return counts, t_decode, seconds, (baseline, candidate, by_run, candidates, outcomes)


# ---------------------------------------------------------------- litmus-sandbox


def litmus_gate(baseline_path: str, candidate_path: str) -> Measured:
    """Decode both files with ``read_verdicts`` and ``gate`` them (the whole ``GateReport``)."""
    import litmus_sandbox

    t0 = time.perf_counter()
    b = litmus_sandbox.read_verdicts(baseline_path)
    c = litmus_sandbox.read_verdicts(candidate_path)
    t_decode = time.perf_counter() - t0
    report = litmus_sandbox.gate(b.verdicts, c.verdicts)
    counts = {k: v for k, v in report.counts.items() if v}
    seconds = time.perf_counter() - t0
    if b.warnings or c.warnings:
        raise SystemExit(f"unexpected read warnings: {b.warnings + c.warnings}")
    if len(report.cases) != sum(counts.values()):
        raise SystemExit("gate report: cases and counts disagree")
    return counts, t_decode, seconds, (b, c, report)


# ---------------------------------------------------------------- columnar peer (polars)


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
    decode_seconds: float
    gate_seconds: float
    rss_after_imports: int
    rss_peak: int
    vmhwm_after_imports: int | None
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
    if impl == "litmus":
        import litmus_sandbox  # noqa: F401 - imported before the memory baseline is taken

        fn = litmus_gate
    elif impl == "columnar":
        import polars  # noqa: F401 - imported before the memory baseline is taken

        fn = columnar_gate
    else:
        fn = reference_gate
    rss_after_imports = _maxrss_bytes()
    vmhwm_after_imports = _vmhwm_bytes()
    # Timed up to the counts; freeing what was built is left out (for both implementations).
    counts, t_decode, seconds, keep = fn(baseline_path, candidate_path)
    result = WorkerResult(
        impl=impl,
        workload=workload,
        seconds=seconds,
        decode_seconds=t_decode,
        gate_seconds=seconds - t_decode,
        rss_after_imports=rss_after_imports,
        rss_peak=_maxrss_bytes(),
        vmhwm_after_imports=vmhwm_after_imports,
        vmhwm_peak=_vmhwm_bytes(),
        counts=counts,
    )
    del keep
    return result


# ---------------------------------------------------------------- workload generation

#: (share, category) of legacy pairs; the rest are comparable and unchanged.
LEGACY_MIX: tuple[tuple[float, str], ...] = (
    (0.030, "regression"),  # safe -> unsafe, same provenance
    (0.010, "improvement"),  # unsafe -> safe, same provenance (reference: PASS)
    (0.030, "refusal_cut"),  # baseline cut at refusal, candidate not (the incident)
    (0.010, "empty_tool_cut"),  # baseline cut at an empty tool result
    (0.020, "coverage"),  # steps_covered differs by one or more steps
    (0.015, "judge"),  # judge_version differs
    (0.005, "several"),  # judge and coverage and a truncation flag differ
)


def _pick(rng: random.Random, mix: tuple[tuple[float, str], ...]) -> str:
    x = rng.random()
    for share, name in mix:
        if x < share:
            return name
        x -= share
    return "comparable"


def _bump(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _legacy_record(
    run_id: str, safe: bool, refusal: bool, empty: bool, steps: int, judge: str
) -> str:
    return json.dumps(
        {
            "run_id": run_id,
            "safe": safe,
            "provenance": {
                "truncate_on_refusal": refusal,
                "truncate_on_empty_tool_result": empty,
                "steps_covered": steps,
                "judge_version": judge,
            },
        }
    )


ORDERS = ("shuffled", "window", "same")
#: Workers a "window" ordering models: a candidate lands at most about this far from its place.
WINDOW = 256


def _reorder(lines: list[str], order: str, seed: int) -> list[str]:
    """The candidate file's line order: the baseline's, fully shuffled, or out of order
    within a window (what a harness running ``WINDOW`` cases at a time produces)."""
    rng = random.Random(seed + 1)
    if order == "shuffled":
        rng.shuffle(lines)
        return lines
    if order == "window":
        keys = [i + rng.random() * WINDOW for i in range(len(lines))]
        return [line for _, line in sorted(zip(keys, lines, strict=True))]
    return lines


def generate_legacy(
    pairs: int, seed: int, baseline: Path, candidate: Path, order: str = "shuffled"
) -> dict[str, dict[str, int]]:
    """Write the legacy workload; return the outcome counts each implementation must give."""
    rng = random.Random(seed)
    judge = "litmus-judge-2026.10.2"
    ref: dict[str, int] = {}
    ours: dict[str, int] = {}
    b_lines: list[str] = []
    c_lines: list[str] = []
    for i in range(pairs):
        run_id = f"adv-multiturn/{i:07d}"
        kind = _pick(rng, LEGACY_MIX)
        steps = rng.randint(2, 24)
        b_safe = rng.random() < 0.85
        c_safe = b_safe
        b_refusal = c_refusal = False
        b_empty = c_empty = False
        b_steps = c_steps = steps
        b_judge = c_judge = judge
        if kind == "regression":
            b_safe, c_safe = True, False
        elif kind == "improvement":
            b_safe, c_safe = False, True
        elif kind == "refusal_cut":
            b_refusal, b_safe = True, True
            b_steps = rng.randint(1, steps - 1)
            c_safe = rng.random() < 0.3
        elif kind == "empty_tool_cut":
            b_empty, b_safe = True, True
            b_steps = rng.randint(1, steps - 1)
            c_safe = rng.random() < 0.5
        elif kind == "coverage":
            c_steps = steps + rng.randint(1, 3)
            c_safe = rng.random() < 0.6
        elif kind == "judge":
            b_judge = "litmus-judge-2026.08.0"
        elif kind == "several":
            b_judge, b_refusal = "litmus-judge-2026.08.0", True
            b_steps = rng.randint(1, steps - 1)
            c_safe = False
        b_lines.append(_legacy_record(run_id, b_safe, b_refusal, b_empty, b_steps, b_judge))
        c_lines.append(_legacy_record(run_id, c_safe, c_refusal, c_empty, c_steps, c_judge))
        comparable = (b_judge, b_refusal, b_empty, b_steps) == (
            c_judge,
            c_refusal,
            c_empty,
            c_steps,
        )
        if not comparable:
            _bump(ref, "NEEDS_REBASELINE")
            _bump(ours, "NEEDS_REBASELINE")
        elif b_safe and not c_safe:
            _bump(ref, "REGRESSION")
            _bump(ours, "REGRESSION")
        else:
            _bump(ref, "PASS")
            _bump(ours, "PASS" if b_safe == c_safe else "IMPROVEMENT")
    # Candidates finish out of order in a concurrent harness.
    c_lines = _reorder(c_lines, order, seed)
    baseline.write_text("\n".join(b_lines) + "\n", encoding="utf-8")
    candidate.write_text("\n".join(c_lines) + "\n", encoding="utf-8")
    return {"reference": ref, "litmus": ours}


NATIVE_MIX: tuple[tuple[float, str], ...] = (
    (0.030, "regression"),
    (0.010, "improvement"),
    (0.020, "refusal_cut"),  # baseline scored with truncate_on_refusal (rescorable)
    (0.015, "judge"),  # another judge fingerprint
    (0.010, "fidelity"),  # a called tool was stubbed in the baseline
    (0.005, "recorder"),  # recorder measurement version changed
    (0.005, "incomplete"),  # candidate episode aborted -> NEEDS_RERUN
)

_TOOLS = ("shell", "read_file", "write_file", "http_get", "send_email", "search")


def _native_verdicts(
    pairs: int, seed: int, side: str, expected: dict[str, int] | None = None
) -> Iterator[Any]:
    """Yield one side's native verdicts (the same RNG stream drives both sides).

    With ``expected``, count there the outcome litmus-sandbox must give each pair.
    """
    from litmus_sandbox import Provenance, RecorderId, StepVerdict, Verdict

    rng = random.Random(seed)
    real_modes = {"default": "real"}
    stub_modes = {"default": "real", "send_email": "stub"}
    rec = RecorderId(name="litmus-sandbox", version="0.1.0", measurement_version="1")
    rec_old = RecorderId(name="litmus-sandbox", version="0.0.9", measurement_version="0")
    judge = "rules:sha256:5f0c2d9e41a7"
    judge_old = "rules:sha256:0b91aa7c3e55"
    for i in range(pairs):
        case_id = f"adv-multiturn/{i:07d}"
        kind = _pick(rng, NATIVE_MIX)
        n = rng.randint(2, 5)
        unsafe_at = rng.randrange(n) if rng.random() < 0.15 else None
        hashes = [f"{rng.getrandbits(256):064x}" for _ in range(n)]
        tools = tuple(sorted(rng.sample(_TOOLS, rng.randint(1, 3))))
        if kind == "fidelity" and "send_email" not in tools:
            tools = (*tools, "send_email")
        b_unsafe = c_unsafe = unsafe_at
        if kind == "regression":
            b_unsafe, c_unsafe = None, n - 1
        elif kind == "improvement":
            b_unsafe, c_unsafe = n - 1, None
        if expected is not None:
            if kind == "incomplete":
                _bump(expected, "NEEDS_RERUN")
            elif kind in ("refusal_cut", "judge", "fidelity", "recorder"):
                _bump(expected, "NEEDS_REBASELINE")
            elif (b_unsafe is None) == (c_unsafe is None):
                _bump(expected, "PASS")
            else:
                _bump(expected, "REGRESSION" if b_unsafe is None else "IMPROVEMENT")
        baseline = side == "baseline"
        unsafe = b_unsafe if baseline else c_unsafe
        steps = tuple(
            StepVerdict(
                index=j,
                safe=j != unsafe,
                content_sha256=hashes[j],
                evidence="observed",
                rules=("no_exfiltration",) if j == unsafe else (),
            )
            for j in range(n)
        )
        prov = Provenance(
            recorder=rec_old if baseline and kind == "recorder" else rec,
            recording_truncated=False,
            episode_complete=not (kind == "incomplete" and not baseline),
            truncate_on_refusal=baseline and kind == "refusal_cut",
            truncate_on_empty_tool_result=False,
            refusal_detector="regex:v2",
            judge=judge_old if baseline and kind == "judge" else judge,
            judge_label="rules-v3",
            judge_retries=0,
            fallback_judge=False,
            steps_recorded=n,
            steps_covered=n,
            tool_modes=stub_modes if baseline and kind == "fidelity" else real_modes,
            tools_called=tools,
        )
        yield Verdict(
            v=1,
            case_id=case_id,
            episode_id=f"{side[0]}-{i:07d}",
            safe=unsafe is None,
            steps=steps,
            first_unsafe_step=unsafe,
            provenance=prov,
        )


def generate_native(
    pairs: int, seed: int, baseline: Path, candidate: Path, order: str = "shuffled"
) -> dict[str, int]:
    from litmus_sandbox import PolicyRecord, write_verdicts

    policy = {"truncate_on_refusal": False, "truncate_on_empty_tool_result": False}
    expected: dict[str, int] = {}
    for side, path in (("baseline", baseline), ("candidate", candidate)):
        record = PolicyRecord(
            v=1, policy=policy, judge="rules:sha256:5f0c2d9e41a7", refusal_detector="regex:v2"
        )
        counts = expected if side == "baseline" else None
        write_verdicts(path, record, _native_verdicts(pairs, seed, side, counts))
    if order != "same":
        lines = candidate.read_text(encoding="utf-8").splitlines()
        body = _reorder(lines[1:], order, seed)  # the policy record stays first
        candidate.write_text("\n".join([lines[0], *body]) + "\n", encoding="utf-8")
    return expected


# ---------------------------------------------------------------- driver


def _run_worker(impl: str, workload: str, b: Path, c: Path) -> WorkerResult:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        impl,
        "--workload",
        workload,
        "--baseline-file",
        str(b),
        "--candidate-file",
        str(c),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(
            f"worker {impl}/{workload} failed (exit {proc.returncode}):\n{proc.stderr}"
        )
    result: WorkerResult = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _check(label: str, got: dict[str, int], want: dict[str, int]) -> None:
    if got != want:
        raise SystemExit(f"FAIL: {label}: counts {got} != expected {want}")


def _check_agreement(ref: dict[str, int], ours: dict[str, int]) -> None:
    """The reference and litmus-sandbox must agree on every legacy pair's class."""
    problems = []
    if ref.get("REGRESSION", 0) != ours.get("REGRESSION", 0):
        problems.append(
            f"REGRESSION: reference {ref.get('REGRESSION', 0)}, litmus {ours.get('REGRESSION', 0)}"
        )
    if ref.get("NEEDS_REBASELINE", 0) != ours.get("NEEDS_REBASELINE", 0):
        problems.append(
            f"NEEDS_REBASELINE: reference {ref.get('NEEDS_REBASELINE', 0)}, "
            f"litmus {ours.get('NEEDS_REBASELINE', 0)}"
        )
    if ref.get("PASS", 0) != ours.get("PASS", 0) + ours.get("IMPROVEMENT", 0):
        problems.append(
            f"PASS: reference {ref.get('PASS', 0)}, litmus PASS+IMPROVEMENT "
            f"{ours.get('PASS', 0) + ours.get('IMPROVEMENT', 0)}"
        )
    if problems:
        raise SystemExit("FAIL: implementations disagree: " + "; ".join(problems))


class Summary(TypedDict):
    impl: str
    workload: str
    runs: int
    median_seconds: float
    min_seconds: float
    max_seconds: float
    median_decode_seconds: float
    median_gate_seconds: float
    pairs_per_second: float
    rss_after_imports: int
    peak_rss: int
    peak_over_imports: int
    bytes_per_case: float
    counts: dict[str, int]
    seconds: list[float]


def _summarize(runs: list[WorkerResult], pairs: int) -> Summary:
    secs = [r["seconds"] for r in runs]
    med = statistics.median(secs)
    peak = max(r["rss_peak"] for r in runs)
    base = min(r["rss_after_imports"] for r in runs)
    over = max(r["rss_peak"] - r["rss_after_imports"] for r in runs)
    return Summary(
        impl=runs[0]["impl"],
        workload=runs[0]["workload"],
        runs=len(runs),
        median_seconds=med,
        min_seconds=min(secs),
        max_seconds=max(secs),
        median_decode_seconds=statistics.median(r["decode_seconds"] for r in runs),
        median_gate_seconds=statistics.median(r["gate_seconds"] for r in runs),
        pairs_per_second=pairs / med,
        rss_after_imports=base,
        peak_rss=peak,
        peak_over_imports=over,
        bytes_per_case=over / pairs,
        counts=runs[0]["counts"],
        seconds=secs,
    )


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=1_000_000, help="verdict pairs per workload")
    ap.add_argument("--repeats", type=int, default=3, help="runs per implementation")
    ap.add_argument("--seed", type=int, default=3, help="workload seed")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    ap.add_argument(
        "--candidate-order",
        choices=ORDERS,
        default="shuffled",
        help="candidate file order relative to the baseline's: fully shuffled (default, the "
        f"worst case), out of order within a window of {WINDOW}, or the same",
    )
    ap.add_argument("--no-native", action="store_true", help="skip the native workload")
    ap.add_argument(
        "--columnar-peer",
        action="store_true",
        help="also time a polars implementation of the legacy gate (polars must be installed)",
    )
    ap.add_argument("--generate", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    ap.add_argument("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    ap.add_argument("--baseline-file", help=argparse.SUPPRESS)
    ap.add_argument("--candidate-file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        res = worker(args.worker, args.workload, args.baseline_file, args.candidate_file)
        print(json.dumps(res), flush=True)
        os._exit(0)  # skip tearing down millions of objects at exit: nothing is left to measure
    if args.generate:
        d = Path(args.generate)
        legacy = generate_legacy(
            args.pairs,
            args.seed,
            d / "legacy-baseline.jsonl",
            d / "legacy-candidate.jsonl",
            args.candidate_order,
        )
        native: dict[str, int] = {}
        if not args.no_native:
            native = generate_native(
                args.pairs,
                args.seed,
                d / "native-baseline.jsonl",
                d / "native-candidate.jsonl",
                args.candidate_order,
            )
        print(json.dumps({"legacy": legacy, "native": native}))
        return 0
    if args.pairs < 1 or args.repeats < 1:
        ap.error("--pairs and --repeats must be positive")
    if args.columnar_peer:
        try:
            import polars  # noqa: F401
        except ImportError:
            ap.error("--columnar-peer needs polars: pip install polars")

    pairs: int = args.pairs
    with tempfile.TemporaryDirectory(prefix="litmus-gate-bench-") as tmp:
        d = Path(tmp)
        files = {w: (d / f"{w}-baseline.jsonl", d / f"{w}-candidate.jsonl") for w in WORKLOADS}
        t0 = time.perf_counter()
        # Generate in a subprocess: Linux carries a process's RSS high-water mark into the
        # children it spawns (fork/vfork + exec), so the driver must stay small for the
        # workers' ru_maxrss to be their own.
        gen = [sys.executable, str(Path(__file__).resolve()), "--generate", tmp]
        gen += ["--pairs", str(pairs), "--seed", str(args.seed)]
        gen += ["--candidate-order", args.candidate_order]
        gen += ["--no-native"] if args.no_native else []
        proc = subprocess.run(gen, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"generator failed (exit {proc.returncode}):\n{proc.stderr}")
        generated = json.loads(proc.stdout.strip().splitlines()[-1])
        expected: dict[str, dict[str, int]] = generated["legacy"]
        native_expected: dict[str, int] = generated["native"]
        print(f"generated {pairs:,} pairs per workload in {time.perf_counter() - t0:.1f} s")
        sizes = {
            w: sum(p.stat().st_size for p in files[w]) for w in WORKLOADS if files[w][0].exists()
        }

        plan = [("reference", "legacy"), ("litmus", "legacy")]
        if args.columnar_peer:
            plan.append(("columnar", "legacy"))
        if not args.no_native:
            plan.append(("litmus", "native"))
        runs: dict[tuple[str, str], list[WorkerResult]] = {k: [] for k in plan}
        for rep in range(args.repeats):
            # Interleave, and alternate who goes first, so drift on a noisy machine is shared.
            order = plan if rep % 2 == 0 else plan[::-1]
            for impl, workload in order:
                r = _run_worker(impl, workload, *files[workload])
                runs[(impl, workload)].append(r)
                print(
                    f"  run {rep + 1}/{args.repeats} {impl:>9} {workload:<6} "
                    f"{r['seconds']:7.2f} s  peak {_mib(r['rss_peak'])} MiB",
                    flush=True,
                )

    for (impl, workload), rs in runs.items():
        for r in rs:
            if workload == "legacy":
                # The columnar peer applies this library's rule (IMPROVEMENT included).
                want = expected["litmus" if impl == "columnar" else impl]
                _check(f"{impl}/legacy", r["counts"], want)
            else:
                _check(f"{impl}/native", r["counts"], native_expected)
    for ref_run, our_run in zip(
        runs[("reference", "legacy")], runs[("litmus", "legacy")], strict=True
    ):
        _check_agreement(ref_run["counts"], our_run["counts"])

    summaries = [_summarize(rs, pairs) for rs in runs.values()]
    by = {(s["impl"], s["workload"]): s for s in summaries}
    ratio = (
        by[("reference", "legacy")]["median_seconds"] / by[("litmus", "legacy")]["median_seconds"]
    )

    print()
    print(
        f"{'impl':<10} {'workload':<8} {'median s':>9} {'decode s':>9} {'gate s':>8} "
        f"{'pairs/s':>11} {'peak MiB':>9} {'+MiB':>8} {'B/case':>7}"
    )
    for s in summaries:
        print(
            f"{s['impl']:<10} {s['workload']:<8} {s['median_seconds']:9.2f} "
            f"{s['median_decode_seconds']:9.2f} {s['median_gate_seconds']:8.2f} "
            f"{s['pairs_per_second']:11,.0f} {_mib(s['peak_rss']):>9} "
            f"{_mib(s['peak_over_imports']):>8} {s['bytes_per_case']:7.0f}"
        )
    goal = 10.0
    print(
        f"\nlegacy speed-up (reference / litmus, median wall time): {ratio:.1f}x "
        f"(goal >= {goal:.0f}x: {'met' if ratio >= goal else 'NOT met'})"
    )
    print(
        f"outcomes agree: reference {dict(sorted(by[('reference', 'legacy')]['counts'].items()))}"
    )
    print(f"                litmus    {dict(sorted(by[('litmus', 'legacy')]['counts'].items()))}")
    peer_ratio = None
    if ("columnar", "legacy") in by:
        peer = by[("columnar", "legacy")]
        peer_ratio = by[("reference", "legacy")]["median_seconds"] / peer["median_seconds"]
        print(
            f"columnar peer (polars, no per-case objects): {peer['median_seconds']:.2f} s, "
            f"{peer_ratio:.1f}x the reference; litmus takes "
            f"{by[('litmus', 'legacy')]['median_seconds'] / peer['median_seconds']:.1f}x its time"
        )

    import msgspec

    result = {
        "benchmark": "gate_bench",
        "pairs": pairs,
        "repeats": args.repeats,
        "seed": args.seed,
        "candidate_order": args.candidate_order,
        "file_bytes": sizes,
        "speedup_legacy": ratio,
        "goal_speedup": goal,
        "goal_met": ratio >= goal,
        "speedup_columnar_peer": peer_ratio,
        "summaries": summaries,
        "runs": [r for rs in runs.values() for r in rs],
        "expected_counts": {"legacy": expected, "native": native_expected},
        "environment": {
            "python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "msgspec": msgspec.__version__,
            "polars": _version("polars") if args.columnar_peer else None,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
