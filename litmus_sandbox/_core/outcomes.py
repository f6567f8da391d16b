"""The gate's vocabulary: outcomes, reasons and remedies, and a case's result. Pure data."""

from __future__ import annotations

from typing import Literal

import msgspec

from litmus_sandbox._model.records import AnyVerdict

Outcome = Literal[
    "PASS", "IMPROVEMENT", "REGRESSION", "NEEDS_REBASELINE", "NEEDS_RERUN", "EXCLUDED"
]
OUTCOMES: tuple[Outcome, ...] = (
    "REGRESSION",
    "NEEDS_RERUN",
    "NEEDS_REBASELINE",
    "IMPROVEMENT",
    "PASS",
    "EXCLUDED",
)
Remedy = Literal["rescore_baseline", "rerun_baseline", "rerun_candidate", "exclude"]
#: Why a case got its outcome (DESIGN.md's table of checks, plus the annotations below and
#: ``excluded``). Reasons are written in reports, never read back.
ReasonCode = Literal[
    "baseline_missing",
    "candidate_missing",
    "incomplete_episode",
    "recording_truncated",
    "judge_mismatch",
    "truncation_policy_mismatch",
    "refusal_detector_mismatch",
    "fidelity_mismatch",
    "emulator_mismatch",
    "fallback_judge",
    "coverage_mismatch",
    "recorder_mismatch",
    "unknown_provenance",
    "epoch_count_mismatch",
    "flaky",
    "oracle_contradicts_judge",
    "excluded",
]

RERUN: Outcome = "NEEDS_RERUN"
REBASE: Outcome = "NEEDS_REBASELINE"


#: Reasons that describe a case without making it unresolved: they never decide an
#: outcome and stay out of the re-baseline plan, though each names what would settle it.
ANNOTATIONS: frozenset[ReasonCode] = frozenset({"flaky", "oracle_contradicts_judge"})


class Reason(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Why a case got its outcome, and what would settle it (``remedy``)."""

    code: ReasonCode
    detail: str
    remedy: Remedy | None = None


class StepDiff(msgspec.Struct, frozen=True, kw_only=True):
    """Step-level view of a case: first differing step verdict, steps without counterpart."""

    first_differing_step: int | None
    baseline_only_steps: tuple[int, ...]
    candidate_only_steps: tuple[int, ...]


class CaseResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The gate's answer for one case, with the verdicts it looked at."""

    case_id: str
    outcome: Outcome
    reasons: tuple[Reason, ...]
    baseline: tuple[AnyVerdict, ...]
    candidate: tuple[AnyVerdict, ...]

    @property
    def contradicted(self) -> bool:
        return any(r.code == "oracle_contradicts_judge" for r in self.reasons)

    @property
    def flaky(self) -> bool:
        return any(r.code == "flaky" for r in self.reasons)

    @property
    def still_unsafe(self) -> bool:
        """Comparable and unsafe on both sides: a PASS (nothing changed) whose candidate
        is unsafe, which reports call out (a PASS's sides are both safe or both unsafe)."""
        return self.outcome == "PASS" and not all(v.safe for v in self.candidate)


Found = list[tuple[Outcome, Reason]]


def add_reason(
    found: Found, outcome: Outcome, *, code: ReasonCode, detail: str, remedy: Remedy
) -> None:
    found.append((outcome, Reason(code=code, detail=detail, remedy=remedy)))


def eq_known(a: object, b: object) -> bool:
    return a is not None and b is not None and a == b


def show(value: object) -> str:
    return "unknown" if value is None else repr(value)
