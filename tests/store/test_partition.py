"""What the streaming gate keeps aside: temporary buckets, report spools, the first look
at case ids, and reading verdicts a block at a time."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from factories import legacy, verdict

from litmus_sandbox import PolicyRecord, RecordDecodeError, gate, write_verdicts
from litmus_sandbox._core.suite import stream_gate
from litmus_sandbox._store import partition
from litmus_sandbox._store.partition import RankedSpool, TempBuckets, scan_case_ids
from litmus_sandbox._store.streams import ReadWarning, iter_verdicts


def test_buckets_keep_lines_in_order_and_leave_nothing_behind(tmp_path: Path) -> None:
    with TempBuckets(tmp_path) as buckets:
        root = Path(buckets.path)
        assert root.parent == tmp_path
        assert oct(root.stat().st_mode & 0o777) == "0o700"
        for i in range(50):
            buckets.append(i % 3, f"line {i}\n".encode())
        assert list(buckets.read(7)) == []  # never appended to
        assert b"".join(buckets.read(1)) == b"".join(
            f"line {i}\n".encode() for i in range(1, 50, 3)
        )
        assert buckets.size(2) > 0
        buckets.drop(2)
        assert buckets.size(2) == 0
        assert sorted(p.name for p in root.iterdir()) == ["0.jsonl", "1.jsonl"]
    assert not root.exists()


def test_buckets_read_back_whole_lines_longer_than_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(partition, "READ_BYTES", 7)
    lines = [b"x" * n + b"\n" for n in (0, 3, 20, 1, 6, 40)]
    with TempBuckets(tmp_path) as buckets:
        buckets.append(0, b"".join(lines))
        blocks = list(buckets.read(0))
    assert b"".join(blocks) == b"".join(lines)
    assert all(b.endswith(b"\n") for b in blocks)


def test_a_spool_keeps_each_rank_in_order_past_its_memory(tmp_path: Path) -> None:
    with RankedSpool(3, memory=64, directory=str(tmp_path)) as spool:
        for i in range(100):
            spool.write(i % 2 * 2, f"{i}\n".encode())
        assert list(spool.read(1)) == []
        evens = b"".join(spool.read(0)).split()
        assert evens == [str(i).encode() for i in range(0, 100, 2)]
        assert b"".join(spool.read(0)).split() == evens  # read again: the same
        assert b"".join(spool.read(2)).split() == [str(i).encode() for i in range(1, 100, 2)]


def test_scan_reads_the_case_ids_of_every_shape(tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    policy = PolicyRecord(v=1, policy={}, judge="j", refusal_detector="r")
    write_verdicts(path, policy, [verdict("n1"), verdict("n2")])
    lines = path.read_bytes()
    lines += b'{"run_id": "l1", "safe": true}\n\n{"run_id": "l2", "safe": fa'  # torn
    path.write_bytes(lines)
    assert [i for block in scan_case_ids(path) for i in block] == ["n1", "n2", "l1"]


@pytest.mark.parametrize(
    "line",
    [
        b'{"kind": "verdict", "case_id": 7}\n',
        b'{"kind": "episode", "episode_id": "e"}\n',
        b"{oops\n",
    ],
)
def test_scan_gives_up_on_what_it_cannot_read_ids_from(tmp_path: Path, line: bytes) -> None:
    """The first look is only a look: the verdict reader then names the line."""
    path = tmp_path / "v.jsonl"
    path.write_bytes(b'{"run_id": "a", "safe": true}\n' + line)
    with pytest.raises(RecordDecodeError):
        list(scan_case_ids(path))


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


def test_the_spill_through_temporary_files_gates_as_in_memory(tmp_path: Path) -> None:
    rng = random.Random(3)
    b = [legacy(f"k{i}", safe=rng.random() < 0.9) for i in range(2000)]
    b += [legacy(f"k{i}") for i in range(0, 2000, 50)]
    c = [legacy(f"k{i}", safe=rng.random() < 0.9) for i in range(30, 2100)]
    rng.shuffle(c)

    class Kept:
        plain = True

        def __init__(self) -> None:
            self.cases: list[object] = []

        def write(self, results: Sequence[object]) -> None:
            self.cases.extend(results)

    kept = Kept()
    with TempBuckets(tmp_path) as buckets:
        summary = stream_gate(b, c, kept, buckets=buckets, memory_budget=1, size_hint=10**8)
        assert not os.listdir(buckets.path)  # every bucket dropped once read
    expected = gate(b, c)
    assert kept.cases == list(expected.cases)
    assert summary == expected.summary()
    assert json.dumps(summary.counts)  # plain data
