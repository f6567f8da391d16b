"""A page of the gate engine's cases (``_store/engine.py``) made into what the decider takes.

A page is columns, a row a case in gate order: case id, verdicts a side (``nb``,
``nc``) and each side's ``2 * code + safe`` (``bw``, ``cw``). Its cases of one legacy
verdict a side, none kept whole and none excluded, become runs (``_core/runs.py``):
each distinct pair of ``bw`` and ``cw`` a kind, no object made per case. A run needs
:data:`MIN_RUN` such cases in a row: a shorter one costs more than its cases one by one.
The others become one chunk a page, cut between the runs in gate order: a side of one
verdict made again from its columns here, the verdicts of cases with epochs or a verdict
kept whole filled in by the engine from its table ``odd`` (one query a page).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from litmus_sandbox._core.runs import LegacyRun
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict
from litmus_sandbox._store.verdict_columns import WHOLE, Kinds

__all__ = ["MIN_RUN", "run_of", "segments", "side_of", "sides"]

#: The fewest cases in a row a run takes: fewer go in a chunk.
MIN_RUN = 64


def segments(
    kinds: Kinds, keys: list[str], page: Any, excluded: frozenset[str]
) -> tuple[Any, list[tuple[int, int, LegacyRun | None]]]:
    """Which of the page's cases a run takes (one verdict a side, none kept whole, not
    excluded, at least :data:`MIN_RUN` of them in a row), and the page cut where that
    changes: (start, end, the run or None for a chunk)."""
    import numpy as np

    kinded = (
        (page["nb"] == 1)
        & (page["nc"] == 1)
        & (page["bw"] >> 1 != WHOLE)
        & (page["cw"] >> 1 != WHOLE)
    )
    if excluded:
        kinded &= np.fromiter((k not in excluded for k in keys), np.bool_, len(keys))
    for s, e in _cut(kinded):  # too short a run costs more than its cases one by one
        if kinded[s] and e - s < MIN_RUN:
            kinded[s:e] = False
    bw, cw = page["bw"], page["cw"]
    return kinded, [
        (s, e, run_of(kinds, keys[s:e], bw[s:e], cw[s:e]) if kinded[s] else None)
        for s, e in _cut(kinded)
    ]


def _cut(flags: Any) -> list[tuple[int, int]]:
    """Where ``flags`` (not empty) changes: (start, end) of each stretch of one value."""
    import numpy as np

    cuts = (np.flatnonzero(flags[1:] != flags[:-1]) + 1).tolist()
    return list(pairwise([0, *cuts, len(flags)]))


def run_of(kinds: Kinds, keys: list[str], bw: Any, cw: Any) -> LegacyRun:
    """A run of cases of one legacy verdict a side: each pair of ``2 * code + safe``
    a kind."""
    import numpy as np

    pairs = (bw.astype(np.int64) << 32) | (cw.astype(np.int64) & 0xFFFFFFFF)
    _, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
    provenance = kinds.provenance
    sides = [
        (bool(b & 1), provenance(b >> 1), bool(c & 1), provenance(c >> 1))
        for b, c in zip(bw[first].tolist(), cw[first].tolist(), strict=True)
    ]
    return LegacyRun(keys=keys, kinds=inverse.tolist(), sides=sides, first=first.tolist())


def sides(kinds: Kinds, keys: list[str], counts: Any, w: Any) -> list[Any]:
    """One side of a page of cases: its verdict where it has one that its columns make
    again (a legacy verdict), else None (no verdict, or one the engine fills in from ``odd``).
    ``w``: ``2 * code + safe``."""
    import numpy as np

    codes, safe = w >> 1, (w & 1).astype(np.bool_)
    ones = (counts == 1) & (codes != WHOLE)
    provenances = kinds.provenances
    made = np.where(codes >= 0, codes, -2 - codes)[ones].tolist()
    legacy = LegacyVerdict
    if len(made) == len(keys):
        return [
            legacy(run_id=k, safe=s, provenance=provenances[p])
            for k, s, p in zip(keys, safe.tolist(), made, strict=True)
        ]
    out: list[Any] = [None] * len(keys)
    for i, s, p in zip(np.flatnonzero(ones).tolist(), safe[ones].tolist(), made, strict=True):
        out[i] = legacy(run_id=keys[i], safe=s, provenance=provenances[p])
    return out


def side_of(verdicts: list[AnyVerdict]) -> AnyVerdict | list[AnyVerdict] | None:
    if not verdicts:
        return None
    return verdicts[0] if len(verdicts) == 1 else verdicts
