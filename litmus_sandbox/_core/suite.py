"""The suite gate, sans-io: every case decided, then counts, statistics and a re-baseline plan.

Theory of operation
-------------------
:func:`stream_gate` lines the two sides' verdicts up case by case, decides each case as
:func:`~litmus_sandbox._core.gate.compare_case` does, hands the results to a
:class:`CaseSink` a chunk at a time, and keeps only what the summary needs
(:class:`~litmus_sandbox._core.tally.SuiteTally`). How the cases are lined up:

* ``order`` given (``"sorted"`` or ``"lockstep"``, as
  :func:`~litmus_sandbox._core.joins.merge_order` tells from the case ids): a merge that
  holds only the current case of each side;
* otherwise the baseline is held, and the candidate probed against it a block at a time
  (``_core/probe.py``: the fastest way, for a sink that does not want the plain passes);
  where the probe does not apply, both sides are held and joined in memory; with
  ``buckets`` (somewhere to spill) and past ``memory_budget``, a partitioned join
  through them instead (``_core/spill.py``), chosen at once when ``size_hint`` says the
  input will not fit.

Every way gives the same cases in the same order: the baseline's cases as they first
appear, then those only the candidate has. :func:`gate` is the in-memory way, every case
kept (:class:`GateReport`).

The gate leaves the cyclic garbage collector alone (it runs among the caller's threads).
What it keeps per case holds no reference cycles and is not tracked (``gc=False``
records), so the collections a large suite triggers find little to scan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from litmus_sandbox._core.gate import CaseResult
from litmus_sandbox._core.joins import Chunk, MergeOrder, chunked, memory_join, merge_join
from litmus_sandbox._core.probe import Reading, blocks_of, probe_join
from litmus_sandbox._core.spill import Buckets, PartitionedJoin, SpilledDeferred
from litmus_sandbox._core.summary import EXIT_CODES as EXIT_CODES
from litmus_sandbox._core.summary import Decision as Decision
from litmus_sandbox._core.summary import GateReport as GateReport
from litmus_sandbox._core.summary import GateSummary as GateSummary
from litmus_sandbox._core.summary import PlanEntry as PlanEntry
from litmus_sandbox._core.summary import RebaselinePlan as RebaselinePlan
from litmus_sandbox._core.summary import Statistics as Statistics
from litmus_sandbox._core.summary import UnsafeLimit as UnsafeLimit
from litmus_sandbox._core.summary import mcnemar_exact_p as mcnemar_exact_p
from litmus_sandbox._core.tally import CaseDecider, SuiteTally
from litmus_sandbox._model.records import AnyVerdict

#: Bytes (about) the in-memory join may hold before it spills, by default.
DEFAULT_MEMORY_BUDGET = 1 << 30
#: Decoded verdicts take about this many times their bytes in a JSON Lines file.
_DECODED_PER_FILE_BYTE = 1.7


class CaseSink(Protocol):
    """Where :func:`stream_gate` puts the decided cases, a chunk at a time, in gate order.

    ``plain``: whether the sink wants the plain passes too (comparable cases safe on
    both sides that PASS with no reason, decided inline); without them they are only
    counted. A pass unsafe on both sides is always handed on.
    """

    plain: bool

    def write(self, results: Sequence[CaseResult]) -> None: ...


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
    order: MergeOrder | None = None,
    buckets: Buckets | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    size_hint: int | None = None,
    candidate_again: Callable[[], Iterable[AnyVerdict]] | None = None,
) -> GateSummary:
    """Gate a candidate suite against a baseline suite, handing each case to ``sink`` as
    it is decided, in gate order; only the summary is kept (see the module docstring).

    Args:
        baseline, candidate, exclusions, baseline_recordings: as :func:`gate`.
        sink: takes the decided cases.
        order: the sides' order as :func:`~litmus_sandbox._core.joins.merge_order` tells
            it (merge, holding one case at a time), or None (join).
        buckets: where a join may spill past ``memory_budget``; None holds everything.
        memory_budget: bytes, about, a join holds before it spills (with ``buckets``).
        size_hint: the input's size in JSON Lines bytes, if known (a join that will not
            fit then spills from the start).
        candidate_again: the candidate's verdicts once more, from the start (its files
            read again), if they can be: then the fastest join holds none of them, and
            should it give up, the join that takes over reads them again (see
            ``_core/probe.py``).

    Raises:
        ConfigError: ``order`` was given but the verdicts do not keep it.
    """
    exclusions = exclusions or {}
    recordings = baseline_recordings or {}

    def new_decider() -> CaseDecider:
        return CaseDecider(SuiteTally(recordings), exclusions, recordings, plain=sink.plain)

    decider = new_decider()
    if order is not None:
        deferred = None
        if buckets is not None:
            deferred = SpilledDeferred(buckets, 0, memory_budget // 2)
        chunks = merge_join(baseline, candidate, order, deferred)
    else:
        reading = Reading(None if buckets is None else memory_budget)
        b_blocks, c_blocks = blocks_of(baseline), blocks_of(candidate)
        joined: Iterator[Chunk] | None = None
        may_fit = buckets is None or size_hint is None or fits(size_hint, memory_budget)
        if may_fit and reading.read(0, b_blocks):
            if not sink.plain:
                probed = probe_join(reading, c_blocks, decider, keep=candidate_again is None)
                if probed is not None:
                    for results in probed:
                        sink.write(results)
                    return decider.tally.summary(decider.unknown_exclusions())
                decider = new_decider()  # the general join, from what was read
                if candidate_again is not None:
                    c_blocks = blocks_of(candidate_again())
            if reading.read(1, c_blocks):
                joined = chunked(*memory_join(*reading.sides))
        if joined is None:
            assert buckets is not None  # past a budget, which only buckets give
            joined = _spilled(reading, b_blocks, c_blocks, buckets, memory_budget, size_hint)
        chunks = joined
    for keys, bs, cs in chunks:
        results = decider.decide(keys, bs, cs)
        if results:
            sink.write(results)
    return decider.tally.summary(decider.unknown_exclusions())


def fits(size: int, budget: int) -> bool:
    """Whether verdicts taking ``size`` bytes of JSON Lines fit ``budget`` once decoded."""
    return size * _DECODED_PER_FILE_BYTE <= budget


def _spilled(
    reading: Reading,
    baseline: Iterator[list[AnyVerdict]],
    candidate: Iterator[list[AnyVerdict]],
    buckets: Buckets,
    budget: int,
    size_hint: int | None,
) -> Iterator[Chunk]:
    """The partitioned join through ``buckets``, from what ``reading`` holds and the
    rest of each side."""
    # Each partition (and range) should hold an eighth of the budget once grouped; with
    # no idea of the input's size, enough partitions for a suite some 16 times it.
    estimate = int(size_hint * _DECODED_PER_FILE_BYTE) if size_hint else 16 * budget
    partitions = min(512, max(16, math.ceil(8 * estimate / budget)))
    join = PartitionedJoin(buckets, partitions)
    for side, blocks in enumerate((baseline, candidate)):
        join.add(side, reading.sides[side])
        reading.sides[side].clear()
        for block in blocks:
            join.add(side, block)
    return join.chunks()
