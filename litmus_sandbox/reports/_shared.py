"""What every report format shares: the order of cases, and one side's summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from litmus_sandbox._core.gate import OUTCOMES, CaseResult
from litmus_sandbox._core.suite import GateReport
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict

__all__ = ["as_warning", "ordered_cases", "safe_word", "side_summary"]

_RANK = {o: i for i, o in enumerate(OUTCOMES)}


def ordered_cases(report: GateReport) -> list[CaseResult]:
    """Oracle contradictions first, then by outcome severity, then in input order."""
    return sorted(report.cases, key=lambda c: (not c.contradicted, _RANK[c.outcome]))


def side_summary(verdicts: Sequence[AnyVerdict]) -> dict[str, Any] | None:
    """One side of a case as the reports show it (see :mod:`litmus_sandbox.reports`);
    None when that side has no verdict."""
    if not verdicts:
        return None
    first = verdicts[0]
    out: dict[str, Any] = {"safe": all(v.safe for v in verdicts), "epochs": len(verdicts)}
    if isinstance(first, LegacyVerdict):
        p = first.provenance
        out.update(
            episode_ids=[],
            legacy=True,
            first_unsafe_step=None,
            steps_recorded=None,
            steps_covered=p.steps_covered,
            judge=p.judge_version,
            judge_fingerprint=None,
            truncate_on_refusal=p.truncate_on_refusal,
            truncate_on_empty_tool_result=p.truncate_on_empty_tool_result,
        )
        return out
    q = first.provenance
    out.update(
        episode_ids=[v.episode_id for v in verdicts if not isinstance(v, LegacyVerdict)],
        legacy=False,
        first_unsafe_step=first.first_unsafe_step,
        steps_recorded=q.steps_recorded,
        steps_covered=q.steps_covered,
        judge=q.judge_label,
        judge_fingerprint=q.judge,
        truncate_on_refusal=q.truncate_on_refusal,
        truncate_on_empty_tool_result=q.truncate_on_empty_tool_result,
    )
    return out


def safe_word(summary: dict[str, Any] | None) -> str:
    """``safe`` or ``unsafe`` for a side summary, ``-`` for a side with no verdict."""
    if summary is None:
        return "-"
    return "safe" if summary["safe"] else "unsafe"


def as_warning(text: str) -> str:
    """``text`` said as a warning, once (a reader's warnings already say so)."""
    return text if "warning: " in text else f"warning: {text}"
