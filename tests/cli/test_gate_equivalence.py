"""The gate's reports through its engine (DuckDB) against the in-memory reference join,
byte for byte, over the benchmark's workloads and the test suites (``gate_suites.py``).
DuckDB reads every file it can prove plain here, however small (``_store/duck_read.py``),
and its group-by on the case id is run in parts too, as past its memory limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from gate_suites import FORMATS, SUITES, MemoryJoin

from litmus_sandbox._cli import main as cli
from litmus_sandbox._store import duck_read, engine_sql

#: Suites gated in every format; the others in JSON (what every format is written from).
EVERY_FORMAT = ("mixed", "stream-shuffled", "legacy-shuffled-3", "native-shuffled-3")


def _run(d: Path, args: list[str], fmt: str, out: str) -> tuple[int, bytes]:
    code = cli.main(["gate", *args, "--format", fmt, "-o", out])
    return code, (d / out).read_bytes()


@pytest.mark.parametrize("name", sorted(SUITES))
def test_the_engine_writes_the_reference_joins_report(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = SUITES[name](tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(duck_read, "MIN_BYTES", 0)  # DuckDB reads every plain file
    formats = FORMATS if name in EVERY_FORMAT else ("json",)
    got = {fmt: _run(tmp_path, args, fmt, f"engine.{fmt}") for fmt in formats}
    # Past DuckDB's memory limit the group-by on the case id runs in parts (forced here):
    # every case must still be lined up once, in gate order.
    asked: list[int] = []

    def five(rows: int, limit: int, *, every_case: bool = False) -> int:
        asked.append(rows)
        return 5

    monkeypatch.setattr(engine_sql, "parts", five)
    assert _run(tmp_path, args, "json", "parts.json") == got["json"]
    assert asked  # the parted path ran
    monkeypatch.setattr("litmus_sandbox._cli.gate.DuckJoin", MemoryJoin)
    for fmt in formats:
        assert got[fmt] == _run(tmp_path, args, fmt, f"reference.{fmt}"), fmt
    assert got["json"][0] in (1, 4)  # something to decide in every suite
