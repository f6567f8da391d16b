"""The HTML report (``gate --html REPORT.html``): one self-contained page, for people.

Theory of operation
-------------------
The page is built from the JSON report's data - the same case dicts
(:func:`~litmus_sandbox.reports._json.case_to_dict`) and summary - and written as the
gate decides, like every format (:class:`~litmus_sandbox.reports._shared.Writer`):
``write`` encodes each case and spools it by rank (report order), counting the
transitions baseline -> candidate and the remedies of each reason code on the way;
``finish`` writes the static part (decision, counts, transitions, reasons with their
remedies, the table's controls), then two JSON islands - the cases, and the timelines
of the episodes given (read now, one at a time, straight into the page) - then the
script (:mod:`~litmus_sandbox.reports._html_assets`) that draws the table from them.

Nothing is loaded from anywhere: CSS and script are inline and the page's
Content-Security-Policy forbids every fetch. Text from the inputs reaches the page only
as escaped HTML or inside JSON (``<`` written ``\\u003c``), and the script sets it
through ``textContent``.

Test hooks (a contract, see the docs): ``[data-decision]``, ``[data-count="OUTCOME"]``,
rows ``[data-case-id][data-outcome]``, ``select[name="outcome"]``,
``input[name="search"]``, ``[data-reason-code]``, ``[data-case-detail="ID"]`` with
``[data-side]`` timelines of ``[data-step-index]`` steps, ``data-first-diff``,
``[data-evidence]``.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

import msgspec

from litmus_sandbox._core.gate import OUTCOMES, CaseResult
from litmus_sandbox._core.runs import DecidedRun
from litmus_sandbox._core.scoring import RefusalDetector
from litmus_sandbox._core.suite import GateSummary
from litmus_sandbox._model.safe_text import for_html
from litmus_sandbox._store.streams import iter_episodes
from litmus_sandbox.reports._html_assets import CSS, SCRIPT
from litmus_sandbox.reports._inputs import SIDES, side_rows, version_line
from litmus_sandbox.reports._json import _summary_dict, case_to_dict
from litmus_sandbox.reports._shared import Writer, rank, safe_word
from litmus_sandbox.reports._timeline import episode_view

__all__ = ["REMEDIES", "HtmlWriter", "Tee"]

_encoder = msgspec.json.Encoder()

#: What each remedy asks of the user, as the report explains it.
REMEDIES = {
    "rescore_baseline": "re-score the baseline's recordings like the candidate "
    "(litmus-sandbox rebaseline --episodes BASELINE_EPISODES --like CANDIDATE_VERDICTS): "
    "no re-run, and steps judged before come from the cache",
    "rerun_baseline": "record the baseline again under litmus-sandbox: re-scoring cannot "
    "change what was recorded or how the tools ran",
    "rerun_candidate": "run the candidate again: its verdict is missing, or its recording "
    "is incomplete or truncated",
    "exclude": "excluded by --exclude, with the reason given there",
}

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)


def _json_island(data: bytes) -> bytes:
    """JSON safe inside ``<script>``: no ``<`` at all (so never ``</script>``)."""
    return data.replace(b"<", b"\\u003c")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


class HtmlWriter(Writer):
    """``gate --html``: see the module docstring.

    Args:
        episodes: episode streams whose timelines the page shows (baseline's and
            candidate's; each episode is found by the id its verdict names).
        detector: tells refusals in the timelines (default: the built-in one).
    """

    def __init__(
        self,
        out: BinaryIO,
        *,
        episodes: Sequence[str] = (),
        detector: RefusalDetector | None = None,
        baseline_episodes: Sequence[str] = (),
        **kw: Any,
    ) -> None:
        super().__init__(out, **kw)
        self.episodes = list(episodes)
        #: The baseline's own recordings (the rest are the candidate's): a legacy verdict
        #: names no episode, so its case's one recording on its side is its timeline.
        self.baseline_episodes = set(baseline_episodes)
        self.detector = detector
        self.cases = 0
        self.transitions: Counter[tuple[str, str]] = Counter()
        self.remedies: dict[str, Counter[str]] = {}

    def write(self, results: Sequence[CaseResult]) -> None:
        encode = _encoder.encode
        for case in results:
            d = case_to_dict(case)
            self.cases += 1
            self.transitions[safe_word(d["baseline"]), safe_word(d["candidate"])] += 1
            for r in case.reasons:
                self.remedies.setdefault(r.code, Counter())[r.remedy or ""] += 1
            self.spool.write(rank(case), _json_island(encode(d)) + b",")

    def finish(self, summary: GateSummary, warnings: Sequence[str] = ()) -> None:
        data = _summary_dict(summary, **self.flags, warnings=warnings, cases=None)
        out = self.out
        out.write(page_head(data, self.transitions, self.remedies, self.cases).encode())
        out.write(b'<script type="application/json" id="litmus-cases">[')
        self.copy_ranks(trim=1)  # the last case's ","
        out.write(b']</script>\n<script type="application/json" id="litmus-episodes">{')
        recordings = self._write_episodes()
        out.write(b'}</script>\n<script type="application/json" id="litmus-recordings">')
        out.write(_json_island(_encoder.encode(recordings)))
        out.write(b"</script>\n<script>" + SCRIPT.encode() + b"</script>\n</body>\n</html>\n")

    def _write_episodes(self) -> dict[str, dict[str, str | None]]:
        """Write each episode's timeline; each side's case ids -> the episode id of the
        case's one recording on that side (None: several, so no legacy verdict's)."""
        recordings: dict[str, dict[str, str | None]] = {"baseline": {}, "candidate": {}}
        seen: set[str] = set()
        encode, sep = _encoder.encode, b""
        for path in self.episodes:
            side = recordings["baseline" if path in self.baseline_episodes else "candidate"]
            for ep in iter_episodes([path], []):
                if ep.episode_id in seen:
                    continue
                seen.add(ep.episode_id)
                side[ep.case_id] = None if ep.case_id in side else ep.episode_id
                view = episode_view(ep, self.detector)
                self.out.write(sep + _json_island(encode(ep.episode_id) + b":" + encode(view)))
                sep = b","
        return recordings


def page_head(
    data: Mapping[str, Any],
    transitions: Mapping[tuple[str, str], int],
    remedies: Mapping[str, Mapping[str, int]],
    cases: int,
) -> str:
    """Everything above the JSON islands: decision, counts, transitions, reasons with
    their remedies, the case table's controls and its empty body."""
    decision, counts, stats = data["decision"], data["counts"], data["statistics"]
    parts = [
        "<!doctype html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n",
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n',
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n",
        "<link rel='icon' href='data:,'>\n",
        f"<title>litmus-sandbox gate: {_e(decision)}</title>\n<style>{CSS}</style>\n",
        "</head>\n<body>\n<header>\n",
        f"<h1>litmus-sandbox gate <span class='decision {_e(decision)}' "
        f"data-decision='{_e(decision)}'>{_e(decision)}</span></h1>\n",
        f"<p class='muted'>exit code {data['exit_code']} &middot; {cases} case"
        f"{'' if cases == 1 else 's'} &middot; {stats['comparable']} comparable: "
        f"safe&rarr;unsafe {stats['safe_to_unsafe']}, unsafe&rarr;safe "
        f"{stats['unsafe_to_safe']} (McNemar exact p = {stats['mcnemar_p']:.4g}), "
        f"flaky {stats['flaky']}, oracle contradictions {stats['oracle_contradictions']}, "
        f"still unsafe {stats['still_unsafe']}</p>\n",
        _budget(data),
        "</header>\n",
        _inputs(data),
        "<section class='counts' aria-label='cases per outcome'>\n",
    ]
    parts.extend(
        f"<div class='count o-{o}'><span>{o}</span><b data-count='{o}'>{counts.get(o, 0)}</b></div>\n"
        for o in OUTCOMES
    )
    parts.append(
        "<div class='count still-unsafe' title='PASS cases unsafe on both sides'>"
        f"<span>still unsafe</span><b data-still-unsafe-count>{stats['still_unsafe']}</b></div>\n"
    )
    parts.append("</section>\n<div class='row2'>\n")
    parts.append(_transitions(transitions))
    parts.append(_reasons(data, remedies))
    parts.append("</div>\n")
    if data["warnings"] or data["unknown_exclusions"]:
        parts.append("<h2>Warnings</h2>\n<ul class='warnings'>\n")
        parts.extend(f"<li>{for_html(w)}</li>\n" for w in data["warnings"])
        if data["unknown_exclusions"]:
            names = ", ".join(data["unknown_exclusions"])
            parts.append(f"<li>exclusions naming no case: {for_html(names)}</li>\n")
        parts.append("</ul>\n")
    options = "".join(f"<option value='{o}'>{o}</option>" for o in OUTCOMES)
    parts += [
        "<h2>Cases</h2>\n<div class='filters'>\n",
        f"<label>Outcome <select name='outcome'><option value=''>all</option>{options}"
        "</select></label>\n",
        "<label>Case id <input name='search' type='search' placeholder='part of a case id' "
        "autocomplete='off'></label>\n",
        f"<span class='muted'><span data-matching>{cases}</span> of {cases} shown; "
        "click a case for its steps</span>\n</div>\n",
        "<table id='cases' data-rendered='partial'><colgroup><col class='id'><col class='out'>"
        "<col class='tr'><col></colgroup>\n<thead><tr><th>Case</th><th>Outcome</th>"
        "<th>Baseline &rarr; candidate</th><th>Evidence</th></tr></thead>\n<tbody></tbody>"
        "</table>\n<noscript>The case table needs JavaScript; the counts above do not."
        "</noscript>\n",
    ]
    return "".join(parts)


#: Changes first (the ones that decide), then the steady ones, then one side missing.
_TRANSITION_ORDER = {
    ("safe", "unsafe"): 0,
    ("unsafe", "safe"): 1,
    ("safe", "safe"): 2,
    ("unsafe", "unsafe"): 3,
}


def _transitions(transitions: Mapping[tuple[str, str], int]) -> str:
    rows = "".join(
        f"<tr data-transition='{b}->{c}'><td>{b}</td><td>{c}</td><td class='num'>{n}</td></tr>"
        for (b, c), n in sorted(
            transitions.items(), key=lambda item: _TRANSITION_ORDER.get(item[0], 9)
        )
    )
    return (
        "<section><h2>Baseline &rarr; candidate</h2>\n<table class='transitions'><thead><tr>"
        f"<th>baseline</th><th>candidate</th><th>cases</th></tr></thead><tbody>{rows}"
        "</tbody></table></section>\n"
    )


def _reasons(data: Mapping[str, Any], remedies: Mapping[str, Mapping[str, int]]) -> str:
    if not data["reasons"]:
        return "<section><h2>Reasons</h2><p class='muted'>No case carries a reason.</p></section>\n"
    items = []
    for code, n in data["reasons"].items():
        fixes = "; ".join(
            f"<span class='remedy'>{_e(remedy)}</span> ({k}): {_e(REMEDIES.get(remedy, ''))}"
            for remedy, k in sorted(remedies.get(code, {}).items(), key=lambda item: -item[1])
            if remedy
        )
        items.append(
            f"<li data-reason-code='{_e(code)}'><code>{_e(code)}</code> "
            f"<b>{n}</b> case{'' if n == 1 else 's'}"
            + (f" &rarr; {fixes}" if fixes else "")
            + "</li>\n"
        )
    plan = data["rebaseline_plan"]
    summary = ""
    if plan["rescore"] or plan["rerun_baseline"] or plan["rerun_candidate"]:
        calls = ("" if plan["judge_calls_exact"] else "at most ") + _plural(
            plan["judge_calls"], "judge call"
        )
        summary = (
            f"<p>Re-baseline plan: re-score {_plural(len(plan['rescore']), 'baseline')} "
            f"({calls}), re-run {_plural(len(plan['rerun_baseline']), 'baseline')}, "
            f"re-run {_plural(len(plan['rerun_candidate']), 'candidate')}.</p>\n"
        )
    return (
        "<section><h2>Reasons</h2>\n<ul class='reasons'>\n"
        + "".join(items)
        + "</ul>\n"
        + summary
        + "</section>\n"
    )


def _inputs(data: Mapping[str, Any]) -> str:
    """What was compared: a row per field, a column per side (recorded text as text)."""
    inputs = data["inputs"]
    head = (
        "<section class='inputs' data-inputs>\n<h2>Inputs</h2>\n<p class='muted' "
        f"data-version='{_e(data['litmus_sandbox_version'])}'>compared by "
        f"{_e(version_line())}</p>\n"
    )
    if inputs is None:
        return head + "<p class='muted'>The inputs were not given.</p>\n</section>\n"
    sides = {name: side_rows(inputs[name]) for name in SIDES}
    rows = "".join(
        f"<tr data-input='{_e(key)}'><th>{_e(key)}</th>"
        + "".join(f"<td data-side='{name}'>{for_html(sides[name][i][1])}</td>" for name in SIDES)
        + "</tr>\n"
        for i, (key, _) in enumerate(sides["baseline"])
    )
    return (
        head
        + "<table class='inputs'><thead><tr><th></th><th>baseline</th><th>candidate</th></tr>"
        + f"</thead>\n<tbody>\n{rows}</tbody></table>\n</section>\n"
    )


def _budget(data: Mapping[str, Any]) -> str:
    """``--max-unsafe``'s line (nothing without it)."""
    budget = data["unsafe_budget"]
    if budget is None:
        return ""
    exceeded = "true" if budget["exceeded"] else "false"
    text = (
        f"Unsafe budget (--max-unsafe {budget['limit']}): {budget['candidate_unsafe']} of "
        f"{data['statistics']['comparable']} comparable cases unsafe in the candidate: "
        + ("exceeded, the gate blocks" if budget["exceeded"] else "within the limit")
    )
    cls = "budget exceeded" if budget["exceeded"] else "budget"
    return f"<p class='{cls}' data-unsafe-budget data-exceeded='{exceeded}'>{_e(text)}</p>\n"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


class Tee:
    """One sink for ``stream_gate`` that hands each chunk of cases to several reports
    (``--format``'s and ``--html``'s); it wants the plain passes if any of them does."""

    def __init__(self, *sinks: Writer) -> None:
        self.sinks = sinks
        self.plain = any(s.plain for s in sinks)

    def write(self, results: Sequence[CaseResult]) -> None:
        for sink in self.sinks:
            sink.write(results)

    def write_run(self, run: DecidedRun) -> None:
        for sink in self.sinks:
            sink.write_run(run)
