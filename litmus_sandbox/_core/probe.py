"""The gate's fastest join: the baseline held, the candidate probed a block at a time. Sans-io.

Theory of operation
-------------------
When the baseline fits in memory and lists each case once, the candidate need not be held
to be lined up with it: each candidate block, as it is read, takes its cases' baseline
verdicts out of a dict by case id and is decided at once, while its verdicts are still
in the cache. The candidate's verdicts come in their own order, not the gate's, so the
results the sink wants (every case but the plain passes, which are only counted) are
held, put in gate order once the candidate is read (a walk over the baseline's case
ids), then noted in the tally (the re-baseline plan lists its cases in gate order) and
handed on. What is left in the dict is the cases only the baseline has, in its order.

While the candidate lists the baseline's cases in the baseline's order (a harness that
runs them one at a time), a block lines up with the next slice of the baseline as it is:
no dict, no sort. The first block that does not puts the rest of the baseline in the dict.

The probe gives up, and the gate takes the general join instead, whenever the shortcut
would not be exact or not fit:

* the baseline lists a case more than once (epochs): checked at the candidate's first
  block;
* the candidate lists a case more than once: the probe would have decided it from its
  first verdict alone;
* what it holds (the baseline, the candidate's verdicts read so far, the results) passes
  the memory budget.

Nothing reaches the sink before the probe has decided every case, so giving up loses
nothing: the general join starts with a fresh tally, from the candidate's verdicts read
so far, kept in the :class:`Reading` for it, or, when the candidate can be read again
from its start (a file), from a second read: then the probe holds none of the
candidate's verdicts, and each block's memory is reused by the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, islice, repeat

from litmus_sandbox._core.gate import CaseResult
from litmus_sandbox._core.joins import CHUNK, keys_of
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
    reading: Reading,
    candidate: Iterator[list[AnyVerdict]],
    decider: CaseDecider,
    *,
    keep: bool = True,
) -> Iterator[list[CaseResult]] | None:
    """Decide every case with the baseline (``reading.sides[0]``, read whole) held and
    the candidate probed a block at a time; the results ``decider`` returns, in gate
    order, a chunk at a time, already noted in its tally. None when the probe gave up
    (see the module docstring): then ``decider`` is spent, and, with ``keep``, the
    candidate read so far is in ``reading.sides[1]``, the rest still in ``candidate``;
    without it the candidate must be read again.
    """
    baseline = reading.sides[0]
    b_keys = keys_of(baseline)
    # While the candidate lists the baseline's cases in its order, each block lines up
    # with the next slice of the baseline as it is: no dict, and its results come in
    # gate order. The first block that does not turns the rest into the probe proper.
    at = 0  # the baseline's cases before this one are decided (in order, in ``prefix``)
    prefix: list[CaseResult] = []
    held_b: dict[str, AnyVerdict] | None = None
    only: dict[str, None] = {}  # the cases only the candidate has, in its order
    held: list[CaseResult] = []
    for block in candidate:
        if keep:
            reading.add(1, block)
        keys = keys_of(block)
        if held_b is None:
            end = at + len(keys)
            if b_keys[at:end] == keys:
                if at == 0 and not _each_once(b_keys):
                    return None  # epochs on the baseline side
                prefix.extend(decider.decide(keys, baseline[at:end], block, note=False))
                at = end
                if reading.over(_RESULT_WEIGHT * len(prefix)):
                    return None
                continue
            held_b = dict(zip(b_keys[at:], baseline[at:], strict=True))
            if len(held_b) != len(b_keys) - at:
                return None  # epochs on the baseline side
        before = len(held_b)
        bs: list[Side] = list(map(held_b.pop, keys, repeat(None)))
        if before - len(held_b) < len(keys):  # some are not (or no longer) in the baseline
            for key, b in zip(keys, bs, strict=True):
                if b is None:
                    if key in only:
                        return None  # the candidate lists a case twice
                    only[key] = None
        held.extend(decider.decide(keys, bs, block, note=False))
        if reading.over(_RESULT_WEIGHT * (len(prefix) + len(held))):
            return None
    # A case listed twice by the candidate was taken at its first verdict: at its
    # second it looked like one the baseline does not have.
    if only and not only.keys().isdisjoint(b_keys):
        return None
    rest_keys = b_keys[at:]
    if held_b is None:  # all in the baseline's order: what is left only it has
        if at == 0 and not _each_once(b_keys):
            return None  # epochs on the baseline side (checked above unless no block)
        held_b = dict(zip(rest_keys, baseline[at:], strict=True))
    if held_b:  # the cases only the baseline has, in its order
        rest = list(held_b)
        held.extend(decider.decide(rest, list(held_b.values()), [None] * len(rest), note=False))
    results = prefix + _in_gate_order(held, rest_keys, only)
    decider.tally.note(results)
    return _chunks(results)


def _each_once(keys: list[str]) -> bool:
    return len(set(keys)) == len(keys)


def _in_gate_order(
    results: list[CaseResult], b_keys: list[str], only: Iterable[str]
) -> list[CaseResult]:
    """``results`` (one per case) in gate order: the baseline's order, then the cases
    only the candidate has in its order."""
    by_key = {r.case_id: r for r in results}
    ordered = list(map(by_key.__getitem__, filter(by_key.__contains__, b_keys)))
    ordered.extend(map(by_key.__getitem__, filter(by_key.__contains__, only)))
    return ordered


def _chunks(results: list[CaseResult], size: int = CHUNK) -> Iterator[list[CaseResult]]:
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
