"""The gate's fastest join: the baseline held, the candidate probed a block at a time. Sans-io.

Theory of operation
-------------------
When the baseline fits in memory and lists each case once, the candidate need not be held
to be lined up with it: each candidate block, as it is read, looks its cases up in a dict
of the baseline's case ids (their places in gate order) and is decided at once, while its
verdicts are still in the cache. The candidate's verdicts come in their own order, not
the gate's, so the results the sink wants (every case but the plain passes, which are
only counted) are held with the baseline's place of each case, sorted into gate order
once the candidate is read, and then noted in the tally (the re-baseline plan lists its
cases in gate order) and handed on.

The probe gives up, and the gate takes the general join instead, whenever the shortcut
would not be exact or not fit:

* the baseline lists a case more than once (epochs): checked before the candidate is read;
* the candidate lists a case more than once: the probe would have decided it from its
  first verdict alone;
* what it holds (the baseline, the candidate's verdicts read so far, the results) passes
  the memory budget.

Nothing reaches the sink before the probe has decided every case, so giving up loses
nothing: the candidate's verdicts read so far are kept (:class:`Reading`) and the general
join starts from them with a fresh tally.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, islice, repeat

from litmus_sandbox._core.gate import CaseResult
from litmus_sandbox._core.joins import keys_of
from litmus_sandbox._core.spill import weight
from litmus_sandbox._core.tally import CaseDecider, Side
from litmus_sandbox._model.records import AnyVerdict

#: About how many bytes of memory a held result takes (with its tuples of verdicts).
_RESULT_WEIGHT = 200


def block_weight(block: list[AnyVerdict]) -> int:
    """About how many bytes ``block`` takes decoded. Two verdicts stand for the block: a
    block of a file holds verdicts of one shape."""
    if not block:
        return 0
    return len(block) * (weight(block[0]) + weight(block[-1])) // 2


class Reading:
    """The verdicts of both sides read so far (side 0 the baseline, 1 the candidate) and
    about how much memory they take, against ``budget`` (None: no limit)."""

    def __init__(self, budget: int | None) -> None:
        self.budget = budget
        self.sides: tuple[list[AnyVerdict], list[AnyVerdict]] = ([], [])
        self.weight = 0

    def over(self, extra: int = 0) -> bool:
        """Whether what is held (and ``extra`` bytes more) passes the budget."""
        return self.budget is not None and self.weight + extra > self.budget

    def add(self, side: int, block: list[AnyVerdict]) -> None:
        self.sides[side].extend(block)
        if self.budget is not None:
            self.weight += block_weight(block)

    def read(self, side: int, blocks: Iterator[list[AnyVerdict]]) -> bool:
        """Read the rest of ``side`` from ``blocks``; False once past the budget (then
        what is left stays in ``blocks``)."""
        if self.over():
            return False
        for block in blocks:
            self.add(side, block)
            if self.over():
                return False
        return True


def probe_join(
    reading: Reading, candidate: Iterator[list[AnyVerdict]], decider: CaseDecider
) -> Iterator[list[CaseResult]] | None:
    """Decide every case with the baseline (``reading.sides[0]``, read whole) held and
    the candidate probed a block at a time; the results ``decider`` returns, in gate
    order, a chunk at a time, already noted in its tally. None when the probe gave up
    (see the module docstring): then the candidate read so far is in
    ``reading.sides[1]``, the rest still in ``candidate``, and ``decider`` is spent.
    """
    baseline = reading.sides[0]
    b_keys = keys_of(baseline)
    held_b = dict(zip(b_keys, baseline, strict=True))
    if len(held_b) != len(b_keys):
        return None  # epochs on the baseline side
    only: dict[str, None] = {}  # the cases only the candidate has, in its order
    held: list[CaseResult] = []
    take = held_b.pop
    for block in candidate:
        reading.add(1, block)
        keys = keys_of(block)
        before = len(held_b)
        bs: list[Side] = list(map(take, keys, repeat(None)))
        if before - len(held_b) < len(keys):  # some are not (or no longer) in the baseline
            for key, b in zip(keys, bs, strict=True):
                if b is None:
                    if key in only:
                        return None  # the candidate lists a case twice
                    only[key] = None
        held.extend(decider.decide(keys, bs, block, note=False))
        if reading.over(_RESULT_WEIGHT * len(held)):
            return None
    # A case listed twice by the candidate was taken at its first verdict: at its
    # second it looked like one the baseline does not have.
    if only and not only.keys().isdisjoint(b_keys):
        return None
    if held_b:  # the cases only the baseline has, in its order
        rest = list(held_b)
        held.extend(decider.decide(rest, list(held_b.values()), [None] * len(rest), note=False))
    held = _in_gate_order(held, b_keys, only)
    decider.tally.note(held)
    return _chunks(held)


def _in_gate_order(
    results: list[CaseResult], b_keys: list[str], only: Iterable[str]
) -> list[CaseResult]:
    """``results`` (one per case) in gate order: the baseline's order, then the cases
    only the candidate has in its order."""
    by_key = {r.case_id: r for r in results}
    ordered = list(map(by_key.__getitem__, filter(by_key.__contains__, b_keys)))
    ordered.extend(map(by_key.__getitem__, filter(by_key.__contains__, only)))
    return ordered


def _chunks(results: list[CaseResult], size: int = 16_384) -> Iterator[list[CaseResult]]:
    for i in range(0, len(results), size):
        yield results[i : i + size]


def blocks_of(verdicts: Iterable[AnyVerdict], size: int = 8192) -> Iterator[list[AnyVerdict]]:
    """``verdicts`` a block at a time: the blocks of a :class:`VerdictBlocks` as they
    are, else blocks of ``size``."""
    if isinstance(verdicts, VerdictBlocks):
        return verdicts.blocks()
    if isinstance(verdicts, list):
        return iter([verdicts] if verdicts else [])
    it = iter(verdicts)
    return iter(lambda: list(islice(it, size)), [])


class VerdictBlocks:
    """Verdicts given a block at a time, as the file readers read them: the gate takes
    the blocks as they come rather than gathering its own. Iterable once."""

    def __init__(self, blocks: Iterable[list[AnyVerdict]]) -> None:
        self._blocks = iter(blocks)

    def __iter__(self) -> Iterator[AnyVerdict]:
        return chain.from_iterable(self._blocks)

    def blocks(self) -> Iterator[list[AnyVerdict]]:
        return self._blocks
