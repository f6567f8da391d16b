"""The table report, for terminals: the cases that need a look, then the totals."""

from __future__ import annotations

from collections.abc import Sequence

from litmus_sandbox._core.gate import OUTCOMES, step_diff
from litmus_sandbox._core.suite import GateReport
from litmus_sandbox.reports._shared import as_warning, ordered_cases, safe_word, side_summary

__all__ = ["render_table"]


def render_table(
    report: GateReport,
    *,
    allow_unresolved: bool = False,
    strict_oracle: bool = False,
    warnings: Sequence[str] = (),
) -> str:
    """A terminal report: the non-PASS cases with their reasons, then the totals."""
    lines: list[str] = []
    shown = [c for c in ordered_cases(report) if c.outcome != "PASS" or c.reasons]
    if shown:
        ids = {c.case_id: _one_line(c.case_id) for c in shown}
        width = max(len(i) for i in ids.values())
        lines.append(f"{'case':<{width}}  {'outcome':<16}  baseline -> candidate")
        for case in shown:
            b, c = side_summary(case.baseline), side_summary(case.candidate)
            lines.append(
                f"{ids[case.case_id]:<{width}}  {case.outcome:<16}  "
                f"{safe_word(b)} -> {safe_word(c)}"
            )
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
                    parts.append(f"baseline-only steps {_ranges(diff.baseline_only_steps)}")
                if diff.candidate_only_steps:
                    parts.append(f"candidate-only steps {_ranges(diff.candidate_only_steps)}")
                lines.append(f"{'':<{width}}    steps: {'; '.join(parts)}")
            for r in case.reasons:
                remedy = f" -> {r.remedy}" if r.remedy else ""
                lines.append(f"{'':<{width}}    {r.code}: {r.detail}{remedy}")
        lines.append("")
    counts = "  ".join(f"{o} {report.counts.get(o, 0)}" for o in OUTCOMES)
    s = report.statistics
    lines.append(f"cases {s.cases}: {counts}")
    lines.append(
        f"comparable {s.comparable}: safe->unsafe {s.safe_to_unsafe}, unsafe->safe "
        f"{s.unsafe_to_safe}, McNemar exact p = {s.mcnemar_p:.4g}; flaky {s.flaky}; "
        f"oracle contradictions {s.oracle_contradictions}"
    )
    if report.reasons:
        grouped = ", ".join(f"{code} {n}" for code, n in report.reasons.items())
        lines.append(f"reasons (cases): {grouped}")
    plan = report.rebaseline_plan
    if plan.rescore or plan.rerun_baseline or plan.rerun_candidate:
        calls = ("" if plan.judge_calls_exact else "at most ") + f"{plan.judge_calls} judge calls"
        if unknown := sum(1 for e in plan.rescore if e.judge_calls is None):
            calls += f", and those of {unknown} with no known step count"
        lines.append(
            f"re-baseline plan: re-score {len(plan.rescore)} baselines ({calls}), "
            f"re-run {len(plan.rerun_baseline)} baselines, re-run {len(plan.rerun_candidate)} candidates"
        )
    if report.unknown_exclusions:
        lines.append(f"exclusions naming no case: {', '.join(report.unknown_exclusions)}")
    lines.extend(as_warning(w) for w in warnings)
    decision = report.decision(allow_unresolved=allow_unresolved, strict_oracle=strict_oracle)
    code = report.exit_code(allow_unresolved=allow_unresolved, strict_oracle=strict_oracle)
    lines.append(f"decision: {decision} (exit {code})")
    return "\n".join(lines)


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


def _one_line(text: str) -> str:
    """``text`` with control characters escaped (``\\n``): one case, one table row."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
