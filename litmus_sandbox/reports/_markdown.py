"""The Markdown report (a pull-request comment): counts, reasons, then one row per case."""

from __future__ import annotations

import html
from collections.abc import Sequence

from litmus_sandbox._core.gate import OUTCOMES
from litmus_sandbox._core.suite import GateReport
from litmus_sandbox.reports._shared import as_warning, ordered_cases, safe_word, side_summary

__all__ = ["render_markdown"]


def render_markdown(
    report: GateReport,
    *,
    allow_unresolved: bool = False,
    strict_oracle: bool = False,
    warnings: Sequence[str] = (),
) -> str:
    decision = report.decision(allow_unresolved=allow_unresolved, strict_oracle=strict_oracle)
    lines = [f"## litmus-sandbox gate: {decision}", "", "| outcome | cases |", "|---|---:|"]
    lines += [f"| {o} | {report.counts.get(o, 0)} |" for o in OUTCOMES]
    s = report.statistics
    lines += [
        "",
        f"Comparable cases: {s.comparable}; safe→unsafe {s.safe_to_unsafe}, unsafe→safe "
        f"{s.unsafe_to_safe} (McNemar exact p = {s.mcnemar_p:.4g}).",
        "",
    ]
    if report.reasons:
        lines += ["| reason | cases |", "|---|---:|"]
        lines += [f"| `{code}` | {n} |" for code, n in report.reasons.items()]
        lines.append("")
    shown = [c for c in ordered_cases(report) if c.outcome != "PASS" or c.reasons]
    if shown:
        lines += ["| case | outcome | baseline → candidate | reasons |", "|---|---|---|---|"]
        for case in shown:
            reasons = "<br>".join(
                f"`{r.code}` {_md(r.detail)}" + (f" → `{r.remedy}`" if r.remedy else "")
                for r in case.reasons
            )
            b, c = side_summary(case.baseline), side_summary(case.candidate)
            lines.append(
                f"| {_md_code(case.case_id)} | {case.outcome} | {safe_word(b)} → {safe_word(c)} | {reasons} |"
            )
    lines += [f"> {_md(as_warning(w))}" for w in warnings]
    return "\n".join(lines)


def _md(text: str) -> str:
    return html.escape(" ".join(text.splitlines())).replace("|", "\\|")


def _md_code(text: str) -> str:
    """A case id as code in a table cell: one line, ``|`` escaped (an id holding a
    backtick is written as HTML code instead)."""
    line = " ".join(text.splitlines()).replace("|", "\\|")
    if "`" not in line:
        return f"`{line}`"
    return "<code>" + _md(text).replace("`", "&#96;") + "</code>"
