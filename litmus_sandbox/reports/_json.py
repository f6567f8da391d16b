"""The JSON report (the machine contract; its shape is in :mod:`litmus_sandbox.reports`),
and JSON Lines (one case per line as it is decided, then a summary line).

The JSON report is one object with its cases in report order, which the gate only knows
at the end: each case is encoded as it is decided and spooled by rank
(:class:`~litmus_sandbox.reports._shared.Writer`), and the object is written around them
at the end, byte for byte what encoding the whole report at once would give. JSON Lines
keeps no case: each line is written as its case is decided, in gate order.

The cases are encoded by ``_json_cases``: a legacy case as its case id and the rest of
its object kept per kind; the JSON report spools such cases as their kinds' numbers and
case ids, and makes them whole at the end. Both reports are written inert
(``safe_text.json_inert``) without a pass over the whole report: what ``_json_cases``
makes is inert already, and the rest is made so on its way out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import compress
from typing import Any, BinaryIO

import msgspec

from litmus_sandbox._core.gate import CaseResult
from litmus_sandbox._core.runs import DecidedRun
from litmus_sandbox._core.suite import (
    GateReport,
    GateSummary,
    PlanEntry,
    RebaselinePlan,
    UnsafeLimit,
)
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.safe_text import json_inert
from litmus_sandbox.reports._json_cases import (
    PLAIN_RANK,
    LegacyTails,
    case_json,
    format_items,
    id_json,
    run_line,
    whole,
)
from litmus_sandbox.reports._json_cases import case_to_dict as case_to_dict
from litmus_sandbox.reports._shared import (
    RANKS,
    InertOut,
    Writer,
    ordered_cases,
    rank,
    render,
    unsafe_budget,
)

__all__ = ["case_to_dict", "render_json", "render_jsonl", "to_dict"]

_encoder = msgspec.json.Encoder()


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


_PLAN_FROM, _PLAN_TO = len(b'{\n  "x": {\n    "y": [\n'), -len(b"\n    ]\n  }\n}")
#: Plan entries encoded at a time.
_PART = 8192


class JsonWriter(Writer):
    """``--format json``: one object, indented, its cases spooled by rank until the end.

    Everything is written inert (``json_inert``): the kept rests of legacy cases and case
    ids as they are made, everything else on its way out. A legacy case is spooled as its
    kind's number and its case id (``N "id"``), any other case as its indented item (its
    lines start with a space), and made whole at the end."""

    cases = 0

    def __init__(self, out: BinaryIO, **kw: Any) -> None:
        super().__init__(out, **kw)
        self._inert = InertOut(out)
        self._tails = LegacyTails()

    def write(self, results: Sequence[CaseResult]) -> None:
        self.cases += len(results)
        # Per rank, in order: spooled lines; then the legacy cases not yet spooled (their
        # kinds' numbers and case ids), or the compact cases still to format.
        items: dict[int, list[bytes]] = {}
        runs: dict[int, tuple[list[int], list[str]]] = {}
        pending: dict[int, list[bytes]] = {}
        plain_rank = PLAIN_RANK
        of = self._tails.of
        for case in results:
            r = rank(case) if case.reasons else plain_rank[case.outcome]
            kind = of(case)
            if kind is None:
                if r in runs:
                    items.setdefault(r, []).append(run_line(*runs.pop(r)))
                pending.setdefault(r, []).append(json_inert(case_json(case)))
                continue
            run = runs.get(r)
            if run is None:
                if r in pending:
                    items.setdefault(r, []).append(format_items(pending.pop(r)) + b",\n")
                run = runs[r] = ([], [])
            run[0].append(kind[0])
            run[1].append(case.case_id)
        for r, run in runs.items():
            items.setdefault(r, []).append(run_line(*run))
        for r, compact in pending.items():
            items.setdefault(r, []).append(format_items(compact) + b",\n")
        for r, done in items.items():
            self.spool.write(r, b"".join(done))

    def write_run(self, run: DecidedRun) -> None:
        kinds = _run_kinds(self._tails, run)
        if kinds is None:  # a kind past those kept: encoded case by case
            self.write(run.expand())
            return
        self.cases += run.handed
        # Per kind: its rank and number (-1, -1: not handed on).
        ranked = [
            (-1, -1) if case is None or k is None else (rank(case), k[0])
            for case, k in zip(run.results, kinds, strict=True)
        ]
        places = [ranked[kind][0] for kind in run.kinds]
        for r in sorted(set(places) - {-1}):  # a rank at a time, each in gate order
            mine = [place == r for place in places]
            numbers = [ranked[kind][1] for kind in compress(run.kinds, mine)]
            self.spool.write(r, run_line(numbers, list(compress(run.keys, mine))))

    def _items(self) -> Iterator[bytes]:
        """The spooled cases made whole, in report order, each item followed by ``,\n``."""
        indented = self._tails.indented
        for r in range(RANKS):
            for block in self.spool.read(r):
                parts: list[bytes] = []
                add = parts.append
                for line in block.split(b"\n")[:-1]:
                    if line[:1] == b" ":  # a line of an item encoded whole
                        add(line)
                        add(b"\n")
                    else:  # legacy cases: their kinds' numbers, their case ids
                        add(whole(line, indented))
                yield b"".join(parts)

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        skeleton = _summary_dict(summary, **self.flags, warnings=warnings, cases=[], plan=False)
        rest = msgspec.json.format(_encoder.encode(skeleton), indent=2)
        # The lists that can be as long as the suite are written into their places in
        # the skeleton, a part at a time: the cases, then the re-baseline plan's lists.
        head, rest = rest.split(b'"cases": []', 1)
        inert = self._inert
        inert.write(head + b'"cases": [')
        if self.cases:
            self.out.write(b"\n")
            last: bytes | None = None
            for block in self._items():
                if block:
                    if last is not None:
                        self.out.write(last)
                    last = block
            if last is not None:
                self.out.write(last[:-2])  # the last case's ",\n"
            self.out.write(b"\n  ")
        inert.write(b"]")
        plan = summary.rebaseline_plan
        for name, entries in _plan_lists(plan):
            head, rest = rest.split(b'"%s": []' % name, 1)
            inert.write(head + b'"%s": [' % name)
            for i in range(0, len(entries), _PART):
                # Items three levels down, as in {"x": {"y": [...]}}, less that wrapper.
                part = _encoder.encode(entries[i : i + _PART])
                whole = msgspec.json.format(b'{"x":{"y":' + part + b"}}", indent=2)
                inert.write(b",\n" if i else b"\n")
                inert.write(whole[_PLAN_FROM:_PLAN_TO])
            inert.write(b"\n    ]" if entries else b"]")
        inert.write(rest + b"\n")


class JsonlWriter(Writer):
    """``--format jsonl``: a line per case as it is decided (gate order, nothing kept),
    then one summary line: the JSON report's keys but ``cases``. Written inert, as the
    JSON report is."""

    def __init__(self, out: BinaryIO, **kw: Any) -> None:
        super().__init__(out, **kw)
        self._inert = InertOut(out)
        self._tails = LegacyTails()

    def write(self, results: Sequence[CaseResult]) -> None:
        lines: list[bytes] = []
        add = lines.append
        tails = self._tails
        for case in results:
            kind = tails.of(case)
            if kind is None:
                add(b'{"kind":"case",' + json_inert(case_json(case))[1:] + b"\n")
            else:
                add(b'{"kind":"case","case_id":' + id_json(case.case_id) + kind[1] + b"\n")
        self.out.write(b"".join(lines))

    def write_run(self, run: DecidedRun) -> None:
        kinds = _run_kinds(self._tails, run)
        if kinds is None:  # a kind past those kept: encoded case by case
            self.write(run.expand())
            return
        lines: list[bytes] = []
        add = lines.append
        for case_id, kind in zip(run.keys, run.kinds, strict=True):
            tail = kinds[kind]
            if tail is not None:
                add(b'{"kind":"case","case_id":' + id_json(case_id) + tail[1] + b"\n")
        self.out.write(b"".join(lines))

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        line = {"kind": "summary"}
        line.update(_summary_dict(summary, **self.flags, warnings=warnings, cases=None, plan=False))
        rest = _encoder.encode(line)
        inert = self._inert
        for name, entries in _plan_lists(summary.rebaseline_plan):
            head, rest = rest.split(b'"%s":[]' % name, 1)
            inert.write(head + b'"%s":[' % name)
            for i in range(0, len(entries), _PART):
                inert.write(b"," if i else b"")
                inert.write(_encoder.encode(entries[i : i + _PART])[1:-1])
            inert.write(b"]")
        inert.write(rest + b"\n")


def _run_kinds(tails: LegacyTails, run: DecidedRun) -> list[tuple[int, bytes] | None] | None:
    """Each kind of ``run``: its number and compact rest (None: a kind not handed on); None
    when a kind is past those ``tails`` keeps."""
    kinds = [None if case is None else tails.of(case) for case in run.results]
    if any(k is None and case is not None for k, case in zip(kinds, run.results, strict=True)):
        return None
    return kinds


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
