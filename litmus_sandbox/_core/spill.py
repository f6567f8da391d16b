"""The gate's join past a memory budget: partitions on disk, decided in gate order. Sans-io.

Theory of operation
-------------------
A suite too large to hold is lined up in three passes over *buckets*: numbered,
append-only stores of JSON lines that something else keeps (temporary files,
``_store/partition.py``; the core only says what goes in which bucket).

1. **Partition.** Each verdict is written, with its side's sequence number and its case
   id, to one of ``n`` partitions per side, chosen by a hash of the case id: every verdict
   of a case, epochs included, lands in the same partition.
2. **Group.** One partition at a time (each a fraction of the suite), the case's
   verdicts are gathered, and the cases are written to a *run*, sorted by their place in
   gate order: the sequence number of the baseline's first verdict of the case, or, for a
   case only the candidate has, the baseline's length plus the candidate's first one.
3. **Merge.** The runs are merged by that place (``heapq.merge``, one block of each run in
   memory at a time), so the cases come out in gate order, exactly as the in-memory join
   would give them, and are decoded as they are decided.

Verdicts stay encoded (``msgspec.Raw``) from the first pass until the last.
:class:`SpilledDeferred` keeps the cases only the candidate has for a sorted merge the
same way, past a budget.
"""

from __future__ import annotations

import heapq
import operator
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
_in_frames = msgspec.json.Decoder(tuple[int, str, msgspec.Raw])
_run_frames = msgspec.json.Decoder(tuple[int, str, list[msgspec.Raw], list[msgspec.Raw]])
_group_frames = msgspec.json.Decoder(tuple[str, list[msgspec.Raw]])
_native = msgspec.json.Decoder(Verdict)
_legacy = msgspec.json.Decoder(LegacyVerdict)
_first = operator.itemgetter(0)
#: Frames gathered before they are written (one encode call for them all), over all
#: the partitions of a side; and per run.
_PENDING = 65_536
_FLUSH = 512
# What msgspec writes first for a Verdict (its tag); a legacy verdict starts with run_id.
_NATIVE_START = b'{"kind":"verdict"'


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


def _decode(raw: msgspec.Raw) -> AnyVerdict:
    if memoryview(raw)[: len(_NATIVE_START)] == _NATIVE_START:
        return _native.decode(raw)
    return _legacy.decode(raw)


def _side(raws: list[msgspec.Raw]) -> Side:
    if not raws:
        return None
    if len(raws) == 1:
        return _decode(raws[0])
    return [_decode(r) for r in raws]


class PartitionedJoin:
    """A join through ``buckets``: :meth:`add` each side's verdicts (baseline first, side
    0, then the candidate, side 1), then take :meth:`chunks` once.

    Buckets ``0 .. 3n-1`` are used: the baseline's partitions, the candidate's, the runs.
    """

    def __init__(self, buckets: Buckets, partitions: int) -> None:
        if partitions < 1:
            raise ValueError("partitions must be at least 1")
        self._buckets = buckets
        self._n = partitions
        self._pending: list[list[tuple[int, str, AnyVerdict]]] = [[] for _ in range(2 * partitions)]
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
            key = v.run_id if type(v) is legacy else v.case_id
            p = base + hash(key) % n
            frames = pending[p]
            frames.append((seq, key, v))
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
        for p in range(2 * self._n):
            self._flush(p)
        for p in range(self._n):
            self._group(p)
        runs = [self._run(2 * self._n + p) for p in range(self._n)]
        keys: list[str] = []
        bs: list[Side] = []
        cs: list[Side] = []
        for _, key, b_raws, c_raws in heapq.merge(*runs, key=_first):
            keys.append(key)
            bs.append(_side(b_raws))
            cs.append(_side(c_raws))
            if len(keys) >= size:
                yield keys, bs, cs
                keys, bs, cs = [], [], []
        if keys:
            yield keys, bs, cs

    def _group(self, p: int) -> None:
        """Gather partition ``p``'s cases and write them to its run, in gate order."""
        buckets, n = self._buckets, self._n
        groups: dict[str, tuple[int, list[msgspec.Raw], list[msgspec.Raw]]] = {}
        for block in buckets.read(p):
            for seq, key, raw in _in_frames.decode_lines(block):
                group = groups.get(key)
                if group is None:
                    groups[key] = (seq, [raw], [])
                else:
                    group[1].append(raw)
        after = self._seq[0]  # a candidate-only case comes after every baseline case
        for block in buckets.read(n + p):
            for seq, key, raw in _in_frames.decode_lines(block):
                group = groups.get(key)
                if group is None:
                    groups[key] = (after + seq, [], [raw])
                else:
                    group[2].append(raw)
        buckets.drop(p)
        buckets.drop(n + p)
        run = sorted((g[0], key, g[1], g[2]) for key, g in groups.items())
        del groups
        for i in range(0, len(run), _FLUSH):
            buckets.append(2 * n + p, _encoder.encode_lines(run[i : i + _FLUSH]))

    def _run(self, bucket: int) -> Iterator[tuple[int, str, list[msgspec.Raw], list[msgspec.Raw]]]:
        for block in self._buckets.read(bucket):
            yield from _run_frames.decode_lines(block)
        self._buckets.drop(bucket)


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
            frames = [(k, s if isinstance(s, list) else [s]) for k, s in self._held]
            self._buckets.append(self._bucket, _encoder.encode_lines(frames))
            self._held, self._weight, self._spilled = [], 0, True

    def __iter__(self) -> Iterator[tuple[str, Side]]:
        if self._spilled:
            for block in self._buckets.read(self._bucket):
                for key, raws in _group_frames.decode_lines(block):
                    yield key, _side(raws)
            self._buckets.drop(self._bucket)
        held, self._held = self._held, []
        yield from held
