"""Lining up a suite's baseline and candidate verdicts case by case, in gate order. Sans-io.

Theory of operation
-------------------
The gate order is the baseline's cases in the order they first appear, then the cases only
the candidate has, in its order. Several verdicts for one case on one side are epochs,
wherever they stand in the stream. Two ways to line the cases up live here (the third,
past a memory budget, is ``_core/spill.py``); each gives chunks of parallel lists
``(case ids, baseline sides, candidate sides)`` for :class:`~litmus_sandbox._core.tally.CaseDecider`:

* :func:`memory_join` holds both sides. When each case has one verdict a side and the
  candidate lists the baseline's cases in its order, they line up as they are; otherwise
  a dict lines them up (and groups epochs).
* :func:`merge_join` holds only the current case: it walks both streams at once. It is
  only right when no case id comes back after another case's verdicts, which
  :func:`merge_order` tells from the case ids alone (a cheap first look): both sides
  sorted by case id (``"sorted"``: a sort-merge, cases missing on either side included),
  or both listing the same cases in the same order (``"lockstep"``). The merge checks its
  order again as it goes, and raises if the streams do not keep it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import groupby
from typing import Literal, Protocol

from litmus_sandbox._core.tally import Side
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict

#: Parallel lists: case ids, baseline sides, candidate sides.
Chunk = tuple[list[str], list[Side], list[Side]]
MergeOrder = Literal["sorted", "lockstep"]

#: Cases a join hands on at a time.
CHUNK = 16_384

case_key: Callable[[AnyVerdict], str] = operator.attrgetter("case_id")
_run_id = operator.attrgetter("run_id")
_case_id = operator.attrgetter("case_id")


def keys_of(verdicts: Sequence[AnyVerdict]) -> list[str]:
    """The case id of each verdict, in order (a legacy verdict's is its ``run_id``)."""
    if verdicts and isinstance(verdicts[0], LegacyVerdict):
        try:
            return list(map(_run_id, verdicts))
        except AttributeError:  # native verdicts among legacy ones
            pass
    return list(map(_case_id, verdicts))


def chunked(keys: list[str], bs: list[Side], cs: list[Side], size: int = CHUNK) -> Iterator[Chunk]:
    for i in range(0, len(keys), size):
        yield keys[i : i + size], bs[i : i + size], cs[i : i + size]


def _side(group: list[AnyVerdict] | None) -> Side:
    if group is None:
        return None
    return group[0] if len(group) == 1 else group


def _group(keys: Sequence[str], verdicts: Sequence[AnyVerdict]) -> dict[str, list[AnyVerdict]]:
    groups: dict[str, list[AnyVerdict]] = {}
    for key, v in zip(keys, verdicts, strict=True):
        group = groups.get(key)
        if group is None:
            groups[key] = [v]
        else:
            group.append(v)
    return groups


def memory_join(b_list: Sequence[AnyVerdict], c_list: Sequence[AnyVerdict]) -> Chunk:
    """Both sides lined up in gate order, as one chunk (see the module docstring)."""
    b_keys, c_keys = keys_of(b_list), keys_of(c_list)
    b_key_set = set(b_keys)
    if len(b_key_set) == len(b_keys):
        if b_keys == c_keys:
            # The same cases in the same order (a harness that runs them one at a time):
            # the candidate lines up with the baseline as it is, with no join.
            return b_keys, list(b_list), list(c_list)
        c_by_key = dict(zip(c_keys, c_list, strict=True))
        if len(c_by_key) == len(c_keys):
            # One verdict per case and side (the common case): no grouping.
            cs: list[Side] = list(map(c_by_key.get, b_keys))
            bs: list[Side] = list(b_list)
            if len(c_by_key) > len(b_keys) - cs.count(None):
                extra = [k for k in c_keys if k not in b_key_set]
                b_keys = b_keys + extra
                bs.extend([None] * len(extra))
                cs.extend(map(c_by_key.__getitem__, extra))
            return b_keys, bs, cs
    b_groups = _group(b_keys, b_list)
    c_groups = _group(c_keys, c_list)
    order = list(b_groups)
    order.extend(k for k in c_groups if k not in b_groups)
    return (
        order,
        [_side(b_groups.get(k)) for k in order],
        [_side(c_groups.get(k)) for k in order],
    )


# ---------------------------------------------------------------- the merge


def merge_order(
    baseline_keys: Iterable[Sequence[str]],
    candidate_keys: Iterable[Sequence[str]],
    *,
    max_keys: int = 1_000_000,
) -> MergeOrder | None:
    """Whether :func:`merge_join` can line up two sides, told from their case ids in
    stream order (given a block at a time), or None (a join must).

    ``"sorted"``: each side's case ids never decrease (so a case's epochs stand together).
    ``"lockstep"``: both sides list the same case ids in the same order, and no case comes
    back after another case's verdicts; telling this takes a set of the case ids seen, so
    past ``max_keys`` cases it is given up (unless both sides are sorted).
    """
    b_sorted, c_sorted, same = _Ascending(), _Ascending(), _Lockstep(max_keys)
    for b_block, c_block in _aligned(baseline_keys, candidate_keys):
        b_sorted.feed(b_block)
        c_sorted.feed(c_block)
        same.feed(b_block, c_block)
        if not same.ok and not (b_sorted.ok and c_sorted.ok):
            return None
    if b_sorted.ok and c_sorted.ok:
        return "sorted"
    return "lockstep" if same.ok else None


class _Ascending:
    """Whether the keys fed so far never decrease."""

    def __init__(self) -> None:
        self.ok = True
        self._last: str | None = None

    def feed(self, block: list[str]) -> None:
        if not self.ok or not block:
            return
        if self._last is not None and block[0] < self._last:
            self.ok = False
        else:
            self.ok = all(map(operator.le, block, block[1:]))
            self._last = block[-1]


class _Lockstep:
    """Whether two sides fed equal-length blocks at a time list the same keys, and no key
    comes back after another one (checked against the set of keys seen, up to a size)."""

    def __init__(self, max_keys: int) -> None:
        self.ok = True
        self._max = max_keys
        self._seen: set[str] = set()
        self._last: str | None = None

    def feed(self, b_block: list[str], c_block: list[str]) -> None:
        if not self.ok:
            return
        if b_block != c_block:
            self._give_up()
            return
        if not b_block:
            return
        runs = [k for k, _ in groupby(b_block)]
        if runs[0] == self._last:
            runs = runs[1:]  # the case the previous block ended with goes on
        seen = self._seen
        if len(set(runs)) != len(runs) or not seen.isdisjoint(runs):
            self._give_up()  # a case comes back after another case's verdicts
            return
        seen.update(runs)
        self._last = b_block[-1]
        if len(seen) > self._max:
            self._give_up()

    def _give_up(self) -> None:
        self.ok = False
        self._seen = set()


def _aligned(
    a_blocks: Iterable[Sequence[str]], b_blocks: Iterable[Sequence[str]]
) -> Iterator[tuple[list[str], list[str]]]:
    """Two streams of key blocks as pairs of equal-length blocks; once one stream ends,
    the other's rest beside empty blocks."""
    a_it, b_it = iter(a_blocks), iter(b_blocks)
    a_buf: list[str] = []
    b_buf: list[str] = []
    a_done = b_done = False
    while True:
        while not a_buf and not a_done:
            block = next(a_it, None)
            a_done = block is None
            a_buf = list(block or ())
        while not b_buf and not b_done:
            block = next(b_it, None)
            b_done = block is None
            b_buf = list(block or ())
        if not a_buf and not b_buf:
            return
        n = min(len(a_buf), len(b_buf)) or max(len(a_buf), len(b_buf))
        yield a_buf[:n], b_buf[:n]
        a_buf, b_buf = a_buf[n:], b_buf[n:]


class Deferred(Protocol):
    """Where a sorted merge keeps the cases only the candidate has, which come last in
    gate order: ``add`` in candidate order, then iterate once."""

    def add(self, key: str, side: Side) -> None: ...

    def __iter__(self) -> Iterator[tuple[str, Side]]: ...


class HeldInMemory:
    """:class:`Deferred` in a list."""

    def __init__(self) -> None:
        self._items: list[tuple[str, Side]] = []

    def add(self, key: str, side: Side) -> None:
        self._items.append((key, side))

    def __iter__(self) -> Iterator[tuple[str, Side]]:
        items, self._items = self._items, []
        return iter(items)


def merge_join(
    baseline: Iterable[AnyVerdict],
    candidate: Iterable[AnyVerdict],
    order: MergeOrder,
    deferred: Deferred | None = None,
    *,
    size: int = CHUNK,
) -> Iterator[Chunk]:
    """Both sides lined up in gate order, holding only the current case of each (and, in
    a ``"sorted"`` merge, the cases only the candidate has, in ``deferred``).

    Raises:
        ConfigError: the streams are not in ``order`` (an input that changed after
            :func:`merge_order` read it).
    """
    held = deferred if deferred is not None else HeldInMemory()
    lockstep = order == "lockstep"
    b_runs, c_runs = _runs(baseline), _runs(candidate)
    nb, nc = next(b_runs, None), next(c_runs, None)
    b_last: str | None = None
    c_last: str | None = None
    keys: list[str] = []
    bs: list[Side] = []
    cs: list[Side] = []
    while nb is not None or nc is not None:
        if nb is not None and nc is not None and nb[0] == nc[0]:
            key = nb[0]
            keys.append(key)
            bs.append(nb[1])
            cs.append(nc[1])
            b_last, nb = key, next(b_runs, None)
            c_last, nc = key, next(c_runs, None)
        elif lockstep:
            raise _out_of_order("the two sides no longer list the same cases")
        elif nc is None or (nb is not None and nb[0] < nc[0]):
            assert nb is not None
            keys.append(nb[0])
            bs.append(nb[1])
            cs.append(None)
            b_last, nb = nb[0], next(b_runs, None)
        else:
            held.add(nc[0], nc[1])
            c_last, nc = nc[0], next(c_runs, None)
        if not lockstep and (
            (nb is not None and b_last is not None and nb[0] <= b_last)
            or (nc is not None and c_last is not None and nc[0] <= c_last)
        ):
            raise _out_of_order("a case id is lower than the one before it")
        if len(keys) >= size:
            yield keys, bs, cs
            keys, bs, cs = [], [], []
    for key, side in held:
        keys.append(key)
        bs.append(None)
        cs.append(side)
        if len(keys) >= size:
            yield keys, bs, cs
            keys, bs, cs = [], [], []
    if keys:
        yield keys, bs, cs


def _out_of_order(what: str) -> ConfigError:
    return ConfigError(
        f"the verdicts are not in the order the gate first read them ({what}); "
        "did an input change while the gate was reading it?"
    )


def _runs(verdicts: Iterable[AnyVerdict]) -> Iterator[tuple[str, Side]]:
    """(case id, side) for each run of consecutive verdicts of one case."""
    legacy = LegacyVerdict
    key: str | None = None
    first: AnyVerdict | None = None
    more: list[AnyVerdict] | None = None
    for v in verdicts:
        k = v.run_id if type(v) is legacy else v.case_id
        if k == key:
            if more is None:
                assert first is not None
                more = [first, v]
            else:
                more.append(v)
            continue
        if first is not None:
            assert key is not None
            yield key, (first if more is None else more)
        key, first, more = k, v, None
    if first is not None:
        assert key is not None
        yield key, (first if more is None else more)
