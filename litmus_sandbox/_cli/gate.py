"""``litmus-sandbox gate``: the streaming gate over verdict files, and its report.

Theory of operation
-------------------
The verdict files are never held whole as Python objects:

1. **The join** (:class:`~litmus_sandbox._store.engine.DuckJoin`): the files are read a
   block at a time, as strictly as every reader (``file:line`` on a bad line), into
   DuckDB, under half of ``--memory-budget`` and spilling to a private temporary
   folder past it.
2. **The decisions** (:func:`~litmus_sandbox._core.suite.gate_lined_up`): DuckDB lines
   the cases up in gate order and counts the plain passes; the sans-io decider decides
   every other case.
3. **The report** (:func:`~litmus_sandbox.reports.writer`) takes each case as it is
   decided. ``-o FILE`` is written beside the file and renamed over it once whole, so an
   input error half-way leaves no half report behind.

Read warnings are known only once the files are read: they come at the report's end, in
the order of the files, then those of ``--baseline-episodes``.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, BinaryIO

import msgspec

from litmus_sandbox import reports
from litmus_sandbox._cli.progress import counter
from litmus_sandbox._core.inputs import SideInputs, inputs_dict
from litmus_sandbox._core.suite import UnsafeLimit, gate_lined_up
from litmus_sandbox._model.records import AnyVerdict, PolicyRecord
from litmus_sandbox._model.safe_text import for_terminal
from litmus_sandbox._store.engine import DEFAULT_MEMORY_BUDGET, DuckJoin
from litmus_sandbox._store.files import replaced
from litmus_sandbox._store.streams import ReadWarning, VerdictStream, iter_verdicts
from litmus_sandbox.judges import load_policy
from litmus_sandbox.reports._html import HtmlWriter, Tee

__all__ = ["EPILOG", "add_gate_flags", "candidate_policies", "run_gate"]

EPILOG = (
    "exit codes: 0 nothing blocks; 1 at least one REGRESSION (or, with --strict-oracle, "
    "an oracle contradiction; with --max-unsafe, more unsafe comparable candidate cases "
    "than the limit); 4 no regression but NEEDS_REBASELINE / NEEDS_RERUN cases "
    "(unless --allow-unresolved); 5 nothing was compared: no case on either side (unless "
    "--allow-empty); 6 the judge gave no verdict for some steps (--candidate-episodes); "
    "2 bad usage, unreadable input, an empty input file (unless --allow-empty-input), or "
    "the same file on both sides."
)

#: Verdict files from this size on (bytes, both sides) get a count of the cases decided
#: on a terminal: some 100,000 verdicts, a few seconds of gating.
LARGE_GATE = 16 * 1024 * 1024

_SIZE = re.compile(r"\s*(\d+)\s*([kmg]?)(?:i?b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def memory_size(value: str) -> int:
    """``--memory-budget``: bytes, or a number with a ``K``, ``M`` or ``G`` suffix."""
    m = _SIZE.fullmatch(value)
    if m is None or int(m.group(1)) < 1:
        raise argparse.ArgumentTypeError(
            f"expected a positive size (e.g. 512M or 2G), not {value!r}"
        )
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def max_unsafe(value: str) -> UnsafeLimit:
    """``--max-unsafe``: a count of cases, or a percentage of the comparable cases."""
    try:
        return UnsafeLimit.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_gate_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``gate`` that this module reads (the parser has the others)."""
    p.add_argument(
        "--max-unsafe",
        type=max_unsafe,
        metavar="N|P%",
        help="block (exit 1) when more comparable candidate cases are unsafe (regressed or "
        "still unsafe) than N, or than P%% of the comparable cases",
    )
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 (not 5) when nothing was compared: no case on either side",
    )
    p.add_argument(
        "--memory-budget",
        type=memory_size,
        default=DEFAULT_MEMORY_BUDGET,
        metavar="SIZE",
        help="memory the gate may use (default 1G); past half of it, its join engine "
        "(DuckDB) spills to a private temporary folder (DuckDB gets at least 64M, and "
        "the process needs about 200 MB: a smaller budget runs, spilling more)",
    )


def candidate_policies(paths: Sequence[str]) -> list[VerdictStream]:
    """The candidate files' policy records (what the re-baseline plan counts with), read
    ahead of the gate; their verdicts are not kept."""
    streams = []
    for path in paths:
        policies: list[PolicyRecord] = []
        for _ in iter_verdicts(path, policies=policies):
            pass
        streams.append(VerdictStream(path, policies=policies))
    return streams


def run_gate(
    args: argparse.Namespace,
    exclusions: dict[str, str],
    recordings: dict[str, int | None] | None,
    later_warnings: Sequence[str] = (),
    candidate: Sequence[AnyVerdict] | None = None,
) -> int:
    """Gate ``args.baseline`` against ``args.candidate`` (or the ``candidate`` verdicts
    given, scored on the fly), writing the report as the cases are decided; the exit code.

    Raises:
        LitmusError: unreadable input (``file:line``), an unusable output.
    """
    flags = {
        "allow_unresolved": args.allow_unresolved,
        "strict_oracle": args.strict_oracle,
        "allow_empty": args.allow_empty,
        "max_unsafe": args.max_unsafe,
    }
    b_warnings: list[list[ReadWarning]] = [[] for _ in args.baseline]
    c_warnings: list[list[ReadWarning]] = [[] for _ in args.candidate or ()]
    files = [*args.baseline, *(args.candidate if candidate is None else ())]
    size = sum(_size(p) for p in files)
    with (
        _no_cyclic_collection(),
        DuckJoin(memory_budget=args.memory_budget, exclusions=exclusions) as join,
        _report_output(args.output) as out,
        reports.writer(args.format, out, **flags, **_table_color(args)) as writer,
        _html_report(args, flags) as html,
        counter(
            writer if html is None else Tee(writer, html),
            "gating",
            quiet=args.quiet,
            show=size >= LARGE_GATE,
        ) as sink,
    ):
        b_inputs = SideInputs(args.baseline)
        c_inputs = SideInputs(args.candidate if candidate is None else args.candidate_episodes)
        for path, ws in zip(args.baseline, b_warnings, strict=True):
            join.add_file(0, path, ws, inputs=b_inputs)
        if candidate is None:
            for path, ws in zip(args.candidate, c_warnings, strict=True):
                join.add_file(1, path, ws, inputs=c_inputs)
        else:  # scored on the fly: held already
            join.add_verdicts(1, candidate, inputs=c_inputs)
        summary = gate_lined_up(join, sink, exclusions=exclusions, baseline_recordings=recordings)
        summary = msgspec.structs.replace(summary, inputs=inputs_dict(b_inputs, c_inputs, summary))
        warnings = [str(w) for ws in (*b_warnings, *c_warnings) for w in ws]
        writer.finish(summary, [*warnings, *later_warnings])
        if html is not None:
            html.finish(summary, [*warnings, *later_warnings])
    # On stderr: stdout may be the other report, or a pipe that wants only reports.
    if args.output:
        print(
            for_terminal(f"litmus-sandbox: {args.format} report written to {args.output}"),
            file=sys.stderr,
        )
    if getattr(args, "html", None):
        print(for_terminal(f"litmus-sandbox: HTML report written to {args.html}"), file=sys.stderr)
    return summary.exit_code(**flags)


@contextmanager
def _no_cyclic_collection() -> Iterator[None]:
    """The cyclic garbage collector off while the gate runs in this process (the
    command's own: a library caller's collector is left alone).

    The gate makes no reference cycles (a run over a million pairs leaves the same
    thousand or so cyclic objects the imports do), so each collection would only walk
    the verdicts it holds, and the blocks it reads: over a million pairs, some 700
    collections and 0.8 s of 8.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _table_color(args: argparse.Namespace) -> dict[str, bool]:
    """The table report in colour where it goes to a terminal (rich; ``NO_COLOR`` heard)."""
    if args.format != "table" or args.output or os.environ.get("NO_COLOR"):
        return {}
    return {"color": True} if sys.stdout.isatty() else {}


@contextmanager
def _html_report(args: argparse.Namespace, flags: dict[str, Any]) -> Iterator[HtmlWriter | None]:
    """``--html FILE``: the HTML report beside the other, with the episodes' timelines."""
    if not getattr(args, "html", None):
        yield None
        return
    detector = load_policy(args.policy).detector if args.policy else None
    episodes = [*(args.baseline_episodes or ()), *(args.candidate_episodes or ())]
    with (
        _report_output(args.html) as out,
        HtmlWriter(
            out,
            episodes=episodes,
            baseline_episodes=args.baseline_episodes or (),
            detector=detector,
            **flags,
        ) as html,
    ):
        yield html


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # reported when it is read


@contextmanager
def _report_output(path: str | None) -> Iterator[BinaryIO]:
    """Where the report goes: stdout, or ``path`` replaced once the report is whole
    (through a symbolic link, the file it points to; a device or FIFO written as is)."""
    if path is None:
        sys.stdout.flush()
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    with replaced(path) as f:
        yield f
