"""The gate's join past a memory budget: partitions on disk, decided in gate order. Sans-io.

Theory of operation
-------------------
A suite too large to hold is lined up in three passes over *buckets*: numbered,
append-only stores of JSON lines that something else keeps (temporary files,
``_store/partition.py``; the core only says what goes in which bucket).

1. **Partition.** Each verdict is written, with its side's sequence number and its case
   id, to one of ``n`` partitions per side, chosen by a hash of the case id: every verdict
   of a case, epochs included, lands in the same partition.
2. **Group.** One partition at a time (each a fraction of the suite), each case's
   verdicts are gathered and the case gets its place in gate order: the sequence number
   of the baseline's first verdict of the case, or, for a case only the candidate has,
   the baseline's length plus the candidate's first one. The cases are written to
   *ranges* of places (as many over the baseline's places as there are partitions, and as
   many over the candidate-only ones), so each range holds a fraction too.
3. **Order.** One range at a time, its cases are sorted by place and decoded, so the
   cases come out in gate order, exactly as the in-memory join gives them.

Verdicts stay encoded (``msgspec.Raw``) from the first pass until the last, where those
of a chunk of cases are decoded in one call per shape.
:class:`SpilledDeferred` keeps the cases only the candidate has for a sorted merge the
same way, past a budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import msgspec

from litmus_sandbox._core.joins import CHUNK, Chunk
from litmus_sandbox._core.tally import Side
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict, Verdict


class Buckets(Protocol):
    """Numbered append-only stores of JSON lines (``_store/partition.py`` keeps them in
    temporary files)."""

    def append(self, bucket: int, data: bytes) -> None:
        """Add whole lines to ``bucket`` (created on first use)."""

    def read(self, bucket: int) -> Iterator[bytes]:
        """The lines of ``bucket`` in the order added, a block of whole lines at a time."""

    def drop(self, bucket: int) -> None:
        """Forget ``bucket`` and free what it holds."""


_encoder = msgspec.json.Encoder()
#: A verdict in a partition: (sequence number, case id, shape, verdict).
_in_frames = msgspec.json.Decoder(tuple[int, str, int, msgspec.Raw])
#: A case in a range: (place, case id, shapes and verdicts of each side).
_Ranged = tuple[int, str, list[int], list[msgspec.Raw], list[int], list[msgspec.Raw]]
_ranged = msgspec.json.Decoder(_Ranged)
_native = msgspec.json.Decoder(Verdict)
_legacy = msgspec.json.Decoder(LegacyVerdict)
#: Frames gathered before they are written (one encode call for them all), over all
#: the partitions of a side.
_PENDING = 65_536
_LEGACY, _NATIVE = 0, 1


def weight(v: AnyVerdict) -> int:
    """About how many bytes of memory ``v`` takes once decoded."""
    if type(v) is LegacyVerdict:
        return 360
    return 1000 + 300 * len(v.steps) if isinstance(v, Verdict) else 360


def side_weight(side: Side) -> int:
    """About how many bytes of memory a case's side takes (see :func:`weight`)."""
    if side is None:
        return 0
    if isinstance(side, list):
        return sum(map(weight, side))
    return weight(side)


class PartitionedJoin:
    """A join through ``buckets``: :meth:`add` each side's verdicts (baseline first, side
    0, then the candidate, side 1), then take :meth:`chunks` once.

    Buckets ``0 .. 4n-1`` are used: the baseline's partitions, the candidate's, the
    ranges of places (``2n``).
    """

    def __init__(self, buckets: Buckets, partitions: int) -> None:
        if partitions < 1:
            raise ValueError("partitions must be at least 1")
        self._buckets = buckets
        self._n = partitions
        self._pending: list[list[tuple[int, str, int, AnyVerdict]]] = [
            [] for _ in range(2 * partitions)
        ]
        self._flush_at = max(16, _PENDING // partitions)
        self._seq = [0, 0]

    def add(self, side: int, verdicts: Iterable[AnyVerdict]) -> None:
        n = self._n
        base = side * n
        pending = self._pending
        seq = self._seq[side]
        legacy = LegacyVerdict
        flush_at = self._flush_at
        for v in verdicts:
            # A legacy verdict read with unknown provenance keys is of a subclass.
            if type(v) is legacy or isinstance(v, legacy):
                key, shape = v.run_id, _LEGACY
            else:
                key, shape = v.case_id, _NATIVE
            # hash() is salted per process: it only spreads cases; places decide order.
            p = base + hash(key) % n
            frames = pending[p]
            frames.append((seq, key, shape, v))
            seq += 1
            if len(frames) >= flush_at:
                self._flush(p)
        self._seq[side] = seq

    def _flush(self, p: int) -> None:
        frames = self._pending[p]
        if frames:
            self._pending[p] = []
            self._buckets.append(p, _encoder.encode_lines(frames))

    def chunks(self, size: int = CHUNK) -> Iterator[Chunk]:
        """Every case, in gate order (see the module docstring)."""
        n = self._n
        for p in range(2 * n):
            self._flush(p)
        for p in range(n):
            self._group(p)
        for r in range(2 * n):
            cases: list[_Ranged] = []
            for block in self._buckets.read(2 * n + r):
                cases.extend(_ranged.decode_lines(block))
            self._buckets.drop(2 * n + r)
            cases.sort()  # by place: places are distinct, so no further item compares
            for i in range(0, len(cases), size):
                yield _decoded(cases[i : i + size])

    def _range(self, place: int) -> int:
        """The range of ``place``: ``n`` ranges over the baseline's places, then ``n``
        over the places of the cases only the candidate has (sparse, past them all)."""
        n, b_count = self._n, self._seq[0]
        if place < b_count:
            return place // (b_count // n + 1)
        return n + (place - b_count) // (self._seq[1] // n + 1)

    def _group(self, p: int) -> None:
        """Gather partition ``p``'s cases and write each to its range of places."""
        buckets, n = self._buckets, self._n
        groups: dict[str, _Ranged] = {}
        for block in buckets.read(p):
            for seq, key, shape, raw in _in_frames.decode_lines(block):
                group = groups.get(key)
                if group is None:
                    groups[key] = (seq, key, [shape], [raw], [], [])
                else:
                    group[2].append(shape)
                    group[3].append(raw)
        after = self._seq[0]  # a candidate-only case comes after every baseline case
        for block in buckets.read(n + p):
            for seq, key, shape, raw in _in_frames.decode_lines(block):
                group = groups.get(key)
                if group is None:
                    groups[key] = (after + seq, key, [], [], [shape], [raw])
                else:
                    group[4].append(shape)
                    group[5].append(raw)
        buckets.drop(p)
        buckets.drop(n + p)
        ranges: list[list[_Ranged]] = [[] for _ in range(2 * n)]
        where = self._range
        for case in groups.values():
            ranges[where(case[0])].append(case)
        del groups
        for r, cases in enumerate(ranges):
            if cases:
                buckets.append(2 * n + r, _encoder.encode_lines(cases))


def _decoded(cases: list[_Ranged]) -> Chunk:
    """A chunk of ranged cases with their verdicts decoded, one call per shape."""
    raws: tuple[list[msgspec.Raw], list[msgspec.Raw]] = ([], [])
    for _, _, b_shapes, b_raws, c_shapes, c_raws in cases:
        for shape, raw in zip(b_shapes, b_raws, strict=True):
            raws[shape].append(raw)
        for shape, raw in zip(c_shapes, c_raws, strict=True):
            raws[shape].append(raw)
    decoded = (
        iter(_legacy.decode_lines(b"\n".join(raws[_LEGACY]))),
        iter(_native.decode_lines(b"\n".join(raws[_NATIVE]))),
    )
    keys: list[str] = []
    bs: list[Side] = []
    cs: list[Side] = []
    for _, key, b_shapes, _, c_shapes, _ in cases:
        keys.append(key)
        bs.append(_taken(b_shapes, decoded))
        cs.append(_taken(c_shapes, decoded))
    return keys, bs, cs


def _taken(shapes: list[int], decoded: tuple[Iterator[AnyVerdict], ...]) -> Side:
    if not shapes:
        return None
    if len(shapes) == 1:
        return next(decoded[shapes[0]])
    return [next(decoded[s]) for s in shapes]


class SpilledDeferred:
    """The cases only the candidate has, for a sorted merge
    (:class:`~litmus_sandbox._core.joins.Deferred`): held in memory up to ``budget``
    (bytes, about), then written to ``bucket``."""

    def __init__(self, buckets: Buckets, bucket: int, budget: int) -> None:
        self._buckets = buckets
        self._bucket = bucket
        self._budget = budget
        self._held: list[tuple[str, Side]] = []
        self._weight = 0
        self._spilled = False

    def add(self, key: str, side: Side) -> None:
        self._held.append((key, side))
        self._weight += side_weight(side)
        if self._weight > self._budget:
            frames: list[
                tuple[int, str, list[int], list[AnyVerdict], list[int], list[AnyVerdict]]
            ] = []
            for k, held in self._held:
                verdicts = held if isinstance(held, list) else [] if held is None else [held]
                shapes = [_LEGACY if isinstance(v, LegacyVerdict) else _NATIVE for v in verdicts]
                frames.append((0, k, [], [], shapes, verdicts))
            self._buckets.append(self._bucket, _encoder.encode_lines(frames))
            self._held, self._weight, self._spilled = [], 0, True

    def __iter__(self) -> Iterator[tuple[str, Side]]:
        if self._spilled:
            for block in self._buckets.read(self._bucket):
                keys, _, cs = _decoded(_ranged.decode_lines(block))
                yield from zip(keys, cs, strict=True)
            self._buckets.drop(self._bucket)
        held, self._held = self._held, []
        yield from held
