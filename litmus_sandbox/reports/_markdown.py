"""The Markdown report (a pull-request comment): counts, reasons, then one row per case."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, BinaryIO

from litmus_sandbox._core.gate import OUTCOMES, CaseResult
from litmus_sandbox._core.runs import DecidedRun
from litmus_sandbox._core.suite import GateReport, GateSummary
from litmus_sandbox._model.safe_text import md_code
from litmus_sandbox.reports._inputs import SIDES, side_rows, version_line
from litmus_sandbox.reports._shared import (
    NOTHING_COMPARED,
    STILL_UNSAFE,
    KindRows,
    Writer,
    as_warning,
    budget_line,
    evidence_lines,
    rank,
    render,
    shown,
    side_word,
    text,
    unknown_exclusions,
)

__all__ = ["render_markdown"]


class MarkdownWriter(Writer):
    """``--format markdown``: counts and reasons, then a row per case that needs a look
    (spooled by rank)."""

    plain = False

    def __init__(self, out: BinaryIO, **kw: Any) -> None:
        super().__init__(out, **kw)
        #: A kind of legacy case's rank (-1: not listed) and the rest of its row after its
        #: case id.
        self._rows = KindRows(_kind_row)

    def write(self, results: Sequence[CaseResult]) -> None:
        spooled: dict[int, list[str]] = {}
        of = self._rows.of
        for case in results:
            place, rest = of(case)
            if place >= 0:
                # Recorded text (ids, details, evidence) only ever inside code spans.
                spooled.setdefault(place, []).append(f"| {md_code(case.case_id)} | {rest}\n")
        self._spool(spooled)

    def write_run(self, run: DecidedRun) -> None:
        rows = [(-1, "") if case is None else self._rows.of(case) for case in run.results]
        spooled: dict[int, list[str]] = {}
        for case_id, kind in zip(run.keys, run.kinds, strict=True):
            place, rest = rows[kind]
            if place >= 0:
                spooled.setdefault(place, []).append(f"| {md_code(case_id)} | {rest}\n")
        self._spool(spooled)

    def _spool(self, spooled: dict[int, list[str]]) -> None:
        for place, rows in spooled.items():  # one write a rank
            self.spool.write(place, text("".join(rows)))
            self.rows = True

    rows = False

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        decision, _ = self.decision(summary)
        lines = [f"## litmus-sandbox gate: {decision}", "", *_inputs(summary)]
        if decision == "EMPTY":
            lines += [NOTHING_COMPARED[0].upper() + NOTHING_COMPARED[1:] + ".", ""]
        lines += ["| outcome | cases |", "|---|---:|"]
        lines += [f"| {o} | {summary.counts.get(o, 0)} |" for o in OUTCOMES]
        s = summary.statistics
        lines += [
            "",
            f"Comparable cases: {s.comparable}; safe→unsafe {s.safe_to_unsafe}, unsafe→safe "
            f"{s.unsafe_to_safe} (McNemar exact p = {s.mcnemar_p:.4g}); "
            f"{STILL_UNSAFE} (unsafe→unsafe, a PASS) {s.still_unsafe}.",
            "",
        ]
        if budget := budget_line(summary, self.max_unsafe):
            lines += [budget[0].upper() + budget[1:] + ".", ""]
        if summary.reasons:
            lines += ["| reason | cases |", "|---|---:|"]
            lines += [f"| `{code}` | {n} |" for code, n in summary.reasons.items()]
            lines.append("")
        if self.rows:
            lines += ["| case | outcome | baseline → candidate | reasons |", "|---|---|---|---|"]
        self.out.write(text("".join(line + "\n" for line in lines)))
        self.copy_ranks()
        said = [*unknown_exclusions(summary), *warnings]
        self.out.write(text("".join(f"> {md_code(as_warning(w), cell=False)}\n" for w in said)))


def _kind_row(case: CaseResult) -> tuple[int, str]:
    """``case``'s rank (-1: not listed) and the rest of its row after its case id."""
    return (rank(case), _rest(case)) if shown(case) else (-1, "")


def _rest(case: CaseResult) -> str:
    """``case``'s row after its case id: outcome, sides, reasons (recorded text only ever
    inside code spans)."""
    reasons = "<br>".join(
        [md_code(line) for line in evidence_lines(case)]
        + [
            f"`{r.code}` {md_code(r.detail)}" + (f" → `{r.remedy}`" if r.remedy else "")
            for r in case.reasons
        ]
    )
    outcome: str = case.outcome
    if case.still_unsafe:
        outcome += f" **{STILL_UNSAFE}**"
    return f"{outcome} | {side_word(case.baseline)} → {side_word(case.candidate)} | {reasons} |"


def render_markdown(report: GateReport, **kw: Any) -> str:
    return render(MarkdownWriter, report, **kw)


def _inputs(summary: GateSummary) -> list[str]:
    """What was compared, a row per field (recorded text only inside code spans)."""
    lines = [f"Compared by {version_line()}.", ""]
    if summary.inputs is None:
        return [*lines, "The inputs were not given.", ""]
    sides = [side_rows(summary.inputs[name]) for name in SIDES]
    lines += ["| input | baseline | candidate |", "|---|---|---|"]
    lines += [
        f"| {key} | {md_code(b)} | {md_code(c)} |"
        for (key, b), (_, c) in zip(sides[0], sides[1], strict=True)
    ]
    return [*lines, ""]
