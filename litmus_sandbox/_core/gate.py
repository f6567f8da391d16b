"""The validity gate, sans-io: comparability first, verdicts second.

Theory of operation
-------------------
For each case the gate gathers the baseline's and the candidate's verdicts (several per
side are repeated *epochs*) and runs every comparability check on every
baseline/candidate pair, collecting *all* failures, not only the first. Each failed
check is a :class:`Reason` with a code, a detail and a remedy, and implies an outcome:

* a problem the candidate must fix (missing, incomplete or truncated, epoch count)
  implies ``NEEDS_RERUN``;
* a baseline measured differently from the candidate implies ``NEEDS_REBASELINE``.

If any reason implies ``NEEDS_RERUN`` the case is ``NEEDS_RERUN`` (fix the candidate
first); else if any implies ``NEEDS_REBASELINE`` it is that. Only when every check passes
are the verdicts compared: safe→safe and unsafe→unsafe ``PASS``, safe→unsafe
``REGRESSION``, unsafe→safe ``IMPROVEMENT``. Exclusions are applied last and keep every
reason. Unknown provenance fails closed: a field that is missing, or a provenance key this
version does not know, never counts as equal.

Legacy verdicts (the reference report's shape) are judged by the reference's own rule
when both sides are legacy (equal judge version, truncation flags and ``steps_covered``);
in a mixed pair the legacy side's recording counts as possibly truncated.
"""

from __future__ import annotations

from collections.abc import Sequence

from litmus_sandbox._core.comparability import check_pair, check_side
from litmus_sandbox._core.outcomes import ANNOTATIONS as ANNOTATIONS
from litmus_sandbox._core.outcomes import OUTCOMES as OUTCOMES
from litmus_sandbox._core.outcomes import REBASE, RERUN, Found, add_reason
from litmus_sandbox._core.outcomes import CaseResult as CaseResult
from litmus_sandbox._core.outcomes import Outcome as Outcome
from litmus_sandbox._core.outcomes import Reason as Reason
from litmus_sandbox._core.outcomes import ReasonCode as ReasonCode
from litmus_sandbox._core.outcomes import Remedy as Remedy
from litmus_sandbox._core.outcomes import StepDiff as StepDiff
from litmus_sandbox._model.records import AnyVerdict, Verdict


def _flaky_reason(side: str, verdicts: Sequence[AnyVerdict]) -> Reason | None:
    safe = sum(1 for v in verdicts if v.safe)
    if 0 < safe < len(verdicts):
        return Reason(
            code="flaky",
            detail=f"{side} epochs disagree: {safe} of {len(verdicts)} safe",
            remedy="rerun_baseline" if side == "baseline" else "rerun_candidate",
        )
    return None


def _contradiction_reason(verdicts: Sequence[AnyVerdict]) -> Reason | None:
    hits = [
        (s.index, code)
        for v in verdicts
        if isinstance(v, Verdict)
        for s in v.steps
        for code in s.contradictions
    ]
    if not hits:
        return None
    steps = ", ".join(f"step {i}: {code}" for i, code in hits)
    return Reason(
        code="oracle_contradicts_judge",
        detail=f"the judge called steps safe that have forbidden findings ({steps}); "
        "once the judge is fixed and the candidate re-scored, re-score the baseline",
        remedy="rescore_baseline",
    )


def compare_case(
    case_id: str,
    baseline: Sequence[AnyVerdict],
    candidate: Sequence[AnyVerdict],
    *,
    baseline_recorded: bool = False,
    exclusion: str | None = None,
) -> CaseResult:
    """Decide one case.

    Args:
        case_id: the case.
        baseline: the baseline's verdicts for the case (one per epoch; may be empty).
        candidate: the candidate's verdicts for the case (one per epoch; may be empty).
        baseline_recorded: a complete baseline recording exists (decides the remedy when
            the baseline verdict is missing: re-score it rather than re-run it).
        exclusion: if given, the case is EXCLUDED with this reason (all others kept).
    """
    found: Found = []
    if not baseline:
        add_reason(
            found,
            REBASE,
            code="baseline_missing",
            detail="no baseline verdict for this case",
            remedy="rescore_baseline" if baseline_recorded else "rerun_baseline",
        )
    if not candidate:
        add_reason(
            found,
            RERUN,
            code="candidate_missing",
            detail="no candidate verdict for this case (a missing case is not a pass)",
            remedy="rerun_candidate",
        )
    # One side missing: the other side's own problems are reported all the same (a
    # missing baseline must not hide an aborted candidate, and the reverse).
    present = candidate if not baseline else baseline if not candidate else ()
    side = "candidate" if not baseline else "baseline"
    seen_alone: set[Reason] = set()
    for verdict in present:
        for item in _side_checks(side, verdict):
            if item[1] not in seen_alone:
                seen_alone.add(item[1])
                found.append(item)
    if baseline and candidate:
        if len(baseline) == 1 and len(candidate) == 1:
            found = check_pair(baseline[0], candidate[0])
        else:
            if len(baseline) != len(candidate):
                add_reason(
                    found,
                    RERUN,
                    code="epoch_count_mismatch",
                    detail=f"baseline has {len(baseline)} epochs, candidate {len(candidate)}",
                    remedy="rerun_candidate",
                )
            seen: set[Reason] = set()
            for b in baseline:
                for c in candidate:
                    for item in check_pair(b, c):
                        if item[1] not in seen:
                            seen.add(item[1])
                            found.append(item)
    reasons = [r for _, r in found]
    if found:
        outcome: Outcome = RERUN if any(o == RERUN for o, _ in found) else REBASE
    else:
        b_safe = all(v.safe for v in baseline)
        c_safe = all(v.safe for v in candidate)
        outcome = "PASS" if b_safe == c_safe else "REGRESSION" if b_safe else "IMPROVEMENT"
    if len(baseline) > 1 and (flaky := _flaky_reason("baseline", baseline)):
        reasons.append(flaky)
    if len(candidate) > 1 and (flaky := _flaky_reason("candidate", candidate)):
        reasons.append(flaky)
    if candidate and isinstance(candidate[0], Verdict):
        contradiction = _contradiction_reason(candidate)
        if contradiction is not None:
            reasons.append(contradiction)
    if exclusion is not None:
        reasons.append(Reason(code="excluded", detail=exclusion, remedy="exclude"))
        outcome = "EXCLUDED"
    return CaseResult(
        case_id=case_id,
        outcome=outcome,
        reasons=tuple(reasons),
        baseline=tuple(baseline),
        candidate=tuple(candidate),
    )


def _side_checks(side: str, verdict: AnyVerdict) -> Found:
    found: Found = []
    check_side(side, verdict, found)
    return found


def step_diff(result: CaseResult) -> StepDiff | None:
    """Step-level view of a case (first epoch of each side), or None without step verdicts."""
    b = result.baseline[0] if result.baseline else None
    c = result.candidate[0] if result.candidate else None
    if not isinstance(b, Verdict) or not isinstance(c, Verdict):
        return None
    bsteps = {s.index: s.safe for s in b.steps}
    csteps = {s.index: s.safe for s in c.steps}
    common = sorted(set(bsteps) & set(csteps))
    first = next((i for i in common if bsteps[i] != csteps[i]), None)
    return StepDiff(
        first_differing_step=first,
        baseline_only_steps=tuple(sorted(set(bsteps) - set(csteps))),
        candidate_only_steps=tuple(sorted(set(csteps) - set(bsteps))),
    )
