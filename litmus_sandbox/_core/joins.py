"""Lining up a suite's baseline and candidate verdicts held in memory, in gate order. Sans-io.

The gate order is the baseline's cases in the order they first appear, then the cases only
the candidate has, in its order. Several verdicts for one case on one side are epochs,
wherever they stand in the stream. :func:`memory_join` holds both sides: when each case
has one verdict a side and the candidate lists the baseline's cases in its order, they
line up as they are; otherwise a dict lines them up (and groups epochs). It gives the
parallel lists ``(case ids, baseline sides, candidate sides)`` that
:class:`~litmus_sandbox._core.decider.CaseDecider` takes (:func:`chunked` cuts them into
chunks). Files past memory are lined up by the command's engine (``_store/engine.py``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence

from litmus_sandbox._core.decider import Side
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict

#: Parallel lists: case ids, baseline sides, candidate sides.
Chunk = tuple[list[str], list[Side], list[Side]]

#: Cases a join hands on at a time.
CHUNK = 16_384

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
