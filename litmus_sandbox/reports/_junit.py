"""The JUnit XML report: one test case per gate case, for CI dashboards."""

from __future__ import annotations

import re
from collections.abc import Sequence
from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

from litmus_sandbox._core.suite import GateReport
from litmus_sandbox.reports._shared import ordered_cases

__all__ = ["escape", "quoteattr", "render_junit"]


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
