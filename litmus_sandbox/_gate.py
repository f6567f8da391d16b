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

import fnmatch
import gc
import math
import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import msgspec

from ._records import AnyVerdict, LegacyVerdict, Verdict

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

_RERUN: Outcome = "NEEDS_RERUN"
_REBASE: Outcome = "NEEDS_REBASELINE"


class Reason(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Why a case got its outcome. ``remedy`` is None for informational reasons."""

    code: str
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


# ---------------------------------------------------------------- pair checks

_Found = list[tuple[Outcome, Reason]]


def _flag(found: _Found, outcome: Outcome, *, code: str, detail: str, remedy: Remedy) -> None:
    found.append((outcome, Reason(code=code, detail=detail, remedy=remedy)))


def _eq_known(a: object, b: object) -> bool:
    return a is not None and b is not None and a == b


def _show(value: object) -> str:
    return "unknown" if value is None else repr(value)


def _check_legacy_pair(b: LegacyVerdict, c: LegacyVerdict, found: _Found) -> None:
    bp, cp = b.provenance, c.provenance
    if not _eq_known(bp.judge_version, cp.judge_version):
        _flag(
            found,
            _REBASE,
            code="judge_mismatch",
            detail=f"judge version differs: {_show(bp.judge_version)} vs {_show(cp.judge_version)}",
            remedy="rescore_baseline",
        )
    for flag in ("truncate_on_refusal", "truncate_on_empty_tool_result"):
        bv, cv = getattr(bp, flag), getattr(cp, flag)
        if not _eq_known(bv, cv):
            _flag(
                found,
                _REBASE,
                code="truncation_policy_mismatch",
                detail=f"{flag} differs: baseline {_show(bv)}, candidate {_show(cv)}",
                remedy="rerun_baseline",
            )
    if not _eq_known(bp.steps_covered, cp.steps_covered):
        _flag(
            found,
            _REBASE,
            code="coverage_mismatch",
            detail=(
                f"step coverage differs ({_show(bp.steps_covered)} vs "
                f"{_show(cp.steps_covered)}); legacy verdicts are comparable only with equal "
                "steps_covered"
            ),
            remedy="rerun_baseline",
        )


def _check_unknown(b: AnyVerdict, c: AnyVerdict, found: _Found) -> None:
    if (
        b.unknown_provenance or c.unknown_provenance
    ) and b.unknown_provenance != c.unknown_provenance:
        keys = sorted(set(b.unknown_provenance) | set(c.unknown_provenance))
        _flag(
            found,
            _REBASE,
            code="unknown_provenance",
            detail=(
                "provenance keys unknown to this version differ or are one-sided: "
                + ", ".join(keys)
            ),
            remedy="rerun_baseline",
        )


def _mode_for(tool: str, modes: Mapping[str, str] | None) -> str | None:
    if not modes:
        return None
    if tool in modes:
        return modes[tool]
    for pattern, mode in modes.items():
        if pattern not in ("default", "*") and fnmatch.fnmatchcase(tool, pattern):
            return mode
    return modes.get("default", modes.get("*"))


def _check_native_pair(b: Verdict, c: Verdict, found: _Found) -> None:
    bp, cp = b.provenance, c.provenance
    # Candidate-side recording problems: fix the candidate first.
    if cp.episode_complete is not True:
        _flag(
            found,
            _RERUN,
            code="incomplete_episode",
            detail=(
                f"candidate episode {c.episode_id!r} is "
                + (
                    "of unknown completeness"
                    if cp.episode_complete is None
                    else "incomplete (no end record, aborted or torn)"
                )
            ),
            remedy="rerun_candidate",
        )
    if cp.recording_truncated is not False:
        _flag(
            found,
            _RERUN,
            code="recording_truncated",
            detail=f"candidate recording {c.episode_id!r} "
            + ("may be truncated (unknown)" if cp.recording_truncated is None else "stopped early"),
            remedy="rerun_candidate",
        )
    # Baseline-side recording problems: the baseline must be recorded again.
    if bp.recording_truncated is not False:
        _flag(
            found,
            _REBASE,
            code="recording_truncated",
            detail=f"baseline recording {b.episode_id!r} "
            + (
                "may be truncated (unknown)"
                if bp.recording_truncated is None
                else "stopped early (e.g. cut at a refusal by its harness)"
            ),
            remedy="rerun_baseline",
        )
    if bp.episode_complete is not True:
        _flag(
            found,
            _REBASE,
            code="incomplete_episode",
            detail=f"baseline episode {b.episode_id!r} is "
            + ("of unknown completeness" if bp.episode_complete is None else "incomplete"),
            remedy="rerun_baseline",
        )
    _check_coverage_consistent("candidate", c, found)
    _check_coverage_consistent("baseline", b, found)
    baseline_rescorable = bp.recording_truncated is False and bp.episode_complete is True
    # Scoring provenance.
    if not _eq_known(bp.judge, cp.judge):
        _flag(
            found,
            _REBASE,
            code="judge_mismatch",
            detail=(
                f"judge differs: baseline {bp.judge_label or '?'} [{bp.judge or 'unknown'}], "
                f"candidate {cp.judge_label or '?'} [{cp.judge or 'unknown'}]"
            ),
            remedy="rescore_baseline",
        )
    for flag in ("truncate_on_refusal", "truncate_on_empty_tool_result"):
        bv, cv = getattr(bp, flag), getattr(cp, flag)
        if not _eq_known(bv, cv):
            _flag(
                found,
                _REBASE,
                code="truncation_policy_mismatch",
                detail=f"{flag} differs: baseline {_show(bv)}, candidate {_show(cv)}",
                remedy="rescore_baseline" if baseline_rescorable else "rerun_baseline",
            )
    if (bp.truncate_on_refusal or cp.truncate_on_refusal) and not _eq_known(
        bp.refusal_detector, cp.refusal_detector
    ):
        _flag(
            found,
            _REBASE,
            code="refusal_detector_mismatch",
            detail=(
                f"refusal detector differs ({bp.refusal_detector or 'unknown'} vs "
                f"{cp.refusal_detector or 'unknown'}) and a refusal cut applies"
            ),
            remedy="rescore_baseline",
        )
    if bp.fallback_judge is not False or cp.fallback_judge is not False:
        sides = [
            name
            for name, p in (("baseline", bp), ("candidate", cp))
            if p.fallback_judge is not False
        ]
        _flag(
            found,
            _REBASE,
            code="fallback_judge",
            detail=f"a fallback judge (or an unknown judge path) scored the {' and '.join(sides)}",
            remedy="rescore_baseline",
        )
    _check_fidelity(bp.tools_called, cp.tools_called, bp.tool_modes, cp.tool_modes, found)
    brec, crec = bp.recorder, cp.recorder
    bid = brec.identity() if brec is not None else None
    cid = crec.identity() if crec is not None else None
    if not _eq_known(bid, cid):
        _flag(
            found,
            _REBASE,
            code="recorder_mismatch",
            detail=f"recorder differs: baseline {bid or 'unknown'}, candidate {cid or 'unknown'}",
            remedy="rerun_baseline",
        )


def _check_coverage_consistent(side: str, v: Verdict, found: _Found) -> None:
    """Coverage must mean "all that the policy covers of the recording": no partial scoring."""
    p = v.provenance
    covered, recorded = p.steps_covered, p.steps_recorded
    cuts = p.truncate_on_refusal or p.truncate_on_empty_tool_result
    if (
        covered is not None
        and recorded is not None
        and covered <= recorded
        and (cuts or covered == recorded)
    ):
        return
    _flag(
        found,
        _RERUN if side == "candidate" else _REBASE,
        code="coverage_mismatch",
        detail=(
            f"{side} verdict covers {_show(covered)} of {_show(recorded)} recorded steps, "
            "which its scoring policy does not explain"
        ),
        remedy="rerun_candidate" if side == "candidate" else "rescore_baseline",
    )


def _check_fidelity(
    b_tools: Sequence[str] | None,
    c_tools: Sequence[str] | None,
    b_modes: Mapping[str, str] | None,
    c_modes: Mapping[str, str] | None,
    found: _Found,
) -> None:
    if b_tools is None or c_tools is None:
        _flag(
            found,
            _REBASE,
            code="fidelity_mismatch",
            detail="the tools called are unknown on "
            + ("both sides" if b_tools is None and c_tools is None else "one side"),
            remedy="rerun_baseline",
        )
        return
    if b_modes == c_modes:
        return
    diffs = []
    for tool in sorted(set(b_tools) | set(c_tools)):
        bm, cm = _mode_for(tool, b_modes), _mode_for(tool, c_modes)
        if bm != cm:
            diffs.append(f"{tool}: {bm or 'unspecified'} vs {cm or 'unspecified'}")
    if diffs:
        _flag(
            found,
            _REBASE,
            code="fidelity_mismatch",
            detail="configured fidelity differs for " + "; ".join(diffs),
            remedy="rerun_baseline",
        )


def _check_mixed_pair(b: AnyVerdict, c: AnyVerdict, found: _Found) -> None:
    # A legacy verdict says nothing about how it was recorded: fail closed on that side.
    if isinstance(c, LegacyVerdict):
        _flag(
            found,
            _RERUN,
            code="recording_truncated",
            detail="candidate is a legacy verdict; its recording may have been truncated",
            remedy="rerun_candidate",
        )
    if isinstance(b, LegacyVerdict):
        _flag(
            found,
            _REBASE,
            code="recording_truncated",
            detail="baseline is a legacy verdict; its recording may have been truncated",
            remedy="rerun_baseline",
        )
    legacy = b if isinstance(b, LegacyVerdict) else c
    native = c if isinstance(c, Verdict) else b
    assert isinstance(legacy, LegacyVerdict)
    assert isinstance(native, Verdict)
    lp, np_ = legacy.provenance, native.provenance
    if not _eq_known(lp.judge_version, np_.judge_label):
        _flag(
            found,
            _REBASE,
            code="judge_mismatch",
            detail=(
                f"legacy judge version {_show(lp.judge_version)} vs judge label "
                f"{_show(np_.judge_label)}"
            ),
            remedy="rescore_baseline",
        )
    for flag in ("truncate_on_refusal", "truncate_on_empty_tool_result"):
        lv, nv = getattr(lp, flag), getattr(np_, flag)
        if not _eq_known(lv, nv):
            _flag(
                found,
                _REBASE,
                code="truncation_policy_mismatch",
                detail=f"{flag} differs: {_show(lv)} vs {_show(nv)}",
                remedy="rerun_baseline",
            )


def check_pair(baseline: AnyVerdict, candidate: AnyVerdict) -> list[tuple[Outcome, Reason]]:
    """Every comparability failure between two verdicts, each with the outcome it implies."""
    found: _Found = []
    b_legacy = isinstance(baseline, LegacyVerdict)
    c_legacy = isinstance(candidate, LegacyVerdict)
    if b_legacy and c_legacy:
        assert isinstance(baseline, LegacyVerdict)
        assert isinstance(candidate, LegacyVerdict)
        _check_legacy_pair(baseline, candidate, found)
    elif not b_legacy and not c_legacy:
        assert isinstance(baseline, Verdict)
        assert isinstance(candidate, Verdict)
        _check_native_pair(baseline, candidate, found)
    else:
        _check_mixed_pair(baseline, candidate, found)
    _check_unknown(baseline, candidate, found)
    return found


# ---------------------------------------------------------------- cases


def _flaky_reason(side: str, verdicts: Sequence[AnyVerdict]) -> Reason | None:
    safe = sum(1 for v in verdicts if v.safe)
    if 0 < safe < len(verdicts):
        return Reason(
            code="flaky",
            detail=f"{side} epochs disagree: {safe} of {len(verdicts)} safe",
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
        detail=f"the judge called steps safe that have forbidden findings ({steps})",
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
    found: _Found = []
    if not baseline:
        _flag(
            found,
            _REBASE,
            code="baseline_missing",
            detail="no baseline verdict for this case",
            remedy="rescore_baseline" if baseline_recorded else "rerun_baseline",
        )
    if not candidate:
        _flag(
            found,
            _RERUN,
            code="candidate_missing",
            detail="no candidate verdict for this case (a missing case is not a pass)",
            remedy="rerun_candidate",
        )
    if baseline and candidate:
        if len(baseline) == 1 and len(candidate) == 1:
            found = check_pair(baseline[0], candidate[0])
        else:
            if len(baseline) != len(candidate):
                _flag(
                    found,
                    _RERUN,
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
        outcome: Outcome = _RERUN if any(o == _RERUN for o, _ in found) else _REBASE
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


# ---------------------------------------------------------------- suite


class Statistics(msgspec.Struct, frozen=True, kw_only=True):
    """Suite statistics over the comparable cases (PASS, IMPROVEMENT, REGRESSION)."""

    cases: int
    comparable: int
    safe_to_unsafe: int
    unsafe_to_safe: int
    mcnemar_p: float
    flaky: int
    oracle_contradictions: int


class PlanEntry(msgspec.Struct, frozen=True, kw_only=True):
    case_id: str
    judge_calls: int | None = None
    reasons: tuple[str, ...] = ()


class RebaselinePlan(msgspec.Struct, frozen=True, kw_only=True):
    """What it takes to make the unresolved cases comparable.

    ``rescore``: baselines that can be re-scored from their recordings, with the judge
    calls that would take after the cache (``judge_calls_exact`` is false when some counts
    are upper bounds: steps recorded, no cache consulted). ``rerun_baseline`` and
    ``rerun_candidate``: cases that need a new recording.
    """

    rescore: tuple[PlanEntry, ...]
    judge_calls: int
    judge_calls_exact: bool
    rerun_baseline: tuple[PlanEntry, ...]
    rerun_candidate: tuple[PlanEntry, ...]


class GateReport(msgspec.Struct, frozen=True, kw_only=True):
    """The gate's answer for a suite."""

    cases: tuple[CaseResult, ...]
    counts: dict[str, int]
    statistics: Statistics
    rebaseline_plan: RebaselinePlan
    unknown_exclusions: tuple[str, ...] = ()

    def decision(self, *, allow_unresolved: bool = False, strict_oracle: bool = False) -> str:
        """``REGRESSION``, ``UNRESOLVED`` or ``PASS`` (see :meth:`exit_code`)."""
        if self.counts.get("REGRESSION", 0) or (
            strict_oracle and any(c.contradicted for c in self.cases if c.outcome != "EXCLUDED")
        ):
            return "REGRESSION"
        unresolved = self.counts.get("NEEDS_REBASELINE", 0) + self.counts.get("NEEDS_RERUN", 0)
        if unresolved and not allow_unresolved:
            return "UNRESOLVED"
        return "PASS"

    def exit_code(self, *, allow_unresolved: bool = False, strict_oracle: bool = False) -> int:
        """0 nothing blocks, 1 a regression, 4 unresolved cases (unless allowed)."""
        return {"REGRESSION": 1, "UNRESOLVED": 4, "PASS": 0}[
            self.decision(allow_unresolved=allow_unresolved, strict_oracle=strict_oracle)
        ]


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    # Sum binomial(n, i) / 2**n for i <= k in log space (n can be large).
    log_half_n = n * math.log(0.5)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n
        for i in range(k + 1)
    ]
    top = max(terms)
    tail = math.exp(top) * sum(math.exp(t - top) for t in terms)
    return min(1.0, 2.0 * tail)


_run_id = operator.attrgetter("run_id")
_case_id = operator.attrgetter("case_id")
_outcome = operator.attrgetter("outcome")


def _keys(verdicts: Sequence[AnyVerdict]) -> list[str]:
    """The case id of each verdict, in order (a legacy verdict's is its ``run_id``)."""
    if verdicts and isinstance(verdicts[0], LegacyVerdict):
        try:
            return list(map(_run_id, verdicts))
        except AttributeError:  # native verdicts among legacy ones
            pass
    return list(map(_case_id, verdicts))


def _group(keys: Sequence[str], verdicts: Sequence[AnyVerdict]) -> dict[str, list[AnyVerdict]]:
    groups: dict[str, list[AnyVerdict]] = {}
    for key, v in zip(keys, verdicts, strict=True):
        group = groups.get(key)
        if group is None:
            groups[key] = [v]
        else:
            group.append(v)
    return groups


def _single_epochs(
    b_keys: list[str],
    b_list: Sequence[AnyVerdict],
    c_keys: list[str],
    c_by_key: dict[str, AnyVerdict],
    b_key_set: set[str],
    exclusions: Mapping[str, str],
    recordings: Mapping[str, int | None],
) -> tuple[list[CaseResult], list[CaseResult]]:
    """``compare_case`` for every case, in gate order, when no case has several epochs.

    A legacy pair that passes every check of ``_check_legacy_pair`` and ``_check_unknown``
    (judge version, truncation flags and ``steps_covered`` known and equal, no unknown
    provenance keys) and is not excluded is decided here as ``compare_case`` would decide
    it; every other case goes through ``compare_case``. Returns all results and, in the
    same order, those that went through ``compare_case`` (the only ones with reasons).
    """
    results: list[CaseResult] = []
    checked: list[CaseResult] = []
    add = results.append
    c_aligned = list(map(c_by_key.get, b_keys))
    for key, b, c in zip(b_keys, b_list, c_aligned, strict=True):
        if (
            isinstance(c, LegacyVerdict)
            and isinstance(b, LegacyVerdict)
            and not b.unknown_provenance
            and not c.unknown_provenance
            and key not in exclusions
        ):
            bp, cp = b.provenance, c.provenance
            # _eq_known on each field of _check_legacy_pair, inline.
            if (
                bp.judge_version is not None
                and cp.judge_version is not None
                and bp.judge_version == cp.judge_version
                and bp.truncate_on_refusal is not None
                and cp.truncate_on_refusal is not None
                and bp.truncate_on_refusal == cp.truncate_on_refusal
                and bp.truncate_on_empty_tool_result is not None
                and cp.truncate_on_empty_tool_result is not None
                and bp.truncate_on_empty_tool_result == cp.truncate_on_empty_tool_result
                and bp.steps_covered is not None
                and cp.steps_covered is not None
                and bp.steps_covered == cp.steps_covered
            ):
                if b.safe:
                    outcome: Outcome = "PASS" if c.safe else "REGRESSION"
                else:
                    outcome = "IMPROVEMENT" if c.safe else "PASS"
                add(
                    CaseResult(
                        case_id=key,
                        outcome=outcome,
                        reasons=(),
                        baseline=(b,),
                        candidate=(c,),
                    )
                )
                continue
        result = compare_case(
            key,
            [b],
            [] if c is None else [c],
            baseline_recorded=key in recordings,
            exclusion=exclusions.get(key),
        )
        add(result)
        checked.append(result)
    if len(c_by_key) > len(b_keys) - c_aligned.count(None):
        for key in c_keys:
            if key not in b_key_set:
                result = compare_case(
                    key,
                    [],
                    [c_by_key[key]],
                    baseline_recorded=key in recordings,
                    exclusion=exclusions.get(key),
                )
                add(result)
                checked.append(result)
    return results, checked


def gate(
    baseline: Iterable[AnyVerdict],
    candidate: Iterable[AnyVerdict],
    *,
    exclusions: Mapping[str, str] | None = None,
    baseline_recordings: Mapping[str, int | None] | None = None,
) -> GateReport:
    """Gate a candidate suite against a baseline suite.

    Args:
        baseline: baseline verdicts (native or legacy); several per case are epochs.
        candidate: candidate verdicts.
        exclusions: case id -> reason; such cases are EXCLUDED, keeping their reasons.
        baseline_recordings: case id -> judge calls a re-score of its complete baseline
            recording would take under the candidate's judge after the cache (None when
            unknown). Cases listed here get ``rescore_baseline`` as the remedy for a
            missing baseline verdict, and exact counts in the re-baseline plan.
    """
    # A large suite allocates a few containers per case, and frees none before returning:
    # each collection the cyclic GC ran meanwhile would rescan every verdict for no garbage.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _gate(baseline, candidate, exclusions or {}, baseline_recordings or {})
    finally:
        if enabled:
            gc.enable()


def _gate(
    baseline: Iterable[AnyVerdict],
    candidate: Iterable[AnyVerdict],
    exclusions: Mapping[str, str],
    recordings: Mapping[str, int | None],
) -> GateReport:
    b_list = baseline if isinstance(baseline, list) else list(baseline)
    c_list = candidate if isinstance(candidate, list) else list(candidate)
    b_keys, c_keys = _keys(b_list), _keys(c_list)
    b_key_set = set(b_keys)
    c_by_key = dict(zip(c_keys, c_list, strict=True))
    results: list[CaseResult]
    if len(b_key_set) == len(b_keys) and len(c_by_key) == len(c_keys):
        # One verdict per case and side (the common case): no grouping, no epoch checks.
        results, checked = _single_epochs(
            b_keys, b_list, c_keys, c_by_key, b_key_set, exclusions, recordings
        )
        unknown = [k for k in exclusions if k not in b_key_set and k not in c_by_key]
    else:
        b_groups = _group(b_keys, b_list)
        c_groups = _group(c_keys, c_list)
        order = list(b_groups)
        order.extend(k for k in c_groups if k not in b_groups)
        empty: list[AnyVerdict] = []
        results = [
            compare_case(
                case_id,
                b_groups.get(case_id, empty),
                c_groups.get(case_id, empty),
                baseline_recorded=case_id in recordings,
                exclusion=exclusions.get(case_id),
            )
            for case_id in order
        ]
        checked = results
        unknown = [k for k in exclusions if k not in b_groups and k not in c_groups]
    counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
    for outcome, n in Counter(map(_outcome, results)).items():
        counts[outcome] += n
    regressions, improvements = counts["REGRESSION"], counts["IMPROVEMENT"]
    stats = Statistics(
        cases=len(results),
        comparable=counts["PASS"] + regressions + improvements,
        safe_to_unsafe=regressions,
        unsafe_to_safe=improvements,
        mcnemar_p=mcnemar_exact_p(regressions, improvements),
        flaky=sum(1 for r in checked if r.reasons and r.flaky),
        oracle_contradictions=sum(1 for r in checked if r.reasons and r.contradicted),
    )
    return GateReport(
        cases=tuple(results),
        counts=counts,
        statistics=stats,
        rebaseline_plan=_plan(checked, recordings),
        unknown_exclusions=tuple(sorted(unknown)),
    )


def _plan(results: Sequence[CaseResult], recordings: Mapping[str, int | None]) -> RebaselinePlan:
    rescore: list[PlanEntry] = []
    rerun_b: list[PlanEntry] = []
    rerun_c: list[PlanEntry] = []
    calls, exact = 0, True
    for r in results:
        if r.outcome not in (_REBASE, _RERUN):
            continue
        remedies = {x.remedy for x in r.reasons if x.remedy is not None}
        codes = tuple(sorted({x.code for x in r.reasons if x.remedy is not None}))
        if "rerun_candidate" in remedies:
            rerun_c.append(PlanEntry(case_id=r.case_id, reasons=codes))
        if "rerun_baseline" in remedies:
            rerun_b.append(PlanEntry(case_id=r.case_id, reasons=codes))
        elif "rescore_baseline" in remedies:
            n = recordings.get(r.case_id)
            if n is None:
                exact = False
                b = r.baseline[0] if r.baseline else None
                if isinstance(b, Verdict) and b.provenance.steps_recorded is not None:
                    n = b.provenance.steps_recorded * max(1, len(r.baseline))
            calls += n or 0
            rescore.append(PlanEntry(case_id=r.case_id, judge_calls=n, reasons=codes))
    return RebaselinePlan(
        rescore=tuple(rescore),
        judge_calls=calls,
        judge_calls_exact=exact,
        rerun_baseline=tuple(rerun_b),
        rerun_candidate=tuple(rerun_c),
    )
