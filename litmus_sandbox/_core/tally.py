"""Deciding a suite's cases a chunk at a time, and tallying them as they go. Sans-io.

Theory of operation
-------------------
Whatever way the cases of a suite are lined up (every join of ``_core/joins.py`` and
``_core/spill.py``), they reach :class:`CaseDecider` as chunks: parallel lists of case
ids, baseline sides and candidate sides, where a side is one verdict, a list of verdicts
(epochs) or None (no verdict). The decider decides each case exactly as
:func:`~litmus_sandbox._core.gate.compare_case` does; a single-epoch legacy pair that
passes every check is decided inline, because a suite can hold millions of them.

A single-epoch legacy pair that does not pass is decided by ``compare_case`` once per
kind: its outcome and reasons depend only on the two provenances and safeties (no
exclusion, no unknown provenance key), so they are kept per kind (up to a few thousand
kinds) and shared by the cases of that kind. The tally, likewise, reads once per tuple of
reasons which codes and plan lists it stands for.

:class:`SuiteTally` keeps what a summary needs and nothing per case but the re-baseline
plan: outcome counts, reason codes (once per case), the cases ``--strict-oracle`` blocks
on, and a plan entry for each unresolved case. The decider tallies every case it
decides; it hands back the results a consumer asked for (all, or all but the plain
passes, which are only counted).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from litmus_sandbox._core.gate import (
    ANNOTATIONS,
    OUTCOMES,
    CaseResult,
    Outcome,
    Reason,
    compare_case,
)
from litmus_sandbox._core.summary import (
    GateSummary,
    PlanEntry,
    RebaselinePlan,
    Statistics,
    mcnemar_exact_p,
)
from litmus_sandbox._model.records import (
    NO_UNKNOWN_KEYS,
    AnyVerdict,
    LegacyProvenance,
    LegacyVerdict,
    Verdict,
)

#: One side of a case: its verdict, its epochs' verdicts, or None (no verdict).
Side = AnyVerdict | list[AnyVerdict] | None

_REBASE: Outcome = "NEEDS_REBASELINE"
_RERUN: Outcome = "NEEDS_RERUN"
_outcome = operator.attrgetter("outcome")
#: Kinds of cases (and of reasons) kept at most, each: past this, they are forgotten.
_KEPT = 4096
_code = operator.attrgetter("code")


class SuiteTally:
    """Counts, grouped reasons and the re-baseline plan of a suite, built case by case.

    ``count`` takes every case's outcome; ``note`` the results that may carry reasons
    (those that went through ``compare_case``).
    """

    def __init__(self, recordings: Mapping[str, int | None]) -> None:
        self._recordings = recordings
        self._counts: Counter[str] = Counter()
        self._still_unsafe = 0
        self._reasons: Counter[str] = Counter()
        self._blocking = 0
        self._rescore: list[PlanEntry] = []
        self._rerun_baseline: list[PlanEntry] = []
        self._rerun_candidate: list[PlanEntry] = []
        self._calls = 0
        self._exact = True
        #: Reasons -> (their codes, the plan's codes, the plan's remedies): see _kind.
        self._kinds: dict[tuple[Reason, ...], _Kind] = {}

    def count(self, outcomes: Iterable[str]) -> None:
        self._counts.update(outcomes)

    def count_passes(self, n: int) -> None:
        self._counts["PASS"] += n

    def count_still_unsafe(self, n: int) -> None:
        """``n`` PASS cases unsafe on both sides (counted as passes too)."""
        self._still_unsafe += n

    def note(self, results: Iterable[CaseResult]) -> None:
        kinds = self._kinds
        # The decider hands the cases of one kind one tuple of reasons: it is looked up by
        # identity (the results hold every tuple alive meanwhile), and its codes counted
        # once per tuple at the end, not once per case.
        seen: dict[int, list[Any]] = {}
        for r in results:
            reasons = r.reasons
            if not reasons:
                continue
            entry = seen.get(id(reasons))
            if entry is None:
                kind = kinds.get(reasons)
                if kind is None:
                    if len(kinds) > _KEPT:
                        kinds.clear()
                    kind = kinds[reasons] = _kind(reasons)
                entry = seen[id(reasons)] = [kind, 0]
            entry[1] += 1
            kind = entry[0]
            if kind[3] and r.outcome != "EXCLUDED":
                self._blocking += 1
            if r.outcome == _REBASE or r.outcome == _RERUN:
                self._plan(r, kind[1], kind[2])
        counts = self._reasons
        for kind, n in seen.values():
            for code in kind[0]:
                counts[code] += n

    def _plan(self, r: CaseResult, codes: tuple[str, ...], remedies: frozenset[str]) -> None:
        if "rerun_candidate" in remedies:
            self._rerun_candidate.append(PlanEntry(case_id=r.case_id, reasons=codes))
        if "rerun_baseline" in remedies:
            self._rerun_baseline.append(PlanEntry(case_id=r.case_id, reasons=codes))
        elif "rescore_baseline" in remedies:
            n = self._recordings.get(r.case_id)
            if n is None:
                self._exact = False
                b = r.baseline[0] if r.baseline else None
                if isinstance(b, Verdict) and b.provenance.steps_recorded is not None:
                    n = b.provenance.steps_recorded * max(1, len(r.baseline))
            self._calls += n or 0
            self._rescore.append(PlanEntry(case_id=r.case_id, judge_calls=n, reasons=codes))

    def summary(self, unknown_exclusions: Iterable[str] = ()) -> GateSummary:
        counts: dict[str, int] = {o: self._counts.get(o, 0) for o in OUTCOMES}
        regressions, improvements = counts["REGRESSION"], counts["IMPROVEMENT"]
        grouped = dict(sorted(self._reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        stats = Statistics(
            cases=sum(counts.values()),
            comparable=counts["PASS"] + regressions + improvements,
            safe_to_unsafe=regressions,
            unsafe_to_safe=improvements,
            mcnemar_p=mcnemar_exact_p(regressions, improvements),
            # Cases carrying the code, as CaseResult.flaky and .contradicted tell them.
            flaky=grouped.get("flaky", 0),
            oracle_contradictions=grouped.get("oracle_contradicts_judge", 0),
            still_unsafe=self._still_unsafe,
        )
        plan = RebaselinePlan(
            rescore=tuple(self._rescore),
            judge_calls=self._calls,
            judge_calls_exact=self._exact,
            rerun_baseline=tuple(self._rerun_baseline),
            rerun_candidate=tuple(self._rerun_candidate),
        )
        return GateSummary(
            counts=counts,
            statistics=stats,
            rebaseline_plan=plan,
            unknown_exclusions=tuple(sorted(unknown_exclusions)),
            reasons=grouped,
            blocking_contradictions=self._blocking,
        )


class CaseDecider:
    """Decides chunks of cases (see the module docstring) into a :class:`SuiteTally`.

    ``plain``: also return the plain passes (comparable legacy pairs safe on both sides,
    decided inline as PASS, which carry no reason); without it they are only counted.
    Passes unsafe on both sides are always returned: every report calls them out.
    """

    def __init__(
        self,
        tally: SuiteTally,
        exclusions: Mapping[str, str],
        recordings: Mapping[str, int | None],
        *,
        plain: bool = True,
    ) -> None:
        self.tally = tally
        self._exclusions = exclusions
        self._recordings = recordings
        self._plain = plain
        #: Exclusions that named a case decided so far.
        self.matched: set[str] = set()
        #: (baseline provenance, candidate's, safeties) -> (outcome, reasons) of legacy
        #: pairs that do not pass (see the module docstring).
        self._decided: dict[
            tuple[LegacyProvenance, LegacyProvenance, bool, bool],
            tuple[Outcome, tuple[Reason, ...]],
        ] = {}

    def decide(
        self, keys: Sequence[str], bs: Sequence[Side], cs: Sequence[Side], *, note: bool = True
    ) -> list[CaseResult]:
        """Decide the cases of one chunk, in order; tally them all and return the results
        asked for. ``note=False``: count them only; the caller notes the results in the
        tally later, in gate order (:meth:`SuiteTally.note`)."""
        exclusions = self._exclusions
        if exclusions:
            self.matched.update(k for k in keys if k in exclusions)
        out: list[CaseResult] = []
        checked: list[CaseResult] = []
        passes, still_unsafe = self._chunk(keys, bs, cs, out, checked)
        tally = self.tally
        tally.count(map(_outcome, out))
        if passes:
            tally.count_passes(passes)
        if still_unsafe:
            tally.count_still_unsafe(still_unsafe)
        if note:
            tally.note(checked)
        return out

    def _chunk(
        self,
        keys: Sequence[str],
        bs: Sequence[Side],
        cs: Sequence[Side],
        out: list[CaseResult],
        checked: list[CaseResult],
    ) -> tuple[int, int]:
        """Decide a chunk case by case; returns how many plain passes were only counted,
        and how many passes are unsafe on both sides.

        One pass reads each verdict once: one side's verdicts come out of their own order
        (the candidate's in the baseline's, or the other way round in the probe), so every
        further pass over them would miss the cache again (passes a column at a time
        measured slower than this loop).
        """
        add = out.append
        passes = still_unsafe = 0
        plain = self._plain
        exclusions = self._exclusions
        legacy = LegacyVerdict
        no_keys = NO_UNKNOWN_KEYS
        decided = self._decided
        for key, b, c in zip(keys, bs, cs, strict=True):
            # Exact types only (a subclass takes the general path). Equal provenance structs
            # compare all four fields at C speed; then only the baseline's need be known.
            if type(b) is legacy and type(c) is legacy:
                bp = b.provenance
                if (
                    bp == c.provenance
                    # What the reference's rule compares is known: then equal provenance compares.
                    and bp.judge_version is not None
                    and bp.steps_covered is not None
                    and bp.truncate_on_refusal is not None
                    and bp.truncate_on_empty_tool_result is not None
                    and (b.unknown_provenance is no_keys or not b.unknown_provenance)
                    and (c.unknown_provenance is no_keys or not c.unknown_provenance)
                    and key not in exclusions
                ):
                    if b.safe is c.safe:
                        if not b.safe:
                            still_unsafe += 1
                        elif not plain:
                            passes += 1
                            continue
                        outcome: Outcome = "PASS"
                    else:
                        outcome = "REGRESSION" if b.safe else "IMPROVEMENT"
                    add(
                        CaseResult(
                            case_id=key, outcome=outcome, reasons=(), baseline=(b,), candidate=(c,)
                        )
                    )
                    continue
                elif (
                    not b.unknown_provenance and not c.unknown_provenance and key not in exclusions
                ):
                    # Decided once per kind of pair (see the module docstring).
                    kind_key = (bp, c.provenance, b.safe, c.safe)
                    kind = decided.get(kind_key)
                    if kind is None:
                        if len(decided) > _KEPT:
                            decided.clear()
                        result = self._compare(key, b, c)
                        decided[kind_key] = (result.outcome, result.reasons)
                    else:
                        result = CaseResult(
                            case_id=key,
                            outcome=kind[0],
                            reasons=kind[1],
                            baseline=(b,),
                            candidate=(c,),
                        )
                    add(result)
                    checked.append(result)
                    if result.outcome == "PASS" and not c.safe:
                        still_unsafe += 1
                    continue
            result = self._compare(key, b, c)
            add(result)
            checked.append(result)
            if result.outcome == "PASS" and result.still_unsafe:
                still_unsafe += 1
        return passes, still_unsafe

    def _compare(self, key: str, b: Side, c: Side) -> CaseResult:
        return compare_case(
            key,
            _verdicts(b),
            _verdicts(c),
            baseline_recorded=key in self._recordings,
            exclusion=self._exclusions.get(key),
        )

    def unknown_exclusions(self) -> list[str]:
        """Exclusions that named no case decided."""
        return [k for k in self._exclusions if k not in self.matched]


#: A tuple of reasons' codes; the codes and remedies of those that settle the case (what
#: the re-baseline plan lists); whether a contradiction is among them.
_Kind = tuple[frozenset[str], tuple[str, ...], frozenset[str], bool]


def _kind(reasons: tuple[Reason, ...]) -> _Kind:
    """What the tally reads of ``reasons`` (see :data:`_Kind`)."""
    settling = [x for x in reasons if x.remedy is not None and x.code not in ANNOTATIONS]
    codes = frozenset(map(_code, reasons))
    return (
        codes,
        tuple(sorted({x.code for x in settling})),
        frozenset(x.remedy for x in settling if x.remedy is not None),
        "oracle_contradicts_judge" in codes,
    )


def _verdicts(side: Side) -> Sequence[AnyVerdict]:
    if side is None:
        return ()
    if isinstance(side, list):
        return side
    return (side,)
