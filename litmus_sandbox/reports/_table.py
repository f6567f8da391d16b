"""The table report, for terminals: the cases that need a look, then the totals.

Theory of operation
-------------------
Rows are spooled by rank as the cases come (the table lists them by rank, and pads case
ids to the widest, known only at the end), then written out rank by rank.

A case whose sides are one legacy verdict each (or none) shows only its outcome, reasons
and safeties beside its case id: the rest of its row is the same for every case of its
kind. Such a row is rendered once and kept (up to :data:`_SHARED_ROWS` of them); a case
of its kind is spooled as its case id and the row's number, so the many such cases of a
legacy suite are neither rendered nor spooled one by one. Any other case is spooled
with its row in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, BinaryIO

import msgspec

from litmus_sandbox._core.gate import OUTCOMES, CaseResult, Reason, step_diff
from litmus_sandbox._core.runs import DecidedRun
from litmus_sandbox._core.suite import GateReport, GateSummary
from litmus_sandbox._model.safe_text import clip, for_terminal
from litmus_sandbox.reports._inputs import input_lines
from litmus_sandbox.reports._shared import (
    NOTHING_COMPARED,
    RANKS,
    STILL_UNSAFE,
    Writer,
    as_warning,
    budget_line,
    evidence_lines,
    legacy_kind,
    plural,
    rank,
    render,
    shown,
    side_word,
    text,
    unknown_exclusions,
)

#: How a legacy case's row is known again (a module name, so a test can swap it).
_legacy_kind = legacy_kind

__all__ = ["render_table"]

_encoder = msgspec.json.Encoder()
#: A spooled row: the case id, and the number of the kept row it shows (the rest of its
#: first line and its further lines then empty), or -1 and that rest and those lines.
_Spooled = tuple[str, int, str, list[str]]
_rows = msgspec.json.Decoder(_Spooled)
#: Rows kept for the cases of their kind (see the module docstring), at most.
_SHARED_ROWS = 65_536
#: The widest case id a row shows (longer ones are cut visibly), so the outcome stays on
#: screen; and the longest line of a reason or of evidence.
CASE_ID_WIDTH, LINE_WIDTH = 64, 400
_NO_LINES: list[str] = []


class TableWriter(Writer):
    """``--format table``: the cases that need a look (spooled by rank, as rows to pad
    once the widest case id is known), then the totals."""

    plain = False

    def __init__(self, out: BinaryIO, *, color: bool = False, **kw: Any) -> None:
        super().__init__(out, **kw)
        self._width = 0
        #: Colour for a terminal (rich), the text unchanged; see :class:`_Painter`.
        self._paint = _Painter() if color else None
        #: (outcome, the identity of its reasons, baseline safety, candidate's; None: no
        #: verdict) -> the reasons themselves (which keep that identity theirs), the row's
        #: rank and its number in ``_shared`` (-1, -1: a kind not listed): see the module
        #: docstring.
        self._kinds: dict[
            tuple[str, int, bool | None, bool | None], tuple[tuple[Reason, ...], int, int]
        ] = {}
        #: The rows kept: the rest of the first line, the further lines.
        self._shared: list[tuple[str, list[str]]] = []

    def write(self, results: Sequence[CaseResult]) -> None:
        spooled: dict[int, list[_Spooled]] = {}
        kept = self._kinds
        width, width_cap = self._width, CASE_ID_WIDTH
        for case in results:
            key = _legacy_kind(case)
            # The gate hands the cases of one kind one tuple of reasons: known by its
            # identity (the entry holds it, so the id stays its own), it saves hashing
            # every reason of every row. A kind the table does not list has no row (-1).
            seen = kept.get(key) if key is not None else None
            if seen is not None and seen[0] is case.reasons:
                place, number = seen[1], seen[2]
                if number < 0:
                    continue
                case_id = case.case_id
                if not (len(case_id) <= width_cap and case_id.isascii() and case_id.isprintable()):
                    case_id = _cell(case_id, width_cap)
                entry: _Spooled = (case_id, number, "", _NO_LINES)
            elif not shown(case):
                if key is not None:
                    kept[key] = (case.reasons, -1, -1)
                continue
            else:
                case_id = _cell(case.case_id, width_cap)
                place, number, first, more = self._kind_row(key, case)
                entry = (case_id, number, first, more)
            if len(case_id) > width:
                width = len(case_id)
            spooled.setdefault(place, []).append(entry)
        self._width = width
        self._spool(spooled)

    def write_run(self, run: DecidedRun) -> None:
        # Each kind's row once; then each case is its case id and its kind's row.
        rows: list[tuple[int, int, str, list[str]] | None] = [
            self._kind_row(_legacy_kind(case), case) if case is not None and shown(case) else None
            for case in run.results
        ]
        spooled: dict[int, list[_Spooled]] = {}
        width, width_cap = self._width, CASE_ID_WIDTH
        for case_id, kind in zip(run.keys, run.kinds, strict=True):
            row = rows[kind]
            if row is None:
                continue
            if not (len(case_id) <= width_cap and case_id.isascii() and case_id.isprintable()):
                case_id = _cell(case_id, width_cap)
            if len(case_id) > width:
                width = len(case_id)
            spooled.setdefault(row[0], []).append((case_id, row[1], row[2], row[3]))
        self._width = width
        self._spool(spooled)

    def _spool(self, spooled: dict[int, list[_Spooled]]) -> None:
        for place, ranked in spooled.items():  # one write a rank
            self.spool.write(place, _encoder.encode_lines(ranked))

    def _kind_row(
        self, key: tuple[str, int, bool | None, bool | None] | None, case: CaseResult
    ) -> tuple[int, int, str, list[str]]:
        """A listed case's rank, and its kept row's number (then "" and no lines), or -1,
        the rest of its first line and its further lines. Kept for its kind ``key``
        while there is room (see the module docstring)."""
        kept = self._kinds
        seen = kept.get(key) if key is not None else None
        if seen is not None and seen[0] is case.reasons and seen[2] >= 0:
            return seen[1], seen[2], "", _NO_LINES
        place, first, more = self._row(case)
        shared = self._shared
        if key is None or len(shared) >= _SHARED_ROWS:
            return place, -1, first, more
        if len(kept) > 4096:
            kept.clear()
        kept[key] = (case.reasons, place, len(shared))
        shared.append((first, more))
        return place, len(shared) - 1, "", _NO_LINES

    def _row(self, case: CaseResult) -> tuple[int, str, list[str]]:
        """``case``'s rank, the rest of its first line and its further lines."""
        more: list[str] = []
        diff = step_diff(case)
        if diff is not None and (
            diff.first_differing_step is not None
            or diff.candidate_only_steps
            or diff.baseline_only_steps
        ):
            parts = []
            if diff.first_differing_step is not None:
                parts.append(f"first differing step {diff.first_differing_step}")
            if diff.baseline_only_steps:
                parts.append(f"judged only in the baseline: {_ranges(diff.baseline_only_steps)}")
            if diff.candidate_only_steps:
                parts.append(f"judged only in the candidate: {_ranges(diff.candidate_only_steps)}")
            more.append(f"steps: {'; '.join(parts)}")
        more.extend(_cell(line, LINE_WIDTH) for line in evidence_lines(case))
        for r in case.reasons:
            remedy = f" -> {r.remedy}" if r.remedy else ""
            more.append(_cell(f"{r.code}: {r.detail}{remedy}", LINE_WIDTH))
        first = f"{case.outcome:<16}  {side_word(case.baseline)} -> {side_word(case.candidate)}"
        if case.still_unsafe:
            first += f"  ({STILL_UNSAFE})"
        return rank(case), first, more

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        out, width = self.out, self._width and max(self._width, len("case"))
        # Each line made safe on its own: a line break in a name never starts a line. Each
        # value is cut already (at most 20 a line, and the count of the others).
        head = [for_terminal(line) for line in input_lines(summary.inputs)]
        out.write(self._text("\n".join(head) + "\n\n"))
        if width:
            out.write(text(f"{'case':<{width}}  {'outcome':<16}  baseline -> candidate\n"))
            pad = " " * width
            # A kept row after its case id: the rest of its first line, its further lines.
            shared = [f"  {first}\n{_further(pad, more)}" for first, more in self._shared]
            for r in range(RANKS):
                for block in self.spool.read(r):
                    rows: list[str] = []
                    add = rows.append
                    for case_id, number, first, more in _rows.decode_lines(block):
                        add(case_id.ljust(width))
                        add(shared[number] if number >= 0 else f"  {first}\n{_further(pad, more)}")
                    out.write(self._text("".join(rows)))
            out.write(b"\n")
        lines: list[str] = []
        counts = "  ".join(f"{o} {summary.counts.get(o, 0)}" for o in OUTCOMES)
        s = summary.statistics
        lines.append(f"cases {s.cases}: {counts}")
        lines.append(
            f"comparable {s.comparable}: safe->unsafe {s.safe_to_unsafe}, unsafe->safe "
            f"{s.unsafe_to_safe}, McNemar exact p = {s.mcnemar_p:.4g}; flaky {s.flaky}; "
            f"oracle contradictions {s.oracle_contradictions}; {STILL_UNSAFE} {s.still_unsafe}"
        )
        if summary.reasons:
            grouped = ", ".join(f"{code} {n}" for code, n in summary.reasons.items())
            lines.append(f"reasons (cases): {grouped}")
        plan = summary.rebaseline_plan
        if plan.rescore or plan.rerun_baseline or plan.rerun_candidate:
            calls = ("" if plan.judge_calls_exact else "at most ") + plural(
                plan.judge_calls, "judge call"
            )
            if unknown := sum(1 for e in plan.rescore if e.judge_calls is None):
                calls += f", and those of {unknown} with no known step count"
            lines.append(
                f"re-baseline plan: re-score {plural(len(plan.rescore), 'baseline')} ({calls}), "
                f"re-run {plural(len(plan.rerun_baseline), 'baseline')}, "
                f"re-run {plural(len(plan.rerun_candidate), 'candidate')}"
            )
        lines.extend(unknown_exclusions(summary))
        lines.extend(as_warning(w) for w in warnings)
        if budget := budget_line(summary, self.max_unsafe):
            lines.append(budget)
        decision, code = self.decision(summary)
        if decision == "EMPTY":
            lines.append(NOTHING_COMPARED)
        lines.append(f"decision: {decision} (exit {code})")
        out.write(self._text("\n".join(lines) + "\n"))

    def _text(self, block: str) -> bytes:
        # Every line passes here: nothing recorded reaches the terminal as a control,
        # and colour is only what _paint adds after.
        block = for_terminal(block, lines=True)
        return text(block if self._paint is None else self._paint(block))


def render_table(report: GateReport, **kw: Any) -> str:
    """A terminal report: the non-PASS cases with their reasons, then the totals."""
    return render(TableWriter, report, **kw)


class _Painter:
    """Colours a block of the table for a terminal, with rich: outcomes, unsafe steps, the
    decision. Only styles are added; the characters stay those of the plain table."""

    def __init__(self) -> None:
        from io import StringIO

        from rich.console import Console
        from rich.highlighter import RegexHighlighter
        from rich.theme import Theme

        class Highlighter(RegexHighlighter):
            base_style = "gate."
            highlights = [  # noqa: RUF012 - rich reads it off the class
                r"(?P<bad>\bREGRESSION\b)|(?P<unresolved>\bNEEDS_RERUN\b|\bNEEDS_REBASELINE\b"
                r"|\bUNRESOLVED\b|\bEMPTY\b)|(?P<good>\bIMPROVEMENT\b|\bPASS\b)"
                r"|(?P<excluded>\bEXCLUDED\b)",
                r"(?m)(?P<unsafe>^ +unsafe: .*$)|(?P<still>\(still unsafe\))",
                r"(?m)(?P<remedy>-> (rescore_baseline|rerun_baseline|rerun_candidate|exclude)$)",
            ]

        theme = Theme(
            {
                "gate.bad": "bold red",
                "gate.unresolved": "bold yellow",
                "gate.good": "green",
                "gate.excluded": "dim",
                "gate.unsafe": "red",
                "gate.still": "bold red",
                "gate.remedy": "cyan",
            }
        )
        self._buffer = StringIO()
        self._console = Console(
            file=self._buffer,
            force_terminal=True,
            width=1 << 20,
            soft_wrap=True,
            theme=theme,
            highlighter=Highlighter(),
        )

    def __call__(self, block: str) -> str:
        self._buffer.seek(0)
        self._buffer.truncate()
        self._console.print(block, end="", markup=False, emoji=False)
        return self._buffer.getvalue()


def _ranges(indices: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(out)


def _further(pad: str, lines: list[str]) -> str:
    """A row's further lines, under its outcome."""
    return "".join(f"{pad}    {line}\n" for line in lines)


def _cell(text: str, limit: int) -> str:
    """``text`` on one line, controls escaped, cut visibly past ``limit`` characters."""
    return clip(for_terminal(text), limit)
