"""The JSON report (the machine contract; its shape is in :mod:`litmus_sandbox.reports`),
and JSON Lines (one case per line as it is decided, then a summary line).

The JSON report is one object with its cases in report order, which the gate only knows
at the end: each case is encoded as it is decided and spooled by rank
(:class:`~litmus_sandbox.reports._shared.Writer`), and the object is written around them
at the end, byte for byte what encoding the whole report at once would give. JSON Lines
keeps no case: each line is written as its case is decided, in gate order.

A suite of legacy verdicts is mostly cases that differ only in their case id: a case
whose sides are one legacy verdict each (or none) is encoded as its case id and the rest
of its object, the rest kept per outcome, reasons, safety and provenance (up to a few
thousand of them), compact for JSON Lines and indented for the JSON report (as
``msgspec.json.format`` would indent it), so such cases are neither encoded nor
formatted one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, BinaryIO

import msgspec

from litmus_sandbox._core.gate import OUTCOMES, CaseResult, Reason, step_diff
from litmus_sandbox._core.suite import (
    GateReport,
    GateSummary,
    PlanEntry,
    RebaselinePlan,
    UnsafeLimit,
)
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.records import AnyVerdict, LegacyProvenance, LegacyVerdict
from litmus_sandbox.reports._shared import (
    InertOut,
    Writer,
    ordered_cases,
    rank,
    render,
    side_summary,
    unsafe_budget,
)

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


def case_json(case: CaseResult) -> bytes:
    """``case_to_dict(case)`` encoded as JSON (the same bytes), at a few times its speed:
    a legacy side's summary is the same for every side of equal provenance, safety and
    epochs, so its encoding is kept (up to a few thousand of them)."""
    diff = step_diff(case)
    return b"".join(
        (
            b'{"case_id":',
            _encoder.encode(case.case_id),
            b',"outcome":"',
            case.outcome.encode(),
            b'","reasons":',
            _encoder.encode(case.reasons) if case.reasons else b"[]",
            b',"baseline":',
            _side_json(case.baseline),
            b',"candidate":',
            _side_json(case.candidate),
            b',"steps":',
            b"null" if diff is None else _encoder.encode(diff),
            b"}",
        )
    )


_legacy_sides: dict[tuple[bool, int, LegacyProvenance], bytes] = {}

#: The rank of a case with no reasons, by outcome (what ``rank`` gives it).
_PLAIN_RANK = {
    o: rank(CaseResult(case_id="", outcome=o, reasons=(), baseline=(), candidate=()))
    for o in OUTCOMES
}
#: A case's object up to its case id, compact and as an item of the report's "cases".
_HEAD = b'{"case_id":'
_INDENTED_HEAD = b'    {\n      "case_id": '
_Side = tuple[bool, LegacyProvenance] | None
#: (outcome, reasons, baseline side, candidate side) -> the rest of the case's object
#: after its case id: compact, and indented as in the JSON report.
_legacy_tails: dict[tuple[str, tuple[Reason, ...], _Side, _Side], tuple[bytes, bytes]] = {}


def _legacy_side(v: AnyVerdict) -> _Side:
    """What a side of one legacy verdict shows, or None for a verdict of another kind."""
    if type(v) is not LegacyVerdict or v.unknown_provenance:
        return None
    return v.safe, v.provenance


def _tails(case: CaseResult) -> tuple[bytes, bytes] | None:
    """The rest of ``case``'s object after its case id (compact, indented), for a case
    whose sides are one legacy verdict each or none; None for any other case."""
    bs, cs = case.baseline, case.candidate
    if len(bs) > 1 or len(cs) > 1:
        return None
    b = c = None
    if bs and (b := _legacy_side(bs[0])) is None:
        return None
    if cs and (c := _legacy_side(cs[0])) is None:
        return None
    key = (case.outcome, case.reasons, b, c)
    tails = _legacy_tails.get(key)
    if tails is None:
        if len(_legacy_tails) > 4096:
            _legacy_tails.clear()
        blank = msgspec.structs.replace(case, case_id="")
        compact = case_json(blank)
        indented = msgspec.json.format(b'{"x":[' + compact + b"]}", indent=2)
        indented = indented[_ITEMS_FROM:_ITEMS_TO]
        tails = _legacy_tails[key] = (
            compact[len(_HEAD) + 2 :],
            indented[len(_INDENTED_HEAD) + 2 :],
        )
    return tails


def _format_items(cases: list[bytes]) -> bytes:
    """Cases' compact JSON as items of the report's "cases" array, joined by ``,\\n``:
    indented two levels down, as in ``{"x": [...]}``, formatted in one call, less that
    wrapper."""
    whole = msgspec.json.format(b'{"x":[' + b",".join(cases) + b"]}", indent=2)
    return whole[_ITEMS_FROM:_ITEMS_TO]


def _side_json(verdicts: Sequence[AnyVerdict]) -> bytes:
    if not verdicts:
        return b"null"
    first = verdicts[0]
    if type(first) is not LegacyVerdict or first.unknown_provenance:
        return _encoder.encode(side_summary(verdicts))
    # What side_summary reads of a side whose first verdict is legacy.
    safe = first.safe if len(verdicts) == 1 else all(v.safe for v in verdicts)
    key = (safe, len(verdicts), first.provenance)
    encoded = _legacy_sides.get(key)
    if encoded is None:
        if len(_legacy_sides) > 4096:
            _legacy_sides.clear()
        encoded = _legacy_sides[key] = _encoder.encode(side_summary(verdicts))
    return encoded


def _summary_dict(
    summary: GateSummary,
    *,
    allow_unresolved: bool,
    strict_oracle: bool,
    allow_empty: bool,
    warnings: Sequence[str],
    cases: list[dict[str, Any]] | None,
    plan: bool = True,
    max_unsafe: UnsafeLimit | None = None,
) -> dict[str, Any]:
    flags: dict[str, Any] = {
        "allow_unresolved": allow_unresolved,
        "strict_oracle": strict_oracle,
        "allow_empty": allow_empty,
        "max_unsafe": max_unsafe,
    }
    out: dict[str, Any] = {
        "decision": summary.decision(**flags),
        "exit_code": summary.exit_code(**flags),
        "litmus_sandbox_version": package_version(),
        "inputs": summary.inputs,
        "counts": dict(summary.counts),
    }
    if cases is not None:
        out["cases"] = cases
    out.update(
        statistics=msgspec.to_builtins(summary.statistics),
        unsafe_budget=unsafe_budget(summary, max_unsafe),
        reasons=dict(summary.reasons),
        rebaseline_plan=msgspec.to_builtins(
            summary.rebaseline_plan
            if plan
            else msgspec.structs.replace(
                summary.rebaseline_plan, rescore=(), rerun_baseline=(), rerun_candidate=()
            )
        ),
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
    max_unsafe: UnsafeLimit | None = None,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON report as a dict (see the module docstring for its shape)."""
    return _summary_dict(
        report,
        allow_unresolved=allow_unresolved,
        strict_oracle=strict_oracle,
        allow_empty=allow_empty,
        max_unsafe=max_unsafe,
        warnings=warnings,
        cases=[case_to_dict(c) for c in ordered_cases(report)],
    )


_ITEMS_FROM, _ITEMS_TO = len(b'{\n  "x": [\n'), -len(b"\n  ]\n}")
_PLAN_FROM, _PLAN_TO = len(b'{\n  "x": {\n    "y": [\n'), -len(b"\n    ]\n  }\n}")
#: Plan entries encoded at a time.
_PART = 8192


class JsonWriter(Writer):
    """``--format json``: one object, indented, its cases spooled by rank until the end."""

    cases = 0

    def __init__(self, out: BinaryIO, **kw: Any) -> None:
        super().__init__(InertOut(out), **kw)  # type: ignore[arg-type]  # write and flush

    def write(self, results: Sequence[CaseResult]) -> None:
        self.cases += len(results)
        # Per rank, in order: indented items, and runs of compact cases still to format.
        items: dict[int, list[bytes]] = {}
        pending: dict[int, list[bytes]] = {}
        encode = _encoder.encode
        plain_rank = _PLAIN_RANK
        for case in results:
            r = rank(case) if case.reasons else plain_rank[case.outcome]
            tails = _tails(case)
            if tails is None:
                pending.setdefault(r, []).append(case_json(case))
                continue
            done = items.get(r)
            if done is None:
                done = items[r] = []
            run = pending.get(r)
            if run:
                done.append(_format_items(run))
                run.clear()
            done.append(_INDENTED_HEAD + encode(case.case_id) + tails[1])
        for r, run in pending.items():
            if run:
                items.setdefault(r, []).append(_format_items(run))
        for r, done in items.items():
            self.spool.write(r, b",\n".join(done) + b",\n")

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        skeleton = _summary_dict(summary, **self.flags, warnings=warnings, cases=[], plan=False)
        rest = msgspec.json.format(_encoder.encode(skeleton), indent=2)
        # The lists that can be as long as the suite are written into their places in
        # the skeleton, a part at a time: the cases, then the re-baseline plan's lists.
        head, rest = rest.split(b'"cases": []', 1)
        self.out.write(head + b'"cases": [')
        if self.cases:
            self.out.write(b"\n")
            self.copy_ranks(trim=2)  # the last case's ",\n"
            self.out.write(b"\n  ")
        self.out.write(b"]")
        plan = summary.rebaseline_plan
        for name, entries in _plan_lists(plan):
            head, rest = rest.split(b'"%s": []' % name, 1)
            self.out.write(head + b'"%s": [' % name)
            for i in range(0, len(entries), _PART):
                # Items three levels down, as in {"x": {"y": [...]}}, less that wrapper.
                part = _encoder.encode(entries[i : i + _PART])
                whole = msgspec.json.format(b'{"x":{"y":' + part + b"}}", indent=2)
                self.out.write(b",\n" if i else b"\n")
                self.out.write(whole[_PLAN_FROM:_PLAN_TO])
            self.out.write(b"\n    ]" if entries else b"]")
        self.out.write(rest + b"\n")


class JsonlWriter(Writer):
    """``--format jsonl``: a line per case as it is decided (gate order, nothing kept),
    then one summary line: the JSON report's keys but ``cases``."""

    def __init__(self, out: BinaryIO, **kw: Any) -> None:
        super().__init__(InertOut(out), **kw)  # type: ignore[arg-type]  # write and flush

    def write(self, results: Sequence[CaseResult]) -> None:
        lines: list[bytes] = []
        add = lines.append
        encode = _encoder.encode
        for case in results:
            tails = _tails(case)
            if tails is None:
                add(b'{"kind":"case",' + case_json(case)[1:] + b"\n")
            else:
                add(b'{"kind":"case","case_id":' + encode(case.case_id) + tails[0] + b"\n")
        self.out.write(b"".join(lines))

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        line = {"kind": "summary"}
        line.update(_summary_dict(summary, **self.flags, warnings=warnings, cases=None, plan=False))
        rest = _encoder.encode(line)
        for name, entries in _plan_lists(summary.rebaseline_plan):
            head, rest = rest.split(b'"%s":[]' % name, 1)
            self.out.write(head + b'"%s":[' % name)
            for i in range(0, len(entries), _PART):
                self.out.write(b"," if i else b"")
                self.out.write(_encoder.encode(entries[i : i + _PART])[1:-1])
            self.out.write(b"]")
        self.out.write(rest + b"\n")


def _plan_lists(plan: RebaselinePlan) -> list[tuple[bytes, tuple[PlanEntry, ...]]]:
    """The re-baseline plan's lists, in the order of its keys."""
    return [
        (b"rescore", plan.rescore),
        (b"rerun_baseline", plan.rerun_baseline),
        (b"rerun_candidate", plan.rerun_candidate),
    ]


def render_json(report: GateReport, **kw: Any) -> str:
    return render(JsonWriter, report, **kw)


def render_jsonl(report: GateReport, **kw: Any) -> str:
    """The JSON Lines report: a line per case in gate order, then the summary line."""
    return render(JsonlWriter, report, **kw)
