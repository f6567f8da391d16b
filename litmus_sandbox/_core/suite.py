"""The suite gate, sans-io: every case decided, then counts, statistics and a re-baseline plan.

:func:`gate` groups verdicts by case (several per side are epochs), decides each case with
:func:`~litmus_sandbox._core.gate.compare_case` (comparable single-epoch legacy pairs are decided
inline, identically, because a suite can hold millions of them), and reduces the results to
outcome counts, flip statistics with an exact McNemar p-value, and a plan of what to
re-score or re-run.

The gate leaves the cyclic garbage collector alone (it runs among the caller's threads).
What it keeps per case holds no reference cycles and is not tracked (``gc=False``
records), so the collections a large suite triggers find little to scan and nothing
survives into the older generations: a million cases trigger no full collection.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import chain

import msgspec

from litmus_sandbox._core.gate import ANNOTATIONS, OUTCOMES, CaseResult, Outcome, compare_case
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict, Verdict

_REBASE: Outcome = "NEEDS_REBASELINE"
_RERUN: Outcome = "NEEDS_RERUN"


class Statistics(msgspec.Struct, frozen=True, kw_only=True):
    """Suite statistics over the comparable cases (PASS, IMPROVEMENT, REGRESSION)."""

    cases: int
    comparable: int
    safe_to_unsafe: int
    unsafe_to_safe: int
    mcnemar_p: float
    flaky: int
    oracle_contradictions: int


# gc=False: strings and ints only, so no cycle; a suite can hold one per case.
class PlanEntry(msgspec.Struct, frozen=True, kw_only=True, gc=False):
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
    #: Reasons grouped: reason code -> cases carrying it, most frequent first.
    reasons: dict[str, int] = {}

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


#: Up to this many discordant pairs the p-value is summed in integers (exact, correctly
#: rounded once); beyond, in log space.
_EXACT_UP_TO = 2000


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    if n <= _EXACT_UP_TO:
        count = sum(math.comb(n, i) for i in range(k + 1))
        return min(1.0, (2 * count) / (1 << n))  # int / int: correctly rounded
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
_code = operator.attrgetter("code")


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
    c_aligned: Sequence[AnyVerdict | None],
    c_only: Sequence[tuple[str, AnyVerdict]],
    exclusions: Mapping[str, str],
    recordings: Mapping[str, int | None],
) -> tuple[list[CaseResult], list[CaseResult]]:
    """``compare_case`` for every case, in gate order, when no case has several epochs.

    ``c_aligned`` holds the candidate verdict of each baseline case (None when missing);
    ``c_only`` the candidate's cases the baseline lacks, in candidate order.

    A legacy pair that passes every check of ``_check_legacy_pair`` and ``_check_unknown``
    (judge version, truncation flags and ``steps_covered`` known and equal, no unknown
    provenance keys) and is not excluded is decided here as ``compare_case`` would decide
    it; every other case goes through ``compare_case``. Returns all results and, in the
    same order, those that went through ``compare_case`` (the only ones with reasons).
    """
    results: list[CaseResult] = []
    checked: list[CaseResult] = []
    add = results.append
    legacy = LegacyVerdict
    for key, b, c in zip(b_keys, b_list, c_aligned, strict=True):
        # Exact types only (a subclass takes the general path). Equal provenance structs
        # compare all four fields at C speed; then only the baseline's need be known.
        if type(b) is legacy and type(c) is legacy:
            bp = b.provenance
            if (
                bp == c.provenance
                and bp.judge_version is not None
                and bp.truncate_on_refusal is not None
                and bp.truncate_on_empty_tool_result is not None
                and bp.steps_covered is not None
                and not b.unknown_provenance
                and not c.unknown_provenance
                and key not in exclusions
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
    for key, c in c_only:
        result = compare_case(
            key,
            [],
            [c],
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
    return _gate(baseline, candidate, exclusions or {}, baseline_recordings or {})


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
    results: list[CaseResult]
    single = len(b_key_set) == len(b_keys)
    c_aligned: Sequence[AnyVerdict | None] = []
    c_key_set: AbstractSet[str]
    c_only: list[tuple[str, AnyVerdict]] = []
    if single and b_keys == c_keys:
        # The same cases in the same order (a harness that runs them one at a time): the
        # candidate lines up with the baseline as it is, with no join.
        c_aligned, c_key_set = c_list, b_key_set
    else:
        c_by_key = dict(zip(c_keys, c_list, strict=True))
        c_key_set = c_by_key.keys()
        single = single and len(c_by_key) == len(c_keys)
        if single:
            c_aligned = list(map(c_by_key.get, b_keys))
            if len(c_by_key) > len(b_keys) - c_aligned.count(None):
                c_only = [(k, c_by_key[k]) for k in c_keys if k not in b_key_set]
    if single:
        # One verdict per case and side (the common case): no grouping, no epoch checks.
        results, checked = _single_epochs(b_keys, b_list, c_aligned, c_only, exclusions, recordings)
        unknown = [k for k in exclusions if k not in b_key_set and k not in c_key_set]
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
    grouped = _group_reasons(checked)
    stats = Statistics(
        cases=len(results),
        comparable=counts["PASS"] + regressions + improvements,
        safe_to_unsafe=regressions,
        unsafe_to_safe=improvements,
        mcnemar_p=mcnemar_exact_p(regressions, improvements),
        # Cases carrying the code, as CaseResult.flaky and .contradicted tell them.
        flaky=grouped.get("flaky", 0),
        oracle_contradictions=grouped.get("oracle_contradicts_judge", 0),
    )
    return GateReport(
        cases=tuple(results),
        counts=counts,
        statistics=stats,
        rebaseline_plan=_plan(checked, recordings),
        unknown_exclusions=tuple(sorted(unknown)),
        reasons=grouped,
    )


def _group_reasons(results: Sequence[CaseResult]) -> dict[str, int]:
    """Reason code -> number of cases carrying it (once per case), most frequent first."""
    tally = Counter(chain.from_iterable(set(map(_code, r.reasons)) for r in results if r.reasons))
    return dict(sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))


def _plan(results: Sequence[CaseResult], recordings: Mapping[str, int | None]) -> RebaselinePlan:
    rescore: list[PlanEntry] = []
    rerun_b: list[PlanEntry] = []
    rerun_c: list[PlanEntry] = []
    calls, exact = 0, True
    for r in results:
        if r.outcome not in (_REBASE, _RERUN):
            continue
        settling = [x for x in r.reasons if x.remedy is not None and x.code not in ANNOTATIONS]
        remedies = {x.remedy for x in settling}
        codes = tuple(sorted({x.code for x in settling}))
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
