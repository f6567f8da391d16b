"""What every report format shares: the order of cases, one side's summary, and the shape
of a streaming writer.

Theory of operation
-------------------
A report is written while the gate decides its cases (:class:`Writer`, a
:class:`~litmus_sandbox._core.suite.CaseSink`): ``write`` takes each chunk of decided
cases, ``finish`` writes the report once the summary is known, ``close`` frees what was
kept. Reports list cases oracle contradictions first, then by outcome (:func:`rank`),
but the gate decides them in its own order: a writer renders each case as it comes and
keeps the rendering in a :class:`~litmus_sandbox._store.partition.RankedSpool` (memory
while small, temporary files past that), and ``finish`` writes the ranks in order. No
format builds the report as one object: memory stays bounded whatever the suite's size.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from io import BytesIO
from typing import Any, BinaryIO, Generic, Self, TypeVar

from litmus_sandbox._core.gate import OUTCOMES, CaseResult, Reason
from litmus_sandbox._core.runs import DecidedRun
from litmus_sandbox._core.suite import GateReport, GateSummary, UnsafeLimit
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict
from litmus_sandbox._model.safe_text import json_inert
from litmus_sandbox._store.partition import RankedSpool
from litmus_sandbox.reports._timeline import not_judged, unsafe_steps, why_unsafe

T = TypeVar("T")
__all__ = ["as_warning", "ordered_cases", "safe_word", "side_summary"]

_RANK = {o: i for i, o in enumerate(OUTCOMES)}
#: Ranks of cases in a report: contradicted cases by outcome, then the others by outcome.
RANKS = 2 * len(OUTCOMES)


def rank(case: CaseResult) -> int:
    """Where ``case`` goes in a report (see :data:`RANKS`); input order within a rank."""
    return _RANK[case.outcome] + (0 if case.contradicted else len(OUTCOMES))


def ordered_cases(report: GateReport) -> list[CaseResult]:
    """Oracle contradictions first, then by outcome severity, then in input order."""
    return sorted(report.cases, key=rank)


def shown(case: CaseResult) -> bool:
    """Whether the table and Markdown reports list ``case`` (a plain PASS is counted; a
    PASS unsafe on both sides is listed, marked :data:`STILL_UNSAFE`)."""
    return case.outcome != "PASS" or bool(case.reasons) or case.still_unsafe


#: A kind of case (see :func:`legacy_kind`): outcome, the identity of its reasons, baseline
#: safety, candidate's (None: no verdict).
LegacyKind = tuple[str, int, bool | None, bool | None]


def legacy_kind(case: CaseResult) -> LegacyKind | None:
    """What a text report shows of ``case`` besides its case id, if its sides are one
    legacy verdict each or none (then no step diff and no step evidence): its outcome,
    its reasons by identity and its sides' safeties; None for any other case.

    The gate hands the cases of one kind one tuple of reasons: a writer that keeps what it
    rendered for a kind, and the reasons with it (so the identity stays theirs), renders
    the many cases of a legacy suite once per kind, without hashing their reasons."""
    bs, cs = case.baseline, case.candidate
    if len(bs) > 1 or len(cs) > 1:
        return None
    b = c = None
    if bs:
        if type(bs[0]) is not LegacyVerdict:
            return None
        b = bs[0].safe
    if cs:
        if type(cs[0]) is not LegacyVerdict:
            return None
        c = cs[0].safe
    return case.outcome, id(case.reasons), b, c


class KindRows(Generic[T]):
    """What a report rendered for each kind of legacy case (:func:`legacy_kind`), so
    the many cases of a kind are rendered once: ``render`` makes it for a case whose kind
    is not kept (or of no kind). Each entry holds its kind's reasons, so their identity
    stays theirs; at most 4096 kinds are kept at a time, past that they are forgotten."""

    def __init__(self, render: Callable[[CaseResult], T]) -> None:
        self._render = render
        self._kept: dict[LegacyKind, tuple[tuple[Reason, ...], T]] = {}

    def of(self, case: CaseResult) -> T:
        """What ``render`` makes of ``case``, kept for its kind."""
        key = legacy_kind(case)
        seen = self._kept.get(key) if key is not None else None
        if seen is not None and seen[0] is case.reasons:
            return seen[1]
        made = self._render(case)
        if key is not None:
            if len(self._kept) > 4096:
                self._kept.clear()
            self._kept[key] = (case.reasons, made)
        return made


#: How the text reports mark a case unsafe on both sides (a PASS: nothing changed).
STILL_UNSAFE = "still unsafe"


class InertOut:
    """A binary output that writes JSON through :func:`safe_text.json_inert`."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def write(self, data: bytes) -> int:
        self._out.write(json_inert(data))
        return len(data)

    def flush(self) -> None:
        self._out.flush()


class Writer(abc.ABC):
    """A report written as the gate decides (see the module docstring).

    ``plain``: whether the format lists the plain passes, or only counts them.
    """

    plain = True

    def __init__(
        self,
        out: BinaryIO,
        *,
        allow_unresolved: bool = False,
        strict_oracle: bool = False,
        allow_empty: bool = False,
        max_unsafe: UnsafeLimit | None = None,
        spool_dir: str | None = None,
        spool_memory: int = 1 << 22,
    ) -> None:
        self.flags: dict[str, Any] = {
            "allow_unresolved": allow_unresolved,
            "strict_oracle": strict_oracle,
            "allow_empty": allow_empty,
            "max_unsafe": max_unsafe,
        }
        self.max_unsafe = max_unsafe
        self.out = out
        self.strict_oracle = strict_oracle
        self.allow_unresolved = allow_unresolved
        self.spool = RankedSpool(RANKS, memory=spool_memory, directory=spool_dir)

    @abc.abstractmethod
    def write(self, results: Sequence[CaseResult]) -> None:
        """Take a chunk of decided cases (each format renders or spools them)."""

    def write_run(self, run: DecidedRun) -> None:
        """Take a run of legacy cases (``_core/runs.py``); a format that renders a kind
        once writes each case as its case id beside it, any other takes the results."""
        self.write(run.expand())

    @abc.abstractmethod
    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        """Write the report (what is left of it) to ``out``, ending with a newline."""

    def copy_ranks(self, *, trim: int = 0) -> bool:
        """Copy the spooled cases to ``out`` in rank order, less the last ``trim`` bytes;
        whether there were any."""
        last: bytes | None = None
        for r in range(RANKS):
            for block in self.spool.read(r):
                if last is not None:
                    self.out.write(last)
                last = block
        if last is None:
            return False
        self.out.write(last[: len(last) - trim])
        return True

    def decision(self, summary: GateSummary) -> tuple[str, int]:
        return summary.decision(**self.flags), summary.exit_code(**self.flags)

    def close(self) -> None:
        self.spool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def render(writer: type[Writer], report: GateReport, **kw: Any) -> str:
    """``report`` in one format, as text (the ``render_*`` functions)."""
    warnings = kw.pop("warnings", ())
    buf = BytesIO()
    with writer(buf, **kw) as w:
        w.write(report.cases)
        w.finish(report, warnings)
    return buf.getvalue().decode("utf-8", "surrogateescape")[:-1]


def text(line: str) -> bytes:
    """A line of a text report as UTF-8 (what cannot be encoded written as an escape)."""
    return line.encode("utf-8", "backslashreplace")


NOTHING_COMPARED = (
    "nothing was compared: no case on either side (did the step that writes the "
    "verdicts write none?); --allow-empty lets that pass"
)


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
            unsafe_steps=[],
            steps_recorded=None,
            steps_covered=p.steps_covered,
            judge=p.judge_version,
            judge_fingerprint=None,
            truncate_on_refusal=p.truncate_on_refusal,
            truncate_on_empty_tool_result=p.truncate_on_empty_tool_result,
            not_judged=not_judged(
                None, p.steps_covered, p.truncate_on_refusal, p.truncate_on_empty_tool_result
            ),
        )
        return out
    q = first.provenance
    out.update(
        episode_ids=[v.episode_id for v in verdicts if not isinstance(v, LegacyVerdict)],
        legacy=False,
        first_unsafe_step=first.first_unsafe_step,
        unsafe_steps=unsafe_steps(verdicts),
        steps_recorded=q.steps_recorded,
        steps_covered=q.steps_covered,
        judge=q.judge_label,
        judge_fingerprint=q.judge,
        truncate_on_refusal=q.truncate_on_refusal,
        truncate_on_empty_tool_result=q.truncate_on_empty_tool_result,
        not_judged=not_judged(
            q.steps_recorded,
            q.steps_covered,
            q.truncate_on_refusal,
            q.truncate_on_empty_tool_result,
        ),
    )
    return out


def evidence_lines(case: CaseResult, *, limit: int = 3) -> list[str]:
    """Which steps of each unsafe side were unsafe, and why (the rules that fired or the
    judge's reason, and the kind of evidence): ``unsafe: candidate step 2: rule
    exfiltration (requested)``; the candidate's first. At most ``limit`` steps a side."""
    out: list[str] = []
    for side, verdicts in (("candidate", case.candidate), ("baseline", case.baseline)):
        if not verdicts or all(v.safe for v in verdicts):
            continue
        steps = unsafe_steps(verdicts)
        if not steps:
            out.append(f"unsafe: {side}: no step verdicts to say which step (a legacy verdict)")
            continue
        out.extend(
            f"unsafe: {side} step {u['index']}: {why_unsafe(u['rules'], u['reason'], u['evidence'])}"
            for u in steps[:limit]
        )
        if len(steps) > limit:
            out.append(f"unsafe: {side}: {plural(len(steps) - limit, 'more unsafe step')}")
    for side, verdicts in (("baseline", case.baseline), ("candidate", case.candidate)):
        # Recorded steps a verdict never judged (its recording's length known): the
        # incident's pattern, a refusal and then work nobody judged, said where it is.
        first = verdicts[0] if verdicts else None
        if first is None or isinstance(first, LegacyVerdict):
            continue
        q = first.provenance
        gap = not_judged(
            q.steps_recorded, q.steps_covered, q.truncate_on_refusal,
            q.truncate_on_empty_tool_result,
        )  # fmt: skip
        if gap is not None and gap["steps"] is not None:
            out.append(f"{side} {gap['why']}")
    return out


def unsafe_budget(summary: GateSummary, limit: UnsafeLimit | None) -> dict[str, Any] | None:
    """The JSON report's ``unsafe_budget`` (None without ``--max-unsafe``)."""
    if limit is None:
        return None
    return {
        "limit": limit.limit,
        "candidate_unsafe": summary.statistics.candidate_unsafe,
        "exceeded": summary.over_budget(limit),
    }


def budget_line(summary: GateSummary, limit: UnsafeLimit | None) -> str | None:
    """The text reports' line on ``--max-unsafe`` (None without it)."""
    if limit is None:
        return None
    s = summary.statistics
    given = limit.limit if isinstance(limit.limit, str) else plural(limit.limit, "case")
    head = (
        f"unsafe budget (--max-unsafe {limit.limit}): {s.candidate_unsafe} of "
        f"{plural(s.comparable, 'comparable case')} unsafe in the candidate"
    )
    if summary.over_budget(limit):
        return f"{head}, more than {given}: exceeded, the gate blocks"
    return f"{head}, within {given}"


def plural(n: int, noun: str) -> str:
    """``1 judge call``, ``2 judge calls``: ``n`` and ``noun``, in the plural unless 1."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def side_word(verdicts: Sequence[AnyVerdict]) -> str:
    """``safe_word(side_summary(verdicts))``, without building the summary."""
    if not verdicts:
        return "-"
    return "safe" if all(v.safe for v in verdicts) else "unsafe"


def safe_word(summary: dict[str, Any] | None) -> str:
    """``safe`` or ``unsafe`` for a side summary, ``-`` for a side with no verdict."""
    if summary is None:
        return "-"
    return "safe" if summary["safe"] else "unsafe"


def unknown_exclusions(summary: GateSummary) -> list[str]:
    """The line every text report gives the exclusions that named no case (none: [])."""
    if not summary.unknown_exclusions:
        return []
    return [f"exclusions naming no case: {', '.join(summary.unknown_exclusions)}"]


def as_warning(text: str) -> str:
    """``text`` said as a warning, once (a reader's warnings already say so)."""
    return text if "warning: " in text else f"warning: {text}"
