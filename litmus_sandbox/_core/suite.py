"""The suite gate, sans-io: every case decided, then counts, statistics and a re-baseline plan.

Theory of operation
-------------------
The cases of a suite reach the decider lined up in *gate order*: the baseline's cases as
they first appear, then those only the candidate has, in its order, each case with all
its verdicts on each side (several are epochs), as chunks of parallel lists
``(case ids, baseline sides, candidate sides)``. The decider
(:class:`~litmus_sandbox._core.decider.CaseDecider`) decides each case as
:func:`~litmus_sandbox._core.gate.compare_case` does, hands the results to a
:class:`CaseSink` a chunk at a time, and keeps only what the summary needs
(:class:`~litmus_sandbox._core.tally.SuiteTally`).

Who lines the cases up:

* :func:`gate_lined_up`: a :class:`LinedUp` engine (the command's: DuckDB, in the store
  layer), which may count the plain passes itself and hand on only the cases that need
  a decision;
* :func:`stream_gate` and :func:`gate`: verdicts given as Python objects, joined in
  memory (``_core/joins.py``).

The gate leaves the cyclic garbage collector alone (it runs among the caller's threads).
What it keeps per case holds no reference cycles and is not tracked (``gc=False``
records), so the collections a large suite triggers find little to scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from litmus_sandbox._core.decider import CaseDecider
from litmus_sandbox._core.gate import CaseResult
from litmus_sandbox._core.joins import Chunk, chunked, memory_join
from litmus_sandbox._core.runs import DecidedRun, LegacyRun
from litmus_sandbox._core.summary import EXIT_CODES as EXIT_CODES
from litmus_sandbox._core.summary import Decision as Decision
from litmus_sandbox._core.summary import GateReport as GateReport
from litmus_sandbox._core.summary import GateSummary as GateSummary
from litmus_sandbox._core.summary import PlanEntry as PlanEntry
from litmus_sandbox._core.summary import RebaselinePlan as RebaselinePlan
from litmus_sandbox._core.summary import Statistics as Statistics
from litmus_sandbox._core.summary import UnsafeLimit as UnsafeLimit
from litmus_sandbox._core.summary import mcnemar_exact_p as mcnemar_exact_p
from litmus_sandbox._core.tally import SuiteTally
from litmus_sandbox._model.records import AnyVerdict


class CaseSink(Protocol):
    """Where :func:`stream_gate` puts the decided cases, a chunk at a time, in gate order.

    ``plain``: whether the sink wants the plain passes too (comparable cases safe on
    both sides that PASS with no reason, decided inline); without them they are only
    counted. A pass unsafe on both sides is always handed on.

    A sink may also have ``write_run(run: DecidedRun)``, to take a run of legacy cases
    as it is (``_core/runs.py``: their case ids, and each kind's result once); a sink
    without it is given the run's results one by one.
    """

    plain: bool

    def write(self, results: Sequence[CaseResult]) -> None: ...


class LinedUp(Protocol):
    """Both sides of a suite lined up case by case in gate order (see the module docstring).

    ``chunks``: the cases, as chunks or as runs of legacy cases (``_core/runs.py``),
    plain passes included only with ``plain``; without it, once the chunks are consumed,
    ``passes`` is how many plain passes were left out (one verdict a side, both safe,
    equal and fully known legacy provenance, not excluded).
    """

    passes: int

    def chunks(self, *, plain: bool) -> Iterator[Chunk | LegacyRun]: ...


def gate(
    baseline: Iterable[AnyVerdict],
    candidate: Iterable[AnyVerdict],
    *,
    exclusions: Mapping[str, str] | None = None,
    baseline_recordings: Mapping[str, int | None] | None = None,
) -> GateReport:
    """Gate a candidate suite against a baseline suite, every case kept in memory.

    Args:
        baseline: baseline verdicts (native or legacy); several per case are epochs.
        candidate: candidate verdicts.
        exclusions: case id -> reason; such cases are EXCLUDED, keeping their reasons.
        baseline_recordings: case id -> judge calls a re-score of its complete baseline
            recording would take under the candidate's judge after the cache (None when
            unknown). Cases listed here get ``rescore_baseline`` as the remedy for a
            missing baseline verdict, and exact counts in the re-baseline plan.
    """
    kept = _Kept()
    summary = stream_gate(
        baseline,
        candidate,
        kept,
        exclusions=exclusions,
        baseline_recordings=baseline_recordings,
    )
    fields = {f: getattr(summary, f) for f in GateSummary.__struct_fields__}
    return GateReport(cases=tuple(kept.cases), **fields)


class _Kept:
    plain = True

    def __init__(self) -> None:
        self.cases: list[CaseResult] = []

    def write(self, results: Sequence[CaseResult]) -> None:
        self.cases.extend(results)


def stream_gate(
    baseline: Iterable[AnyVerdict],
    candidate: Iterable[AnyVerdict],
    sink: CaseSink,
    *,
    exclusions: Mapping[str, str] | None = None,
    baseline_recordings: Mapping[str, int | None] | None = None,
) -> GateSummary:
    """Gate a candidate suite against a baseline suite held in memory, handing each case
    to ``sink`` as it is decided, in gate order; only the summary is kept.

    Args:
        baseline, candidate, exclusions, baseline_recordings: as :func:`gate`.
        sink: takes the decided cases.
    """
    return _decide(
        chunked(*memory_join(list(baseline), list(candidate))),
        0,
        sink,
        exclusions=exclusions,
        baseline_recordings=baseline_recordings,
    )


def gate_lined_up(
    lined: LinedUp,
    sink: CaseSink,
    *,
    exclusions: Mapping[str, str] | None = None,
    baseline_recordings: Mapping[str, int | None] | None = None,
) -> GateSummary:
    """Gate a suite that ``lined`` lines up (the command's engine), handing each case to
    ``sink`` as it is decided, in gate order; only the summary is kept.

    Args:
        lined: the cases in gate order (its plain passes only counted when ``sink``
            does not want them).
        sink, exclusions, baseline_recordings: as :func:`stream_gate`.
    """
    return _decide(
        lined.chunks(plain=sink.plain),
        lambda: lined.passes,
        sink,
        exclusions=exclusions,
        baseline_recordings=baseline_recordings,
    )


def _decide(
    chunks: Iterable[Chunk | LegacyRun],
    passes: int | Callable[[], int],
    sink: CaseSink,
    *,
    exclusions: Mapping[str, str] | None,
    baseline_recordings: Mapping[str, int | None] | None,
) -> GateSummary:
    exclusions = exclusions or {}
    recordings = baseline_recordings or {}
    decider = CaseDecider(SuiteTally(recordings), exclusions, recordings, plain=sink.plain)
    write_run = getattr(sink, "write_run", None)
    for chunk in chunks:
        if isinstance(chunk, LegacyRun):
            decided = decider.decide_run(chunk)
            if isinstance(decided, DecidedRun):
                if decided.handed:
                    if write_run is not None:
                        write_run(decided)
                    else:
                        sink.write(decided.expand())
                continue
            results = decided
        else:
            results = decider.decide(*chunk)
        if results:
            sink.write(results)
    counted = passes if isinstance(passes, int) else passes()
    if counted:
        decider.tally.count_passes(counted)
    return decider.tally.summary(decider.unknown_exclusions())
