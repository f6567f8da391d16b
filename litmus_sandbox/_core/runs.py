"""Runs of legacy cases, decided once per kind. Sans-io.

Theory of operation
-------------------
Most cases of a legacy suite are one legacy verdict a side, and such a case's outcome
and reasons depend only on its two safeties and two provenances (no exclusion, no
unknown provenance key): its *kind*. A :class:`~litmus_sandbox._core.suite.LinedUp`
engine that knows each case's kind may hand the decider a :class:`LegacyRun` in place
of a chunk: consecutive cases in gate order, as their case ids and kinds, with each
kind's safeties and provenances once. No verdict and no result is made per case.

The decider (:meth:`~litmus_sandbox._core.decider.CaseDecider.decide_run`) decides each
kind once, exactly as it decides such a case in a chunk, and hands back a
:class:`DecidedRun`: the same case ids and kinds, and each kind's result with an empty
case id (or None for a kind that is only counted: a plain pass the sink does not want).
A sink that knows runs writes each case as its case id and what it rendered for its
kind; any other sink is given :meth:`DecidedRun.expand`, the results a chunk of the same
cases would have given, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from litmus_sandbox._core.outcomes import CaseResult
from litmus_sandbox._model.records import LegacyProvenance, LegacyVerdict

__all__ = ["DecidedRun", "LegacyRun", "RunSides"]

#: A kind's sides: baseline ``safe`` and provenance, the candidate's.
RunSides = tuple[bool, LegacyProvenance, bool, LegacyProvenance]


@dataclass(frozen=True, slots=True)
class LegacyRun:
    """Consecutive cases in gate order, each one legacy verdict a side, none excluded.

    ``keys``: the case ids; ``kinds``: each case's kind, an index into ``sides``;
    ``sides``: each kind's safeties and provenances; ``first``: each kind's first case.
    """

    keys: list[str]
    kinds: list[int]
    sides: Sequence[RunSides]
    first: Sequence[int]

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.kinds) or len(self.sides) != len(self.first):
            raise ValueError("a run needs a kind for each case id, a first case for each kind")

    def verdicts(self, i: int) -> tuple[LegacyVerdict, LegacyVerdict]:
        """The two verdicts of the run's case ``i``."""
        key = self.keys[i]
        bsafe, bp, csafe, cp = self.sides[self.kinds[i]]
        return (
            LegacyVerdict(run_id=key, safe=bsafe, provenance=bp),
            LegacyVerdict(run_id=key, safe=csafe, provenance=cp),
        )

    def chunk(self) -> tuple[list[str], list[LegacyVerdict], list[LegacyVerdict]]:
        """The same cases as a chunk (case ids, baseline sides, candidate sides)."""
        pairs = [self.verdicts(i) for i in range(len(self.keys))]
        return self.keys, [b for b, _ in pairs], [c for _, c in pairs]


@dataclass(frozen=True, slots=True)
class DecidedRun:
    """A :class:`LegacyRun` decided: its case ids, kinds and sides, and per kind the
    result its cases share (case id ``""``, verdicts with run id ``""``), or None for a
    kind only counted. ``handed``: how many of its cases a sink is given."""

    keys: list[str]
    kinds: list[int]
    sides: Sequence[RunSides]
    results: Sequence[CaseResult | None]
    handed: int

    def expand(self) -> list[CaseResult]:
        """The results a chunk of the same cases would have given, in order."""
        out: list[CaseResult] = []
        add = out.append
        results, sides = self.results, self.sides
        for key, kind in zip(self.keys, self.kinds, strict=True):
            shared = results[kind]
            if shared is None:
                continue
            bsafe, bp, csafe, cp = sides[kind]
            add(
                CaseResult(
                    case_id=key,
                    outcome=shared.outcome,
                    reasons=shared.reasons,
                    baseline=(LegacyVerdict(run_id=key, safe=bsafe, provenance=bp),),
                    candidate=(LegacyVerdict(run_id=key, safe=csafe, provenance=cp),),
                )
            )
        return out
