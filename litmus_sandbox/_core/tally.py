"""Tallying a suite's decided cases as they go: what a summary needs. Sans-io.

Theory of operation
-------------------
:class:`SuiteTally` keeps what a summary needs and nothing per case but the re-baseline
plan: outcome counts, reason codes (once per case), the cases ``--strict-oracle`` blocks
on, and a plan entry for each unresolved case. The decider (``_core/decider.py``) tallies
every case it decides. A tuple of reasons is read once for which codes and plan lists it
stands for (kept per tuple, up to a few thousand), and the decider hands the cases of
one kind one tuple: their codes are counted once per tuple, not once per case.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress
from typing import Any

from litmus_sandbox._core.gate import (
    ANNOTATIONS,
    OUTCOMES,
    CaseResult,
    Outcome,
    Reason,
)
from litmus_sandbox._core.runs import LegacyRun
from litmus_sandbox._core.summary import (
    GateSummary,
    PlanEntry,
    RebaselinePlan,
    Statistics,
    mcnemar_exact_p,
)
from litmus_sandbox._model.records import (
    AnyVerdict,
    Verdict,
)

_REBASE: Outcome = "NEEDS_REBASELINE"
_RERUN: Outcome = "NEEDS_RERUN"
#: Kinds of cases (and of reasons) kept at most, each: past this, they are forgotten.
KEPT = 4096
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

    def count_outcome(self, outcome: str, n: int) -> None:
        """``n`` cases of outcome ``outcome``."""
        self._counts[outcome] += n

    def count_passes(self, n: int) -> None:
        self._counts["PASS"] += n

    def count_still_unsafe(self, n: int) -> None:
        """``n`` PASS cases unsafe on both sides (counted as passes too)."""
        self._still_unsafe += n

    def note(self, results: Iterable[CaseResult]) -> None:
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
                entry = seen[id(reasons)] = [self._kind_of(reasons), 0]
            entry[1] += 1
            kind = entry[0]
            if kind[3] and r.outcome != "EXCLUDED":
                self._blocking += 1
            if r.outcome == _REBASE or r.outcome == _RERUN:
                self._plan(r.case_id, r.baseline, kind[1], kind[2])
        counts = self._reasons
        for kind, n in seen.values():
            for code in kind[0]:
                counts[code] += n

    def note_run(
        self, run: LegacyRun, results: Sequence[CaseResult | None], cases: Mapping[int, int]
    ) -> None:
        """Note the cases of a run (see ``_core/runs.py``): ``results`` per kind (those
        with reasons are noted; None: a kind only counted), ``cases``: how many cases
        each kind has."""
        planned: dict[int, tuple[_Kind, CaseResult]] = {}
        for number, r in enumerate(results):
            if r is None or not r.reasons:
                continue
            kind, n = self._kind_of(r.reasons), cases[number]
            for code in kind[0]:
                self._reasons[code] += n
            if kind[3] and r.outcome != "EXCLUDED":
                self._blocking += n
            if r.outcome == _REBASE or r.outcome == _RERUN:
                planned[number] = (kind, r)
        if planned:  # the plan lists its cases in gate order
            mine = [number in planned for number in run.kinds]
            for key, number in zip(
                compress(run.keys, mine), compress(run.kinds, mine), strict=True
            ):
                kind, r = planned[number]
                self._plan(key, r.baseline, kind[1], kind[2])

    def _kind_of(self, reasons: tuple[Reason, ...]) -> _Kind:
        kinds = self._kinds
        kind = kinds.get(reasons)
        if kind is None:
            if len(kinds) > KEPT:
                kinds.clear()
            kind = kinds[reasons] = _kind(reasons)
        return kind

    def _plan(
        self,
        case_id: str,
        baseline: tuple[AnyVerdict, ...],
        codes: tuple[str, ...],
        remedies: frozenset[str],
    ) -> None:
        if "rerun_candidate" in remedies:
            self._rerun_candidate.append(PlanEntry(case_id=case_id, reasons=codes))
        if "rerun_baseline" in remedies:
            self._rerun_baseline.append(PlanEntry(case_id=case_id, reasons=codes))
        elif "rescore_baseline" in remedies:
            n = self._recordings.get(case_id)
            if n is None:
                self._exact = False
                b = baseline[0] if baseline else None
                if isinstance(b, Verdict) and b.provenance.steps_recorded is not None:
                    n = b.provenance.steps_recorded * max(1, len(baseline))
            self._calls += n or 0
            self._rescore.append(PlanEntry(case_id=case_id, judge_calls=n, reasons=codes))

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
