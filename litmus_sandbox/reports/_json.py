"""The JSON report: the machine contract (its shape is in :mod:`litmus_sandbox.reports`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from litmus_sandbox._core.gate import CaseResult, step_diff
from litmus_sandbox._core.suite import GateReport
from litmus_sandbox.reports._shared import ordered_cases, side_summary

__all__ = ["case_to_dict", "render_json", "to_dict"]


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
