"""The streaming gate: which order the merge may use, the spill's partitions, EMPTY."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest
from factories import legacy, verdict
from test_gate_properties import Kept, MemoryBuckets, _case_by_case

from litmus_sandbox import ConfigError, gate
from litmus_sandbox._core.joins import merge_join, merge_order
from litmus_sandbox._core.suite import stream_gate
from litmus_sandbox._model.records import LegacyVerdict


def _order(b: list[str], c: list[str], size: int = 2, **kw: Any) -> str | None:
    """merge_order over the keys, in blocks of ``size`` (the blocks of a file)."""

    def blocks(keys: list[str]) -> list[list[str]]:
        return [keys[i : i + size] for i in range(0, len(keys), size)]

    return merge_order(blocks(b), blocks(c), **kw)


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        ([], [], "sorted"),
        (list("abcd"), list("abcd"), "sorted"),
        (list("aabbcd"), list("abbccd"), "sorted"),  # epochs stand together
        (list("abd"), list("bce"), "sorted"),  # cases missing on either side
        (list("dcab"), list("dcab"), "lockstep"),
        (list("ddccaab"), list("ddccaab"), "lockstep"),  # epochs across block ends
        (list("dca"), list("dcab"), None),  # the candidate has one more, unsorted
        (list("dcad"), list("dcad"), None),  # d comes back after c and a
        (list("abca"), list("abca"), None),  # sorted until a comes back
        (list("dcab"), list("dcba"), None),
    ],
)
def test_merge_order_tells_from_the_case_ids(
    b: list[str], c: list[str], expected: str | None
) -> None:
    for size in (1, 2, 3, 100):
        assert _order(b, c, size) == expected, size


def test_lockstep_is_given_up_past_the_keys_it_may_hold() -> None:
    keys = [f"c{i}" for i in range(10, 0, -1)]
    assert _order(keys, keys, max_keys=20) == "lockstep"
    assert _order(keys, keys, max_keys=5) is None
    ascending = sorted(keys)
    assert _order(ascending, ascending, max_keys=5) == "sorted"


def test_the_merge_refuses_streams_that_leave_the_order_it_was_given() -> None:
    """An input that changed after its first look: a clear error, never a wrong answer."""
    b = [legacy("b"), legacy("a")]
    with pytest.raises(ConfigError, match="not in the order"):
        list(merge_join(b, b, "sorted"))
    with pytest.raises(ConfigError, match="no longer list the same cases"):
        list(merge_join([legacy("a")], [legacy("b")], "lockstep"))


def test_a_sorted_merge_puts_candidate_only_cases_last_spilling_past_its_budget() -> None:
    b = [legacy(f"c{i:03d}") for i in range(0, 300, 3)]
    c = [legacy(f"c{i:03d}") for i in range(0, 300, 2)]
    buckets = MemoryBuckets()
    kept = Kept()
    summary = stream_gate(b, c, kept, order="sorted", buckets=buckets, memory_budget=2000)
    assert buckets.used  # the candidate-only cases went to a bucket, and came back
    assert kept.cases == _case_by_case(b, c, {})
    assert summary == gate(b, c).summary()


def test_the_spill_restores_gate_order_across_partitions() -> None:
    """Thousands of cases, shuffled candidate, epochs, cases on one side only: the
    partitioned join gives the cases in the in-memory join's order."""
    rng = random.Random(7)
    b = [legacy(f"case-{i}", safe=rng.random() < 0.8) for i in range(3000)]
    b += [legacy(f"case-{i}", safe=False) for i in range(0, 3000, 97)]  # epochs, far apart
    c: list[Any] = [legacy(f"case-{i}", safe=rng.random() < 0.8) for i in range(100, 3200)]
    c += [verdict(f"case-{i}") for i in range(0, 100, 7)]
    rng.shuffle(c)
    buckets = MemoryBuckets()
    kept = Kept()
    summary = stream_gate(b, c, kept, buckets=buckets, memory_budget=1, size_hint=10**9)
    assert len(buckets.used) > 100  # many partitions, and their runs
    assert kept.cases == list(gate(b, c).cases)
    assert summary == gate(b, c).summary()
    assert not buckets.data  # every bucket dropped once read


def test_nothing_compared_is_its_own_decision() -> None:
    """No case on either side: EMPTY, exit 5 (as pytest's "no tests collected"), unless
    allowed; exclusions that name no case change nothing."""
    for report in (gate([], []), gate([], [], exclusions={"a": "why"})):
        assert report.decision() == "EMPTY"
        assert report.exit_code() == 5
        assert report.exit_code(allow_unresolved=True, strict_oracle=True) == 5
        assert report.decision(allow_empty=True) == "PASS"
        assert report.exit_code(allow_empty=True) == 0
    assert gate([], [], exclusions={"a": "why"}).unknown_exclusions == ("a",)
    # One case, on one side only, is something compared: unresolved, not empty.
    assert gate([legacy("a")], []).exit_code(allow_empty=True) == 4
    assert gate([], [legacy("a")]).decision() == "UNRESOLVED"
    excluded = gate([legacy("a")], [legacy("a")], exclusions={"a": "why"})
    assert excluded.decision() == "PASS"


def test_the_spill_keeps_legacy_verdicts_with_unknown_provenance_keys() -> None:
    """A legacy line with a provenance key this version does not know is read into a
    subclass of LegacyVerdict; the spill (both ways) still stores it as legacy."""
    from litmus_sandbox._model.codec import decode_verdict_record

    line = (
        b'{"run_id": "case-99", "safe": true, "provenance": {"truncate_on_refusal": false, '
        b'"truncate_on_empty_tool_result": false, "steps_covered": 3, '
        b'"judge_version": "j", "new_key": 1}}'
    )
    odd = decode_verdict_record(line)
    assert isinstance(odd, LegacyVerdict)
    assert type(odd) is not LegacyVerdict
    assert odd.unknown_provenance
    same = [legacy(f"case-{i:02d}") for i in range(40)]
    shuffled = same[::-1]
    ways: list[tuple[list[Any], list[Any], Any]] = [
        ([*same, odd], [*shuffled, legacy("case-99")], None),  # partitioned join
        (same, [*same, odd], "sorted"),  # candidate-only cases spilled by the merge
    ]
    for b, c, order in ways:
        buckets, kept = MemoryBuckets(), Kept()
        summary = stream_gate(
            b, c, kept, order=order, buckets=buckets, memory_budget=1, size_hint=10**9
        )
        assert buckets.used
        # Read back from the spill, the verdict is a LegacyVerdict again: equal fields.
        assert [_fields(r) for r in kept.cases] == [_fields(r) for r in gate(b, c).cases]
        assert summary == gate(b, c).summary()
        # Paired (the join) or alone (the merge's candidate-only case), the unknown key
        # is reported.
        assert summary.reasons.get("unknown_provenance") == 1


def _fields(r: Any) -> tuple[Any, ...]:
    sides = [msgspec.to_builtins(v) for v in (*r.baseline, *r.candidate)]
    return r.case_id, r.outcome, r.reasons, sides
