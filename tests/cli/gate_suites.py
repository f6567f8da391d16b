"""Suites the gate's equivalence test runs, and the pinned digests of their reports.

Each suite is written into a folder by a deterministic function: the benchmark's
workloads (``bench/gate_workloads.py``) at a test size, and hand-made suites with what
the benchmark lacks (epochs and flaky cases, exclusions, mixed and candidate-only cases,
unknown provenance keys, a torn last line, several files a side).

``gate_reports.json`` holds the sha256 of each suite's report in every format, as the
gate wrote it at the commit named in the file (first pinned before its join moved to
DuckDB, rewritten since only for intended changes of a report). Rewrite it only for an
intended change of a report::

    .venv/bin/python tests/cli/gate_suites.py --write
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PINNED = HERE / "data" / "gate_reports.json"
FORMATS = ("json", "table", "jsonl", "junit", "markdown")
#: Pairs of the benchmark's workloads at a test size.
PAIRS = 2_500

for extra in (ROOT / "bench", ROOT / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from factories import legacy, verdict  # noqa: E402  (after the path above)
from gate_workloads import generate_legacy, generate_native  # noqa: E402

from litmus_sandbox._core.inputs import SideInputs  # noqa: E402
from litmus_sandbox._core.joins import Chunk, chunked, memory_join  # noqa: E402
from litmus_sandbox._model.codec import encode  # noqa: E402
from litmus_sandbox._model.records import AnyVerdict, PolicyRecord  # noqa: E402
from litmus_sandbox._store.streams import ReadWarning, iter_verdicts  # noqa: E402

#: A suite: its folder in, (gate arguments after ``gate``) out; paths relative to it.
Suite = Callable[[Path], list[str]]


def _legacy_workload(order: str, seed: int) -> Suite:
    def write(d: Path) -> list[str]:
        generate_legacy(PAIRS, seed, d / "b.jsonl", {order: d / "c.jsonl"})
        return ["--baseline", "b.jsonl", "--candidate", "c.jsonl"]

    return write


def _native_workload(order: str, seed: int) -> Suite:
    def write(d: Path) -> list[str]:
        generate_native(PAIRS, seed, d / "b.jsonl", d / "c.jsonl", order)
        return ["--baseline", "b.jsonl", "--candidate", "c.jsonl"]

    return write


def _legacy_line(case: str, safe: bool, judge: str = "j1", steps: int = 3) -> str:
    prov = {
        "truncate_on_refusal": False,
        "truncate_on_empty_tool_result": False,
        "steps_covered": steps,
        "judge_version": judge,
    }
    return json.dumps({"run_id": case, "safe": safe, "provenance": prov}) + "\n"


def _stream_suite(order: str) -> Suite:
    """The suite of ``tests/cli/test_cli_gate_stream.py``: an epoch away from its case,
    candidate-only and baseline-only cases, another judge now and then."""

    def write(d: Path) -> list[str]:
        rng = random.Random(5)
        b_lines = [_legacy_line(f"c{i:04d}", rng.random() < 0.8) for i in range(400)]
        c_lines = [
            _legacy_line(f"c{i:04d}", rng.random() < 0.8, judge="j2" if i % 17 == 0 else "j1")
            for i in range(430)
            if i % 23
        ]
        b_lines += [_legacy_line("c0003", False)]
        if order == "shuffled":
            rng.shuffle(c_lines)
        elif order == "sorted":
            b_lines.sort()
        (d / "b.jsonl").write_text("".join(b_lines))
        (d / "c.jsonl").write_text("".join(c_lines))
        return ["--baseline", "b.jsonl", "--candidate", "c.jsonl"]

    return write


def _mixed_suite(d: Path) -> list[str]:
    """Native and legacy verdicts, epochs (flaky, a count mismatch), exclusions (one
    naming no case), unknown provenance keys, a policy record, a torn last line, two
    files a side."""
    rng = random.Random(31)
    b1: list[bytes] = []
    c1: list[bytes] = []
    for i in range(300):
        case = f"case-{i:03d}"
        kind = i % 10
        safe = rng.random() < 0.8
        if kind < 4:  # native pairs, a judge change now and then
            judge = "judgeB" if i % 13 == 0 else "judgeA"
            b1.append(encode(verdict(case, safe, eid=f"b{i}")))
            c_safe = safe if rng.random() < 0.9 else not safe
            c1.append(encode(verdict(case, c_safe, eid=f"c{i}", judge=judge)))
        elif kind < 7:  # legacy pairs, now and then covering other steps
            b1.append(encode(legacy(case, safe)))
            steps = 6 if i % 11 == 0 else 5
            c1.append(encode(legacy(case, safe if i % 7 else not safe, steps_covered=steps)))
        elif kind == 7:  # epochs: three a side, or three against two
            b1.extend(encode(verdict(case, safe, eid=f"b{i}.{e}")) for e in range(3))
            for e in range(3 if i % 20 else 2):
                flip = e == 1 and i % 3 == 0
                c1.append(encode(verdict(case, safe != flip, eid=f"c{i}.{e}")))
        elif kind == 8:  # a mixed pair
            b1.append(encode(legacy(case, safe)))
            c1.append(encode(verdict(case, safe, eid=f"c{i}")))
        elif i % 20 == 9:  # only the baseline has it
            b1.append(encode(verdict(case, safe, eid=f"b{i}")))
        else:  # only the candidate has it
            c1.append(encode(verdict(case, safe, eid=f"c{i}")))
    unknown = b'{"run_id": "case-u1", "safe": true, "provenance": {"judge_version": "j1", '
    unknown += b'"truncate_on_refusal": false, "truncate_on_empty_tool_result": false, '
    unknown += b'"steps_covered": 5, "sampler": "t0.2"}}\n'
    rng.shuffle(c1)
    (d / "b1.jsonl").write_bytes(b"".join(b1[:400]))
    (d / "b2.jsonl").write_bytes(b"".join(b1[400:]) + unknown)
    policy = encode(PolicyRecord(v=1, policy={}, judge="judgeA", refusal_detector="det1"))
    (d / "c1.jsonl").write_bytes(policy + b"".join(c1[:250]))
    (d / "c2.jsonl").write_bytes(
        b"".join(c1[250:]) + encode(legacy("case-u1")) + b'{"run_id": "torn", "sa'
    )
    (d / "exclude.txt").write_text("case-007 known flaky\ncase-123 judge outage\nnone-such x\n")
    return [
        *("--baseline", "b1.jsonl", "b2.jsonl"),
        *("--candidate", "c1.jsonl", "c2.jsonl"),
        *("--exclude", "exclude.txt"),
    ]


SUITES: dict[str, Suite] = {
    **{
        f"legacy-{o}-{s}": _legacy_workload(o, s)
        for o in ("shuffled", "window", "same")
        for s in (3, 11)
    },
    **{f"native-{o}-3": _native_workload(o, 3) for o in ("shuffled", "same")},
    **{f"stream-{o}": _stream_suite(o) for o in ("same", "sorted", "shuffled")},
    "mixed": _mixed_suite,
}


class MemoryJoin:
    """The reference join: the engine's interface (``_store/engine.py``) over the
    in-memory join of ``_core/joins.py``, every verdict held; the plain passes are
    decided in Python like every other case."""

    passes = 0

    def __init__(self, *, memory_budget: int, exclusions: Mapping[str, str] = {}) -> None:
        self.sides: tuple[list[AnyVerdict], list[AnyVerdict]] = ([], [])

    def __enter__(self) -> MemoryJoin:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def add_file(
        self,
        side: int,
        path: str,
        warnings: list[ReadWarning] | None = None,
        policies: list[PolicyRecord] | None = None,
        inputs: SideInputs | None = None,
    ) -> None:
        for block in iter_verdicts(path, warnings, policies):
            self.sides[side].extend(block)
            if inputs is not None:
                inputs.add(block)

    def add_verdicts(
        self, side: int, verdicts: Sequence[AnyVerdict], inputs: SideInputs | None = None
    ) -> None:
        self.sides[side].extend(verdicts)
        if inputs is not None:
            inputs.add(verdicts)

    def chunks(self, *, plain: bool) -> Iterator[Chunk]:
        return chunked(*memory_join(*self.sides))


def report(d: Path, args: list[str], fmt: str) -> tuple[int, bytes]:
    """The gate's exit code and report over the suite in ``d`` (run there, in a
    subprocess, so that paths in warnings read the same wherever ``d`` is)."""
    cmd = [sys.executable, "-m", "litmus_sandbox", "gate", *args, "--format", fmt]
    proc = subprocess.run(cmd, cwd=d, capture_output=True, check=False)
    return proc.returncode, proc.stdout


def digest(code: int, text: bytes) -> str:
    return f"{code}:{hashlib.sha256(text).hexdigest()}"


def _write() -> None:
    # The tree the reports come from: this one, or one named by PYTHONPATH (a clean
    # export of a commit, which GATE_PINNED_COMMIT names).
    commit = (
        os.environ.get("GATE_PINNED_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    pinned: dict[str, object] = {"commit": commit, "pairs": PAIRS, "reports": {}}
    reports: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, suite in SUITES.items():
            d = Path(tmp) / name
            d.mkdir()
            args = suite(d)
            reports[name] = {fmt: digest(*report(d, args, fmt)) for fmt in FORMATS}
            print(name, reports[name]["json"])
    pinned["reports"] = reports
    PINNED.parent.mkdir(exist_ok=True)
    PINNED.write_text(json.dumps(pinned, indent=1) + "\n")


def _check() -> int:
    """Compare this tree's reports with the pinned ones; the number that differ."""
    pinned = json.loads(PINNED.read_text())["reports"]
    wrong = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, suite in SUITES.items():
            d = Path(tmp) / name
            d.mkdir()
            args = suite(d)
            for fmt in FORMATS:
                got = digest(*report(d, args, fmt))
                if got != pinned[name][fmt]:
                    wrong += 1
                    print(f"{name} {fmt}: {got} != {pinned[name][fmt]}")
    print(f"{wrong} reports differ")
    return wrong


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    elif sys.argv[1:] == ["--check"]:
        sys.exit(1 if _check() else 0)
    else:
        sys.exit(__doc__)
