"""The JUnit XML report: one test case per gate case, for CI dashboards."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, BinaryIO
from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

from litmus_sandbox._core.gate import CaseResult
from litmus_sandbox._core.runs import DecidedRun
from litmus_sandbox._core.suite import GateReport, GateSummary
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.safe_text import for_terminal
from litmus_sandbox.reports._inputs import SIDES, side_rows
from litmus_sandbox.reports._shared import (
    STILL_UNSAFE,
    KindRows,
    Writer,
    budget_line,
    evidence_lines,
    rank,
    render,
    side_word,
    text,
    unknown_exclusions,
)

__all__ = ["escape", "quoteattr", "render_junit"]


def _xml_text(text: str) -> str:
    """``text`` with what XML cannot carry (most C0 controls, surrogates, U+FFFE/U+FFFF),
    and what would act on or hide text where the file is read (C1, DEL, bidi, zero-width),
    written as visible escapes (``\\x01``, ``\\u202e``): the file always parses."""
    return for_terminal(text, lines=True)


def escape(text: str) -> str:
    return _escape(_xml_text(text))


def quoteattr(text: str) -> str:
    return _quoteattr(_xml_text(text))


class JunitWriter(Writer):
    """``--format junit``: a test case per gate case (spooled by rank), under a test
    suite whose counts and properties (``decision``, ``exit_code``) come at the end.
    REGRESSION fails, unresolved cases error (skipped when allowed), EXCLUDED skips."""

    def __init__(self, out: BinaryIO, **kw: Any) -> None:
        super().__init__(out, **kw)
        self.tests = self.failures = self.errors = self.skipped = 0
        self._counts: Counter[str] = Counter()
        #: A kind of legacy case's rank, test case body and the count it adds to.
        self._rows = KindRows(lambda case: (rank(case), *self._inner(case)))

    def write(self, results: Sequence[CaseResult]) -> None:
        spooled: dict[int, list[str]] = {}
        counts = self._counts
        of = self._rows.of
        for case in results:
            place, inner, counter = of(case)
            counts[counter] += 1
            line = f'  <testcase classname="litmus.gate" name={_name(case.case_id)}>{inner}</testcase>\n'
            spooled.setdefault(place, []).append(line)
        self._spool(len(results), spooled)

    def write_run(self, run: DecidedRun) -> None:
        rows = [None if case is None else self._rows.of(case) for case in run.results]
        spooled: dict[int, list[str]] = {}
        counts = self._counts
        for case_id, kind in zip(run.keys, run.kinds, strict=True):
            row = rows[kind]
            if row is not None:
                place, inner, counter = row
                counts[counter] += 1
                line = f'  <testcase classname="litmus.gate" name={_name(case_id)}>{inner}</testcase>\n'
                spooled.setdefault(place, []).append(line)
        self._spool(run.handed, spooled)

    def _spool(self, cases: int, spooled: dict[int, list[str]]) -> None:
        counts = self._counts
        self.tests += cases
        self.failures, self.errors, self.skipped = (
            counts["failures"],
            counts["errors"],
            counts["skipped"],
        )
        for place, lines in spooled.items():  # one write a rank
            self.spool.write(place, text("".join(lines)))

    def _inner(self, case: CaseResult) -> tuple[str, str]:
        """What ``case``'s test case holds, and the count it adds to ("" for none)."""
        strict, allow = self.strict_oracle, self.allow_unresolved
        counter = ""
        detail = "\n".join(
            f"{r.code}: {r.detail}" + (f" -> {r.remedy}" if r.remedy else "") for r in case.reasons
        )
        inner = ""
        blocking_oracle = strict and case.contradicted and case.outcome != "EXCLUDED"
        if case.outcome == "REGRESSION" or blocking_oracle:
            counter = "failures"
            # The message says which step was unsafe and why, not only the outcome.
            evidence = evidence_lines(case)
            message = f"{case.outcome}: {evidence[0]}" if evidence else case.outcome
            body = "\n".join(
                [f"{side_word(case.baseline)} -> {side_word(case.candidate)}", *evidence]
                + ([detail] if detail else [])
            )
            inner = f"<failure message={quoteattr(message)}>{escape(body)}</failure>"
        elif case.outcome in ("NEEDS_REBASELINE", "NEEDS_RERUN"):
            detail = "\n".join([detail, *evidence_lines(case)])
            if allow:
                counter = "skipped"
                inner = f"<skipped message={quoteattr(case.outcome)}>{escape(detail)}</skipped>"
            else:
                counter = "errors"
                inner = f"<error message={quoteattr(case.outcome)}>{escape(detail)}</error>"
        elif case.outcome == "EXCLUDED":
            counter = "skipped"
            inner = f"<skipped message={quoteattr('EXCLUDED')}>{escape(detail)}</skipped>"
        elif case.still_unsafe:
            # Passes (nothing changed), but says so: unsafe on both sides, and why.
            body = "\n".join(
                [f"{case.outcome}, {STILL_UNSAFE}: unsafe -> unsafe", *evidence_lines(case)]
                + ([detail] if detail else [])
            )
            inner = (
                '<properties><property name="still_unsafe" value="true"/></properties>'
                f"<system-out>{escape(body)}</system-out>"
            )
        elif detail:
            inner = f"<system-out>{escape(case.outcome + chr(10) + detail)}</system-out>"
        return inner, counter

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        decision, code = self.decision(summary)
        budget = self._budget_case(summary)
        head = (
            '<?xml version="1.0" encoding="utf-8"?>\n'
            f'<testsuite name="litmus-sandbox gate" tests="{self.tests}" failures="{self.failures}" '
            f'errors="{self.errors}" skipped="{self.skipped}">\n'
            "  <properties>\n"
            f'    <property name="decision" value="{decision}"/>\n'
            f'    <property name="exit_code" value="{code}"/>\n'
            f'    <property name="still_unsafe" value="{summary.statistics.still_unsafe}"/>\n'
            + self._budget(summary)
            + _inputs(summary)
            + "  </properties>\n"
        )
        self.out.write(text(head))
        self.out.write(text(budget))
        self.copy_ranks()
        # What the readers tolerated (a torn last line), and exclusions naming no case:
        # the suite's stderr.
        if said := [*unknown_exclusions(summary), *warnings]:
            lines = "".join(f"{escape(w)}\n" for w in said)
            self.out.write(text(f"  <system-err>{lines}</system-err>\n"))
        self.out.write(b"</testsuite>\n")

    def _budget_case(self, summary: GateSummary) -> str:
        """With ``--max-unsafe``, a test case of its own, first: failed when the
        candidate's unsafe comparable cases exceed the budget (so a dashboard that counts
        failures shows the block), passed otherwise. Counted in the suite's tests."""
        limit = self.max_unsafe
        if limit is None:
            return ""
        self.tests += 1
        line = budget_line(summary, limit) or ""
        name = quoteattr(f"unsafe budget (--max-unsafe {limit.limit})")
        if summary.over_budget(limit):
            self.failures += 1
            inner = f"<failure message={quoteattr(line)}>{escape(line)}</failure>"
        else:
            inner = f"<system-out>{escape(line)}</system-out>"
        return f'  <testcase classname="litmus.gate.budget" name={name}>{inner}</testcase>\n'

    def _budget(self, summary: GateSummary) -> str:
        """``--max-unsafe``'s properties: the limit, the candidate's unsafe comparable
        cases, whether they exceed it."""
        limit = self.max_unsafe
        if limit is None:
            return ""
        exceeded = "true" if summary.over_budget(limit) else "false"
        return (
            f'    <property name="max_unsafe" value={quoteattr(str(limit.limit))}/>\n'
            f'    <property name="candidate_unsafe" '
            f'value="{summary.statistics.candidate_unsafe}"/>\n'
            f'    <property name="unsafe_budget_exceeded" value="{exceeded}"/>\n'
        )


#: A name that ``quoteattr`` only puts between double quotes: printable ASCII but ``&<>"'``.
_PLAIN_NAME = re.compile(r"[ !#-%(-;=?-~]*")


def _name(case_id: str) -> str:
    """``quoteattr(case_id)``: a plain name at once."""
    if _PLAIN_NAME.fullmatch(case_id) is not None:
        return f'"{case_id}"'
    return quoteattr(case_id)


def render_junit(report: GateReport, **kw: Any) -> str:
    """JUnit XML: REGRESSION fails, unresolved cases error (skipped when allowed), EXCLUDED skips."""
    return render(JunitWriter, report, **kw)


def _inputs(summary: GateSummary) -> str:
    """What was compared, as properties: ``litmus_sandbox_version``, then
    ``baseline_files``, ``baseline_cases``, … and the candidate's."""
    props = [("litmus_sandbox_version", package_version())]
    if summary.inputs is not None:
        props += [
            (f"{name}_{key}", value)
            for name in SIDES
            for key, value in side_rows(summary.inputs[name])
        ]
    return "".join(
        f"    <property name={quoteattr(key)} value={quoteattr(value)}/>\n" for key, value in props
    )
