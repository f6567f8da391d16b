"""The JSON report (the machine contract; its shape is in :mod:`litmus_sandbox.reports`),
and JSON Lines (one case per line as it is decided, then a summary line).

The JSON report is one object with its cases in report order, which the gate only knows
at the end: each case is encoded as it is decided and spooled by rank
(:class:`~litmus_sandbox.reports._shared.Writer`), and the object is written around them
at the end, byte for byte what encoding the whole report at once would give. JSON Lines
keeps no case: each line is written as its case is decided, in gate order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from litmus_sandbox._core.gate import CaseResult, step_diff
from litmus_sandbox._core.suite import GateReport, GateSummary
from litmus_sandbox.reports._shared import Writer, ordered_cases, rank, render, side_summary

__all__ = ["case_to_dict", "render_json", "render_jsonl", "to_dict"]

_encoder = msgspec.json.Encoder()


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


def _summary_dict(
    summary: GateSummary,
    *,
    allow_unresolved: bool,
    strict_oracle: bool,
    allow_empty: bool,
    warnings: Sequence[str],
    cases: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    flags = {
        "allow_unresolved": allow_unresolved,
        "strict_oracle": strict_oracle,
        "allow_empty": allow_empty,
    }
    out: dict[str, Any] = {
        "decision": summary.decision(**flags),
        "exit_code": summary.exit_code(**flags),
        "counts": dict(summary.counts),
    }
    if cases is not None:
        out["cases"] = cases
    out.update(
        statistics=msgspec.to_builtins(summary.statistics),
        reasons=dict(summary.reasons),
        rebaseline_plan=msgspec.to_builtins(summary.rebaseline_plan),
        unknown_exclusions=list(summary.unknown_exclusions),
        warnings=list(warnings),
    )
    return out


def to_dict(
    report: GateReport,
    *,
    allow_unresolved: bool = False,
    strict_oracle: bool = False,
    allow_empty: bool = False,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON report as a dict (see the module docstring for its shape)."""
    return _summary_dict(
        report,
        allow_unresolved=allow_unresolved,
        strict_oracle=strict_oracle,
        allow_empty=allow_empty,
        warnings=warnings,
        cases=[case_to_dict(c) for c in ordered_cases(report)],
    )


class JsonWriter(Writer):
    """``--format json``: one object, indented, its cases spooled by rank until the end."""

    cases = 0

    def write(self, results: Sequence[CaseResult]) -> None:
        encode, fmt, spool = _encoder.encode, msgspec.json.format, self.spool
        self.cases += len(results)
        for case in results:
            # Indented as an item of the report's "cases" array (two levels down).
            body = fmt(encode(case_to_dict(case)), indent=2).replace(b"\n", b"\n    ")
            spool.write(rank(case), b"    " + body + b",\n")

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        skeleton = _summary_dict(summary, **self.flags, warnings=warnings, cases=[])
        whole = msgspec.json.format(_encoder.encode(skeleton), indent=2)
        head, tail = whole.split(b'"cases": []', 1)
        self.out.write(head + b'"cases": [')
        if self.cases:
            self.out.write(b"\n")
            self.copy_ranks(trim=2)  # the last case's ",\n"
            self.out.write(b"\n  ")
        self.out.write(b"]" + tail + b"\n")


class JsonlWriter(Writer):
    """``--format jsonl``: a line per case as it is decided (gate order, nothing kept),
    then one summary line: the JSON report's keys but ``cases``."""

    def write(self, results: Sequence[CaseResult]) -> None:
        encode = _encoder.encode
        self.out.write(
            b"".join(encode({"kind": "case", **case_to_dict(case)}) + b"\n" for case in results)
        )

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        line = {"kind": "summary"}
        line.update(_summary_dict(summary, **self.flags, warnings=warnings, cases=None))
        self.out.write(_encoder.encode(line) + b"\n")


def render_json(report: GateReport, **kw: Any) -> str:
    return render(JsonWriter, report, **kw)


def render_jsonl(report: GateReport, **kw: Any) -> str:
    """The JSON Lines report: a line per case in gate order, then the summary line."""
    return render(JsonlWriter, report, **kw)
