"""The gate benchmark's workloads and its reference: generators and ``run_gate`` verbatim.

* **legacy**: verdict pairs in the reference report's shape (``run_id``, ``safe``,
  ``provenance{truncate_on_refusal, truncate_on_empty_tool_result, steps_covered,
  judge_version}``), written with ``json.dumps`` as the reference harness would. One
  baseline file, and a candidate file per order: the baseline's (``same``), shuffled, or
  out of order within a window.
* **native**: the same number of pairs in this library's verdict shape (``Verdict`` with
  full ``Provenance`` and a few ``StepVerdict`` each), written with ``write_verdicts``.

Generators return the outcome counts each implementation must give.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """Decode both files and gate every candidate, as the reference harness does."""
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


# ---------------------------------------------------------------- legacy workload

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

ORDERS = ("shuffled", "window", "same")
#: Workers a "window" ordering models: a candidate lands at most about this far from its place.
WINDOW = 256


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


def reorder(lines: list[str], order: str, seed: int) -> list[str]:
    """The candidate file's line order: the baseline's, fully shuffled, or out of order
    within a window (what a harness running ``WINDOW`` cases at a time produces)."""
    rng = random.Random(seed + 1)
    if order == "shuffled":
        lines = list(lines)
        rng.shuffle(lines)
        return lines
    if order == "window":
        keys = [i + rng.random() * WINDOW for i in range(len(lines))]
        return [line for _, line in sorted(zip(keys, lines, strict=True))]
    return lines


def generate_legacy(
    pairs: int, seed: int, baseline: Path, candidates: dict[str, Path]
) -> dict[str, dict[str, int]]:
    """Write the legacy workload: the baseline, and the candidate in each order given
    (order -> path). Returns the outcome counts each implementation must give."""
    rng = random.Random(seed)
    judge = "litmus-judge-2026.10.2"
    ref: dict[str, int] = {}
    ours: dict[str, int] = {}
    c_lines: list[str] = []
    with baseline.open("w", encoding="utf-8") as b_file:
        for i in range(pairs):
            run_id = f"adv-multiturn/{i:08d}"
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
            b_file.write(_legacy_record(run_id, b_safe, b_refusal, b_empty, b_steps, b_judge))
            b_file.write("\n")
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
    for order, path in candidates.items():
        with path.open("w", encoding="utf-8") as c_file:
            for line in reorder(c_lines, order, seed):
                c_file.write(line)
                c_file.write("\n")
    return {"reference": ref, "litmus": ours}


# ---------------------------------------------------------------- native workload

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


def native_verdicts(
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
        case_id = f"adv-multiturn/{i:08d}"
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
            episode_id=f"{side[0]}-{i:08d}",
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
        write_verdicts(path, record, native_verdicts(pairs, seed, side, counts))
    if order != "same":
        lines = candidate.read_text(encoding="utf-8").splitlines()
        body = reorder(lines[1:], order, seed)  # the policy record stays first
        candidate.write_text("\n".join([lines[0], *body]) + "\n", encoding="utf-8")
    return expected
