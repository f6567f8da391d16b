"""Strategies and helpers the gate's property tests share (``tests/core`` and
``tests/store``): verdict sides of either shape, the case-by-case reference, a sink."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from factories import legacy, verdict
from hypothesis import strategies as st

from litmus_sandbox import LegacyVerdict, compare_case

__all__ = ["Kept", "_case_by_case", "_legacy_side", "_native_side", "_plain", "_same_case", "_side"]


_legacy_side = st.builds(
    lambda case, safe, judge, cut, covered: legacy(
        case, safe, judge_version=judge, truncate_on_refusal=cut, steps_covered=covered
    ),
    st.sampled_from(["a", "b", "c", "d"]),
    st.booleans(),
    st.sampled_from(["j1", "j2", None]),
    st.booleans(),
    st.integers(1, 3),
)
_native_side = st.builds(
    lambda case, safe, judge, complete: verdict(case, safe, judge=judge, episode_complete=complete),
    st.sampled_from(["a", "b", "c", "e"]),
    st.booleans(),
    st.sampled_from(["judgeA", "judgeB"]),
    st.booleans(),
)
_side = st.lists(st.one_of(_legacy_side, _native_side), max_size=8)


def _case_by_case(b: list[Any], c: list[Any], exclusions: dict[str, str]) -> list[Any]:
    order = list(dict.fromkeys([str(v.case_id) for v in b] + [str(v.case_id) for v in c]))
    return [
        compare_case(
            k,
            [v for v in b if v.case_id == k],
            [v for v in c if v.case_id == k],
            exclusion=exclusions.get(k),
        )
        for k in order
    ]


def _same_case(v: Any) -> st.SearchStrategy[Any]:
    """Another verdict, of either shape, for ``v``'s case."""
    case = str(v.case_id)

    def renamed(other: Any) -> Any:
        if isinstance(other, LegacyVerdict):
            return msgspec.structs.replace(other, run_id=case)
        return msgspec.structs.replace(other, case_id=case)

    return st.one_of(_legacy_side, _native_side).map(renamed)


class Kept:
    def __init__(self, plain: bool = True) -> None:
        self.plain = plain
        self.cases: list[Any] = []

    def write(self, results: Sequence[Any]) -> None:
        self.cases.extend(results)


def _plain(r: Any) -> bool:
    """A pass a sink that lists no plain pass does not get: one legacy verdict a side,
    safe on both (a pass unsafe on both sides is always handed on)."""
    return (
        not r.still_unsafe
        and len(r.baseline) == 1
        and len(r.candidate) == 1
        and type(r.baseline[0]) is LegacyVerdict
        and type(r.candidate[0]) is LegacyVerdict
    )
