"""Plain legacy files read by DuckDB (``_store/duck_read.py``) give exactly what the
readers give: the same report, the same warnings, the same ``file:line`` errors, for
every line the readers refuse or tolerate, hand-made and fuzzed.

Every test here runs the gate twice in one process: once with DuckDB taking any file it
can prove plain (``MIN_BYTES`` 0: small files too), once with the readers alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litmus_sandbox._cli.main import main
from litmus_sandbox._store import duck_read

PROVENANCE = (
    '{"truncate_on_refusal": false, "truncate_on_empty_tool_result": false, '
    '"steps_covered": 4, "judge_version": "litmus-judge-2026.10.2"}'
)


def plain(case: str, safe: bool = True, provenance: str = PROVENANCE) -> str:
    """A line as the reference harness writes it."""
    return f'{{"run_id": "{case}", "safe": {json.dumps(safe)}, "provenance": {provenance}}}\n'


def suite(n: int = 40, *, flip: int = 7) -> list[str]:
    return [plain(f"case-{i:03d}", safe=i % flip != 0) for i in range(n)]


#: Lines the readers refuse, tolerate or read differently from a plain line; each is put
#: in the middle of an otherwise plain file.
ODD_LINES = {
    "unknown top-level key": '{"run_id": "x", "safe": true, "extra": 1}\n',
    "trailing comma": '{"run_id": "x", "safe": true,}\n',
    "trailing comma in provenance": plain("x", provenance='{"steps_covered": 4,}'),
    "blank line": "\n",
    "null member": plain("x", provenance='{"steps_covered": null}'),
    "unknown provenance key": plain("x", provenance='{"steps_covered": 4, "seed": 9}'),
    "duplicate key": '{"run_id": "x", "run_id": "y", "safe": true}\n',
    "duplicate provenance key": plain("x", provenance='{"steps_covered": 4, "steps_covered": 5}'),
    "two records": '{"run_id": "x", "safe": true}{"run_id": "y", "safe": true}\n',
    "safe as a string": '{"run_id": "x", "safe": "true"}\n',
    "safe as a number": '{"run_id": "x", "safe": 1}\n',
    "run_id a number": '{"run_id": 7, "safe": true}\n',
    "no run_id": '{"safe": true}\n',
    "no safe": '{"run_id": "x"}\n',
    "colon in the case id": plain("suite:x"),
    "comma in the case id": plain("a,b"),
    "escaped colon, and an unknown key": '{"run_id": "a\\u003ab", "safe": true, "k": 1}\n',
    "escapes in the case id": plain('a\\"b\\u00e9\\n'),
    "colon in the judge": plain("x", provenance='{"judge_version": "gpt:4"}'),
    "provenance null": '{"run_id": "x", "safe": true, "provenance": null}\n',
    "provenance empty": plain("x", provenance="{}"),
    "no provenance": '{"run_id": "x", "safe": false}\n',
    "provenance a list": plain("x", provenance="[1]"),
    "provenance a number": plain("x", provenance="5"),
    "flag as a string": plain("x", provenance='{"truncate_on_refusal": "yes"}'),
    "steps a float": plain("x", provenance='{"steps_covered": 4.0}'),
    "steps past 64 bits": plain("x", provenance='{"steps_covered": 1e400}'),
    "steps minus zero": plain("x", provenance='{"steps_covered": -0}'),
    "NaN": plain("x", provenance='{"steps_covered": NaN}'),
    "native verdict": '{"v": 1, "case_id": "x", "safe": true}\n',
    "newer version": '{"v": 99, "case_id": "x", "safe": true}\n',
    "keys in another order": '{"safe": true, "provenance": {}, "run_id": "x"}\n',
    "spaces and tabs": '{ "run_id" :\t"x" , "safe" : true }\n',
    "carriage return": '{"run_id": "x", "safe": true}\r\n',
    "escaped key": '{"run\\u005fid": "x", "safe": true}\n',
    "control character": '{"run_id": "a\x01b", "safe": true}\n',
    "comment": '{"run_id": "x" /* c */, "safe": true}\n',
    "not an object": '["x", true]\n',
    "null": "null\n",
    "a repeated case": plain("case-003", safe=False),
}
#: Of those, the lines that leave a file plain: DuckDB takes it, and must read it right.
STILL_PLAIN = {
    "a repeated case",
    "carriage return",
    "escaped key",
    "escapes in the case id",
    "keys in another order",
    "no provenance",
    "provenance empty",
    "spaces and tabs",
    "steps minus zero",
}


def gate(
    folder: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *,
    fast: bool,
) -> tuple[int, str, str, int]:
    """The gate's exit code, JSON report and standard error; and the files DuckDB took."""
    taken = 0
    real = duck_read.read_plain_legacy

    def counting(*args: object, **kw: object) -> int | None:
        nonlocal taken
        rows = real(*args, **kw)  # type: ignore[arg-type]
        taken += rows is not None
        return rows

    monkeypatch.setattr(duck_read, "MIN_BYTES", 0 if fast else 1 << 62)
    monkeypatch.setattr("litmus_sandbox._store.engine.read_plain_legacy", counting)
    argv = ["gate", "--baseline", str(folder / "b.jsonl"), "--candidate"]
    argv += [str(folder / "c.jsonl"), "--format", "json"]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err, taken


def write(folder: Path, baseline: str | bytes, candidate: str | bytes) -> None:
    for name, data in (("b.jsonl", baseline), ("c.jsonl", candidate)):
        (folder / name).write_bytes(data.encode() if isinstance(data, str) else data)


def test_a_plain_file_is_taken_by_duckdb_and_reported_as_the_readers_report_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "".join(suite()), "".join(reversed(suite(flip=5))))
    fast = gate(tmp_path, capsys, monkeypatch, fast=True)
    slow = gate(tmp_path, capsys, monkeypatch, fast=False)
    assert fast[3] == 2
    assert slow[3] == 0
    assert fast[:3] == slow[:3]
    assert fast[0] == 1
    assert '"REGRESSION"' in fast[1]


@pytest.mark.parametrize("name", sorted(ODD_LINES))
def test_an_odd_line_gives_what_the_readers_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    lines = suite()
    lines.insert(20, ODD_LINES[name])
    write(tmp_path, "".join(suite()), "".join(lines))
    fast = gate(tmp_path, capsys, monkeypatch, fast=True)
    slow = gate(tmp_path, capsys, monkeypatch, fast=False)
    assert fast[:3] == slow[:3]
    assert fast[3] == (2 if name in STILL_PLAIN else 1)  # the baseline is always plain


def test_a_torn_last_line_and_a_byte_order_mark_are_left_to_the_readers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = "".join(suite())
    write(tmp_path, "\ufeff" + body, body + '{"run_id": "torn", "sa')
    fast = gate(tmp_path, capsys, monkeypatch, fast=True)
    assert fast[3] == 0
    assert fast[:3] == gate(tmp_path, capsys, monkeypatch, fast=False)[:3]


def test_bad_utf8_is_named_as_the_readers_name_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [line.encode() for line in suite()]
    lines[9] = b'{"run_id": "a\xff", "safe": true}\n'
    write(tmp_path, "".join(suite()), b"".join(lines))
    fast = gate(tmp_path, capsys, monkeypatch, fast=True)
    assert fast[:3] == gate(tmp_path, capsys, monkeypatch, fast=False)[:3]
    assert fast[0] == 2
    assert ":10:" in fast[2]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(list(b'{}[]:,"\\ \n\r\tx0-e.'))),
        min_size=1,
        max_size=4,
    ),
    how=st.sampled_from(["replace", "insert", "delete"]),
)
def test_fuzzed_files_give_what_the_readers_give(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    edits: list[tuple[int, int]],
    how: str,
) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    data = bytearray("".join(suite(30)).encode())
    for at, byte in edits:
        i = at % len(data)
        if how == "replace":
            data[i] = byte
        elif how == "insert":
            data.insert(i, byte)
        else:
            del data[i]
    write(folder, "".join(suite(30)), bytes(data))
    fast = gate(folder, capsys, monkeypatch, fast=True)
    assert fast[:3] == gate(folder, capsys, monkeypatch, fast=False)[:3]


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=300).map(lambda b: b.replace(b"\0", b"\n")),
    slice_=st.integers(1, 64),
)
def test_the_byte_counts_match_the_bytes_whatever_the_slice(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, slice_: int
) -> None:
    path = tmp_path_factory.mktemp("count") / "f"
    path.write_bytes(data)
    found = duck_read._Bytes()
    with pytest.MonkeyPatch.context() as m, path.open("rb") as f:
        m.setattr(duck_read, "_SLICE", slice_)
        duck_read._count(f.fileno(), len(data), found)
        assert found.error is None
        ends = [i for i, b in enumerate(data) if b == 0x0A]
        assert (found.newlines, found.colons, found.commas) == (
            len(ends),
            data.count(b":"),
            data.count(b","),
        )
        assert found.ends.tolist() == ends
        lines = data.split(b"\n")[: len(ends)]
        assert found.longest == (max(len(line) + 1 for line in lines) if ends else 0)
        for number, line in enumerate(lines):
            assert found.line(f.fileno(), number) == line


def test_a_file_that_shrinks_while_counted_proves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b'{"run_id": "a", "safe": true}\n')
    found = duck_read._Bytes()
    with path.open("rb") as f:
        duck_read._count(f.fileno(), 100, found)  # fewer bytes there than the size said
    assert found.error is None
    assert found.newlines == -1
    assert duck_read._prove([("h", 0, 1, False)], found, 0, 1 << 20, None) is None  # type: ignore[arg-type]
