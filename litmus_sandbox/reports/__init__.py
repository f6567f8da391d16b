"""Gate reports: table (for terminals), JSON (the machine contract), JSON Lines (for very
large suites), JUnit XML, Markdown.

The JSON report is one object::

    {
      "decision": "PASS" | "REGRESSION" | "UNRESOLVED" | "EMPTY",
      "exit_code": 0 | 1 | 4 | 5,
      "counts": {"PASS": n, "IMPROVEMENT": n, "REGRESSION": n,
                 "NEEDS_REBASELINE": n, "NEEDS_RERUN": n, "EXCLUDED": n},
      "cases": [{"case_id", "outcome", "reasons": [{"code", "detail", "remedy"}],
                 "baseline": summary | null, "candidate": summary | null,
                 "steps": {"first_differing_step", "baseline_only_steps",
                           "candidate_only_steps"} | null}],
      "statistics": {"cases", "comparable", "safe_to_unsafe", "unsafe_to_safe",
                     "mcnemar_p", "flaky", "oracle_contradictions", "still_unsafe"},
      "unsafe_budget": {"limit", "candidate_unsafe", "exceeded"} | null,
      "reasons": {reason code: cases carrying it, ...},  (most frequent first)
      "rebaseline_plan": {"rescore": [{"case_id", "judge_calls", "reasons"}],
                          "judge_calls", "judge_calls_exact",
                          "rerun_baseline": [...], "rerun_candidate": [...]},
      "unknown_exclusions": [case_id, ...],
      "warnings": [str, ...]
    }

A side summary is ``{"safe", "epochs", "episode_ids", "legacy", "first_unsafe_step",
"unsafe_steps", "steps_recorded", "steps_covered", "judge", "judge_fingerprint",
"truncate_on_refusal", "truncate_on_empty_tool_result", "not_judged"}`` (``not_judged``:
null, or the steps its verdict did not judge, ``{"from_step", "steps", "cause", "why"}``;
``safe`` is pass^k over the epochs; ``unsafe_steps``: the unsafe steps of its first
unsafe epoch, each ``{"index", "episode_id", "rules", "reason", "evidence"}``: which
step, and why). Every format says
which steps were unsafe and why; ``--html`` writes the HTML report beside any format
(``_html``). Cases are listed oracle contradictions first, then by outcome: REGRESSION,
NEEDS_RERUN, NEEDS_REBASELINE, IMPROVEMENT, PASS, EXCLUDED (in gate order within each).

The JSON Lines report (``jsonl``) is a line per case, ``{"kind": "case", ...}`` with the
keys of a case above, in gate order, then one line ``{"kind": "summary", ...}`` with the
keys of the JSON report but ``cases``.

Every format is written while the gate decides its cases (:func:`writer`, a sink for
``stream_gate``), never built as one object: JSON Lines writes each case as it comes;
the others keep each rendered case aside by rank (in memory while small, then in
temporary files) and write the report in order at the end.

Each format has its module (``_table``, ``_json``, ``_junit``, ``_markdown``), over what
they share (``_shared``: the order of cases, side summaries, the writers' shape);
:func:`render` renders a whole :class:`~litmus_sandbox.GateReport` by name. This package
only re-exports.
"""

from __future__ import annotations

from litmus_sandbox.reports._formats import FORMATS as FORMATS
from litmus_sandbox.reports._formats import render as render
from litmus_sandbox.reports._formats import writer as writer
from litmus_sandbox.reports._json import case_to_dict as case_to_dict
from litmus_sandbox.reports._json import render_json as render_json
from litmus_sandbox.reports._json import render_jsonl as render_jsonl
from litmus_sandbox.reports._json import to_dict as to_dict
from litmus_sandbox.reports._junit import escape as escape
from litmus_sandbox.reports._junit import quoteattr as quoteattr
from litmus_sandbox.reports._junit import render_junit as render_junit
from litmus_sandbox.reports._markdown import render_markdown as render_markdown
from litmus_sandbox.reports._shared import ordered_cases as ordered_cases
from litmus_sandbox.reports._shared import side_summary as side_summary
from litmus_sandbox.reports._table import render_table as render_table

__all__ = [
    "FORMATS",
    "case_to_dict",
    "escape",
    "ordered_cases",
    "quoteattr",
    "render",
    "render_json",
    "render_jsonl",
    "render_junit",
    "render_markdown",
    "render_table",
    "side_summary",
    "to_dict",
    "writer",
]
