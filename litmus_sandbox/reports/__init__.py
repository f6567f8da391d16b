"""Gate reports: table (for terminals), JSON (the machine contract), JUnit XML, Markdown.

The JSON report is one object::

    {
      "decision": "PASS" | "REGRESSION" | "UNRESOLVED",
      "exit_code": 0 | 1 | 4,
      "counts": {"PASS": n, "IMPROVEMENT": n, "REGRESSION": n,
                 "NEEDS_REBASELINE": n, "NEEDS_RERUN": n, "EXCLUDED": n},
      "cases": [{"case_id", "outcome", "reasons": [{"code", "detail", "remedy"}],
                 "baseline": summary | null, "candidate": summary | null,
                 "steps": {"first_differing_step", "baseline_only_steps",
                           "candidate_only_steps"} | null}],
      "statistics": {"cases", "comparable", "safe_to_unsafe", "unsafe_to_safe",
                     "mcnemar_p", "flaky", "oracle_contradictions"},
      "reasons": {reason code: cases carrying it, ...},  (most frequent first)
      "rebaseline_plan": {"rescore": [{"case_id", "judge_calls", "reasons"}],
                          "judge_calls", "judge_calls_exact",
                          "rerun_baseline": [...], "rerun_candidate": [...]},
      "unknown_exclusions": [case_id, ...],
      "warnings": [str, ...]
    }

A side summary is ``{"safe", "epochs", "episode_ids", "legacy", "first_unsafe_step",
"steps_recorded", "steps_covered", "judge", "judge_fingerprint",
"truncate_on_refusal", "truncate_on_empty_tool_result"}`` (``safe`` is pass^k over the
epochs). Cases are listed oracle contradictions first, then by outcome: REGRESSION,
NEEDS_RERUN, NEEDS_REBASELINE, IMPROVEMENT, PASS, EXCLUDED.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

import msgspec

from litmus_sandbox._core.gate import OUTCOMES, CaseResult, step_diff
from litmus_sandbox._core.suite import GateReport
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict

FORMATS = ("table", "json", "junit", "markdown")
_RANK = {o: i for i, o in enumerate(OUTCOMES)}


def ordered_cases(report: GateReport) -> list[CaseResult]:
    """Oracle contradictions first, then by outcome severity, then in input order."""
    return sorted(report.cases, key=lambda c: (not c.contradicted, _RANK[c.outcome]))


def side_summary(verdicts: Sequence[AnyVerdict]) -> dict[str, Any] | None:
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


def case_to_dict(case: CaseResult) -> dict[str, Any]:
    diff = step_diff(case)
    return {
        "case_id": case.case_id,
        "outcome": case.outcome,
        "reasons": [msgspec.to_builtins(r) for r in case.reasons],
        "baseline": side_summary(case.baseline),
        "candidate": side_summary(case.candidate),
        "steps": msgspec.to_builtins(diff) if diff is not None else None,
    }


def to_dict(
    report: GateReport,
    *,
    allow_unresolved: bool = False,
    strict_oracle: bool = False,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON report as a dict (see the module docstring for its shape)."""
    return {
        "decision": report.decision(allow_unresolved=allow_unresolved, strict_oracle=strict_oracle),
        "exit_code": report.exit_code(
            allow_unresolved=allow_unresolved, strict_oracle=strict_oracle
        ),
        "counts": dict(report.counts),
        "cases": [case_to_dict(c) for c in ordered_cases(report)],
        "statistics": msgspec.to_builtins(report.statistics),
        "reasons": dict(report.reasons),
        "rebaseline_plan": msgspec.to_builtins(report.rebaseline_plan),
        "unknown_exclusions": list(report.unknown_exclusions),
        "warnings": list(warnings),
    }


def render_json(report: GateReport, **kw: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(to_dict(report, **kw)), indent=2).decode()


def _safe_word(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "-"
    return "safe" if summary["safe"] else "unsafe"


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
                f"{_safe_word(b)} -> {_safe_word(c)}"
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
    lines.extend(_as_warning(w) for w in warnings)
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
                f"| {_md_code(case.case_id)} | {case.outcome} | {_safe_word(b)} → {_safe_word(c)} | {reasons} |"
            )
    lines += [f"> {_md(_as_warning(w))}" for w in warnings]
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


#: Characters XML 1.0 cannot carry at all (most C0 controls, surrogates, U+FFFE/U+FFFF).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    """``text`` with what XML cannot carry written as ``\\xNN`` (so the file always parses)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def escape(text: str) -> str:
    return _escape(_xml_text(text))


def quoteattr(text: str) -> str:
    return _quoteattr(_xml_text(text))


def render_junit(
    report: GateReport,
    *,
    allow_unresolved: bool = False,
    strict_oracle: bool = False,
    warnings: Sequence[str] = (),
) -> str:
    """JUnit XML: REGRESSION fails, unresolved cases error (skipped when allowed), EXCLUDED skips."""
    del warnings
    failures = errors = skipped = 0
    body: list[str] = []
    for case in ordered_cases(report):
        detail = "\n".join(
            f"{r.code}: {r.detail}" + (f" -> {r.remedy}" if r.remedy else "") for r in case.reasons
        )
        inner = ""
        blocking_oracle = strict_oracle and case.contradicted and case.outcome != "EXCLUDED"
        if case.outcome == "REGRESSION" or blocking_oracle:
            failures += 1
            inner = f"<failure message={quoteattr(case.outcome)}>{escape(detail or 'safe -> unsafe')}</failure>"
        elif case.outcome in ("NEEDS_REBASELINE", "NEEDS_RERUN"):
            if allow_unresolved:
                skipped += 1
                inner = f"<skipped message={quoteattr(case.outcome)}>{escape(detail)}</skipped>"
            else:
                errors += 1
                inner = f"<error message={quoteattr(case.outcome)}>{escape(detail)}</error>"
        elif case.outcome == "EXCLUDED":
            skipped += 1
            inner = f"<skipped message={quoteattr('EXCLUDED')}>{escape(detail)}</skipped>"
        elif detail:
            inner = f"<system-out>{escape(case.outcome + chr(10) + detail)}</system-out>"
        body.append(
            f'  <testcase classname="litmus.gate" name={quoteattr(case.case_id)}>{inner}</testcase>'
        )
    head = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name="litmus-sandbox gate" tests="{len(report.cases)}" failures="{failures}" '
        f'errors="{errors}" skipped="{skipped}">'
    )
    return "\n".join([head, *body, "</testsuite>"])


def render(report: GateReport, fmt: str, **kw: Any) -> str:
    """Render ``report`` in one of :data:`FORMATS`."""
    renderers = {
        "table": render_table,
        "json": render_json,
        "junit": render_junit,
        "markdown": render_markdown,
    }
    return renderers[fmt](report, **kw)


def _as_warning(text: str) -> str:
    """``text`` said as a warning, once (a reader's warnings already say so)."""
    return text if "warning: " in text else f"warning: {text}"


def _one_line(text: str) -> str:
    """``text`` with control characters escaped (``\\n``): one case, one table row."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
