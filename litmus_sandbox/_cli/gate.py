"""``litmus-sandbox gate``: the streaming gate over verdict files, and its report.

Theory of operation
-------------------
The verdict files are read as the gate decides, a block at a time, never held whole:

1. **First look**, only for files too large to join in ``--memory-budget``
   (:func:`~litmus_sandbox._store.partition.scan_case_ids`): only the case ids, to tell
   whether both sides keep an order the merge can follow
   (:func:`~litmus_sandbox._core.joins.merge_order`: sorted by case id, or the same cases
   in the same order). Shuffled files are told at their first few ids.
2. **The gate** (:func:`~litmus_sandbox._core.suite.stream_gate`): a join in memory when
   the files fit the budget (the fastest way); else a merge that holds one case at a
   time, or, when the order does not allow it, a partitioned join through temporary
   files.
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any, BinaryIO

from litmus_sandbox import reports
from litmus_sandbox._cli.progress import counter
from litmus_sandbox._core.joins import MergeOrder, merge_order
from litmus_sandbox._core.probe import VerdictBlocks
from litmus_sandbox._core.suite import DEFAULT_MEMORY_BUDGET, UnsafeLimit, fits, stream_gate
from litmus_sandbox._model.errors import LitmusError
from litmus_sandbox._model.records import AnyVerdict, PolicyRecord
from litmus_sandbox._model.safe_text import for_terminal
from litmus_sandbox._store.files import replaced
from litmus_sandbox._store.partition import TempBuckets, scan_case_ids
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
        help="memory the gate may hold the verdicts in (default 1G); larger files are merged "
        "one case at a time when both keep one order, else joined through temporary files",
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
    baseline = _verdicts(args.baseline, b_warnings)
    c_stream: Iterable[AnyVerdict]
    again: Callable[[], Iterable[AnyVerdict]] | None = None
    if candidate is None:
        c_stream = _verdicts(args.candidate, c_warnings)

        def again() -> Iterable[AnyVerdict]:  # the files once more, their warnings anew
            for ws in c_warnings:
                ws.clear()
            return _verdicts(args.candidate, c_warnings)

        c_ids: Iterable[Sequence[str]] = _ids(args.candidate)
        files = [*args.baseline, *args.candidate]
    else:  # scored on the fly: held already
        c_stream, c_ids, files = candidate, [[v.case_id for v in candidate]], args.baseline
    size = sum(_size(p) for p in files)
    order = None
    if not fits(size, args.memory_budget):
        order = _first_look(_ids(args.baseline), c_ids, args.memory_budget)
    with (
        _no_cyclic_collection(),
        TempBuckets() as buckets,
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
        summary = stream_gate(
            baseline,
            c_stream,
            sink,
            exclusions=exclusions,
            baseline_recordings=recordings,
            order=order,
            buckets=buckets,
            memory_budget=args.memory_budget,
            size_hint=size,
            candidate_again=again,
        )
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
        HtmlWriter(out, episodes=episodes, detector=detector, **flags) as html,
    ):
        yield html


def _verdicts(paths: Sequence[str], warnings: list[list[ReadWarning]]) -> VerdictBlocks:
    blocks = (iter_verdicts(p, w) for p, w in zip(paths, warnings, strict=True))
    return VerdictBlocks(chain.from_iterable(blocks))


def _ids(paths: Sequence[str]) -> Iterator[list[str]]:
    return chain.from_iterable(scan_case_ids(p) for p in paths)


def _first_look(
    b_ids: Iterable[Sequence[str]], c_ids: Iterable[Sequence[str]], budget: int
) -> MergeOrder | None:
    """The order the merge may follow, or None (join): see the module docstring."""
    try:
        # A case id held to tell "lockstep" takes some 100 bytes: a quarter of the budget.
        return merge_order(b_ids, c_ids, max_keys=max(1, budget // 400))
    except LitmusError:
        return None  # the gate's reader names the bad line


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
