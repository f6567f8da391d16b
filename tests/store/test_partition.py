"""What the streaming gate keeps aside: report spools; and reading verdicts a block at a time."""

from __future__ import annotations

from pathlib import Path

from factories import verdict

from litmus_sandbox import PolicyRecord, write_verdicts
from litmus_sandbox._store.partition import RankedSpool
from litmus_sandbox._store.streams import ReadWarning, iter_verdicts


def test_a_spool_keeps_each_rank_in_order_past_its_memory(tmp_path: Path) -> None:
    with RankedSpool(3, memory=64, directory=str(tmp_path)) as spool:
        for i in range(100):
            spool.write(i % 2 * 2, f"{i}\n".encode())
        assert list(spool.read(1)) == []
        evens = b"".join(spool.read(0)).split()
        assert evens == [str(i).encode() for i in range(0, 100, 2)]
        assert b"".join(spool.read(0)).split() == evens  # read again: the same
        assert b"".join(spool.read(2)).split() == [str(i).encode() for i in range(1, 100, 2)]


def test_iter_verdicts_streams_blocks_and_sets_policies_aside(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    policy = PolicyRecord(v=1, policy={}, judge="j", refusal_detector="r")
    write_verdicts(path, policy, [verdict(f"c{i}") for i in range(5)])
    path.write_bytes(path.read_bytes() + b'{"kind": "verdict", "v": 1, "case_id": "x"')
    policies: list[PolicyRecord] = []
    warnings: list[ReadWarning] = []
    verdicts = [v for block in iter_verdicts(path, warnings, policies) for v in block]
    assert [v.case_id for v in verdicts] == [f"c{i}" for i in range(5)]
    assert policies == [policy]
    assert [w.line for w in warnings] == [7]
