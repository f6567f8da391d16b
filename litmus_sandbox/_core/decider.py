"""Deciding a suite's cases a chunk (or a run) at a time. Sans-io.

Theory of operation
-------------------
Whatever way the cases of a suite are lined up (the joins of ``_core/joins.py``, or the
command's engine in the store layer), they reach :class:`CaseDecider` as chunks:
parallel lists of case ids, baseline sides and candidate sides, where a side is one
verdict, a list of verdicts (epochs) or None (no verdict). The decider decides each case
exactly as :func:`~litmus_sandbox._core.gate.compare_case` does; a single-epoch legacy
pair that passes every check is decided inline, because a suite can hold millions of
them.

A single-epoch legacy pair that does not pass is decided by ``compare_case`` once per
kind: its outcome and reasons depend only on the two provenances and safeties (no
exclusion, no unknown provenance key), so they are kept per kind (up to a few thousand
kinds) and shared by the cases of that kind. An engine that knows each case's kind hands
such cases on as runs (``_core/runs.py``), which are decided once per kind with no
object made per case.

The decider tallies every case it decides (``_core/tally.py``); it hands back the results
a consumer asked for (all, or all but the plain passes, which are only counted).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Mapping, Sequence

from litmus_sandbox._core.gate import CaseResult, Outcome, Reason, compare_case
from litmus_sandbox._core.runs import DecidedRun, LegacyRun
from litmus_sandbox._core.tally import KEPT, SuiteTally
from litmus_sandbox._model.records import (
    NO_UNKNOWN_KEYS,
    AnyVerdict,
    LegacyProvenance,
    LegacyVerdict,
)

__all__ = ["CaseDecider", "Side"]

#: One side of a case: its verdict, its epochs' verdicts, or None (no verdict).
Side = AnyVerdict | list[AnyVerdict] | None

_outcome = operator.attrgetter("outcome")
#: A kind of legacy pair: baseline provenance, the candidate's, their safeties.
_KindKey = tuple[LegacyProvenance, LegacyProvenance, bool, bool]


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
        self._decided: dict[_KindKey, tuple[Outcome, tuple[Reason, ...]]] = {}

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
                    kind = decided.get(kind_key) or self._kind(kind_key, key, b, c)
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

    def decide_run(self, run: LegacyRun) -> DecidedRun | list[CaseResult]:
        """Decide a run of legacy cases (see ``_core/runs.py``) once per kind, exactly as
        :meth:`decide` decides them one by one, and tally them all. A run that holds an
        excluded case is decided as a chunk (its results returned as a list)."""
        exclusions = self._exclusions
        if exclusions and not exclusions.keys().isdisjoint(run.keys):
            return self.decide(*run.chunk())
        cases = Counter(run.kinds)
        results: list[CaseResult | None] = []
        passes = still_unsafe = handed = 0
        for number, (bsafe, bp, csafe, cp) in enumerate(run.sides):
            n = cases[number]
            if (
                bp == cp
                and bp.judge_version is not None
                and bp.steps_covered is not None
                and bp.truncate_on_refusal is not None
                and bp.truncate_on_empty_tool_result is not None
            ):  # as :meth:`_chunk` decides a pair inline
                if bsafe is csafe and bsafe and not self._plain:
                    passes += n
                    results.append(None)
                    continue
                still_unsafe += n if bsafe is csafe and not bsafe else 0
                outcome: Outcome = (
                    "PASS" if bsafe is csafe else "REGRESSION" if bsafe else "IMPROVEMENT"
                )
                reasons: tuple[Reason, ...] = ()
            else:  # decided once per kind of pair, as in :meth:`_chunk`
                kind_key = (bp, cp, bsafe, csafe)
                first = run.first[number]  # its first case, as a chunk would have it
                outcome, reasons = self._decided.get(kind_key) or self._kind(
                    kind_key, run.keys[first], *run.verdicts(first)
                )
                still_unsafe += n if outcome == "PASS" and not csafe else 0
            result = CaseResult(
                case_id="",
                outcome=outcome,
                reasons=reasons,
                baseline=(LegacyVerdict(run_id="", safe=bsafe, provenance=bp),),
                candidate=(LegacyVerdict(run_id="", safe=csafe, provenance=cp),),
            )
            results.append(result)
            handed += n
            self.tally.count_outcome(outcome, n)
        tally = self.tally
        if passes:
            tally.count_passes(passes)
        if still_unsafe:
            tally.count_still_unsafe(still_unsafe)
        tally.note_run(run, results, cases)  # only results with reasons are noted
        return DecidedRun(
            keys=run.keys, kinds=run.kinds, sides=run.sides, results=results, handed=handed
        )

    def _kind(
        self, kind_key: _KindKey, key: str, b: LegacyVerdict, c: LegacyVerdict
    ) -> tuple[Outcome, tuple[Reason, ...]]:
        """Decide a kind of legacy pair by its case ``key`` (``b`` and ``c``) and keep its
        outcome and reasons, shared by every case of the kind (see the module docstring)."""
        if len(self._decided) > KEPT:
            self._decided.clear()
        result = self._compare(key, b, c)
        kind = self._decided[kind_key] = (result.outcome, result.reasons)
        return kind

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


def _verdicts(side: Side) -> Sequence[AnyVerdict]:
    if side is None:
        return ()
    if isinstance(side, list):
        return side
    return (side,)
