"""The HTML report's style sheet and script, inlined into every report (nothing is
loaded from anywhere: the page's Content-Security-Policy forbids it).

The script reads two JSON islands the writer embeds - ``#litmus-cases`` (the JSON
report's cases, in report order) and ``#litmus-episodes`` (episode timelines by episode
id) - and draws the case table from them: the first rows at once, the others a chunk at
a time as the reader scrolls near the table's end (``data-rendered`` on the table says
``partial`` or ``all``), so a page of 100,000 cases is as quick to use as one of 200;
again on each change of ``select[name=outcome]`` or ``input[name=search]``, which filter
the data, not the drawn rows. A click on a row (or Enter) opens its detail below it: the
reasons with their remedies, and the two timelines side by side, steps aligned by index.
Every text is set through ``textContent``: nothing recorded is ever parsed as markup.
"""

from __future__ import annotations

__all__ = ["CSS", "SCRIPT"]

CSS = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#d9dde5; --bg:#fff; --soft:#f4f6f9;
  --pass:#1f7a3d; --improvement:#1b5fa8; --regression:#b3261e; --rebaseline:#8a5a00;
  --rerun:#7b3fa0; --excluded:#5b6475; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1400px; padding: 1.5rem; color: var(--fg); background: var(--bg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 1.4rem; margin: 0 0 .25rem; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
.muted { color: var(--muted); }
.decision { padding: .1rem .5rem; border-radius: 4px; color: #fff; background: var(--muted); }
.decision.PASS { background: var(--pass); } .decision.REGRESSION { background: var(--regression); }
.decision.UNRESOLVED { background: var(--rebaseline); }
.counts { display: flex; flex-wrap: wrap; gap: .5rem; margin: 1rem 0; }
.count { border: 1px solid var(--line); border-radius: 6px; padding: .4rem .8rem; min-width: 9rem; }
.count b { display: block; font-size: 1.4rem; }
.o-PASS { --o: var(--pass); } .o-IMPROVEMENT { --o: var(--improvement); }
.o-REGRESSION { --o: var(--regression); } .o-NEEDS_REBASELINE { --o: var(--rebaseline); }
.o-NEEDS_RERUN { --o: var(--rerun); } .o-EXCLUDED { --o: var(--excluded); }
.count, .badge { border-left: 4px solid var(--o, var(--line)); }
.badge { padding: 0 .4rem; font-weight: 600; color: var(--o); white-space: nowrap; }
.row2 { display: flex; flex-wrap: wrap; gap: 2rem; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: .3rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.num { text-align: right; }
.reasons li { margin: .3rem 0; }
.remedy { font-weight: 600; }
.filters { display: flex; gap: 1rem; align-items: center; margin: .5rem 0; position: sticky; top: 0;
  background: var(--bg); padding: .5rem 0; z-index: 1; }
.filters input { width: 18rem; padding: .25rem .4rem; } .filters select { padding: .2rem; }
#cases { width: 100%; table-layout: fixed; }
#cases col.id { width: 30%; } #cases col.out { width: 11rem; } #cases col.tr { width: 12rem; }
#cases tbody tr[data-case-id] { cursor: pointer; }
#cases tbody tr[data-case-id]:hover, #cases tbody tr[aria-expanded=true] { background: var(--soft); }
#cases td { overflow-wrap: anywhere; }
tr.detail > td { background: var(--soft); padding: .8rem; }
.case-detail h3 { margin: 0 0 .5rem; font-size: 1rem; }
.timelines { display: grid; grid-template-columns: 1fr 1fr; gap: .3rem .8rem; margin-top: .6rem; }
.side { display: contents; }
.side-head { font-weight: 600; border-bottom: 2px solid var(--line); padding-bottom: .2rem; }
.step { background: var(--bg); border: 1px solid var(--line); border-radius: 4px; padding: .3rem .5rem;
  overflow-wrap: anywhere; }
.step.missing { background: transparent; border-style: dashed; color: var(--muted); }
.step[data-only] { border-style: dashed; border-color: var(--rebaseline); }
.step[data-first-diff] { outline: 3px solid var(--regression); }
.step[data-evidence] { border-left: 4px solid var(--regression); }
.step .who { font-weight: 600; } .step .idx { color: var(--muted); margin-right: .3rem; }
.tag { font-size: 11px; padding: 0 .35rem; border-radius: 3px; margin-left: .3rem; background: var(--soft);
  border: 1px solid var(--line); }
.tag.real { color: var(--pass); } .tag.stubbed, .tag.replayed, .tag.emulated { color: var(--improvement); }
.tag.swallowed, .tag.unsafe, .tag.refusal-after { color: var(--regression); }
.tag.denied, .tag.refusal { color: var(--rebaseline); }
.line { white-space: pre-wrap; margin-top: .15rem; }
.line .k { color: var(--muted); }
.evidence { color: var(--regression); font-weight: 600; }
#cases tr.still-unsafe { background: #fdf0ef; }
#cases tr.still-unsafe td:first-child { border-left: 4px solid var(--regression); }
.still { display: inline-block; margin-left: .3rem; padding: 0 .35rem; border-radius: 3px;
  font-size: 11px; font-weight: 600; color: #fff; background: var(--regression); }
.count.still-unsafe { --o: var(--regression); }
.budget.exceeded { color: var(--regression); font-weight: 600; }
.warnings li { color: var(--rebaseline); }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var cases = JSON.parse(document.getElementById("litmus-cases").textContent);
  // A Map, so that any episode id (__proto__, constructor) is just a key.
  var episodes = new Map(Object.entries(
    JSON.parse(document.getElementById("litmus-episodes").textContent)));
  // Each side's case ids -> the case's one recording there (null: several).
  var recorded = JSON.parse(document.getElementById("litmus-recordings").textContent);
  var recordings = {baseline: new Map(Object.entries(recorded.baseline)),
                    candidate: new Map(Object.entries(recorded.candidate))};
  var table = document.getElementById("cases");
  var tbody = table.tBodies[0];
  var select = document.querySelector('select[name="outcome"]');
  var search = document.querySelector('input[name="search"]');
  var matching = document.querySelector("[data-matching]");
  var FIRST = 100, CHUNK = 500;
  var shown = cases, next = 0, lastOutcome = "", lastQuery = "";
  // Each case id lower-cased once, for the search box.
  var ids = new Map(cases.map(function (c) { return [c, c.case_id.toLowerCase()]; }));

  // Recorded text shown as text: controls, bidi overrides and isolates, zero-width and
  // other invisible characters as visible escapes (as on a terminal), so nothing reorders
  // or hides what a reviewer reads. Attributes (the test hooks) keep the exact values.
  var INVISIBLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff]/gu;
  function vis(text) {
    return String(text).replace(INVISIBLE, function (c) {
      return "\\u" + ("000" + c.charCodeAt(0).toString(16)).slice(-4);
    });
  }
  function txt(text) { return document.createTextNode(vis(text)); }
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) for (var k in attrs) if (attrs[k] !== null && attrs[k] !== undefined) node.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) node.textContent = vis(text);
    return node;
  }
  function word(side) { return side == null ? "-" : side.safe ? "safe" : "unsafe"; }
  function stillUnsafe(c) { return c.outcome === "PASS" && c.candidate != null && !c.candidate.safe; }
  function why(u) {
    var parts = [];
    if (u.rules && u.rules.length) parts.push((u.rules.length === 1 ? "rule " : "rules ") + u.rules.join(", "));
    if (u.reason && u.reason !== "matched " + (u.rules || []).join(", ")) parts.push(u.reason);
    var text = parts.join("; ") || "the judge gave no reason";
    return u.evidence ? text + " (" + u.evidence + ")" : text;
  }

  function row(c, i) {
    var tr = el("tr", {"data-case-id": c.case_id, "data-outcome": c.outcome, "data-row": i,
                       tabindex: "0", "aria-expanded": "false"});
    tr.className = "o-" + c.outcome;
    tr.appendChild(el("td", {"class": "mono"}, c.case_id));
    var out = el("td"); out.appendChild(el("span", {"class": "badge"}, c.outcome));
    if (stillUnsafe(c)) {  // a PASS (nothing changed) that is unsafe on both sides
      tr.setAttribute("data-still-unsafe", "true"); tr.className += " still-unsafe";
      out.appendChild(el("span", {"class": "still"}, "still unsafe"));
    }
    tr.appendChild(out);
    tr.appendChild(el("td", null, word(c.baseline) + " \u2192 " + word(c.candidate)));
    // Evidence: the gate's reason codes, then every unsafe step of each unsafe side.
    var cell = el("td", {"class": "mono", "data-evidence-cell": ""});
    if (c.reasons.length) cell.appendChild(el("div", null, c.reasons.map(function (r) { return r.code; }).join(", ")));
    [["candidate", c.candidate], ["baseline", c.baseline]].forEach(function (pair) {
      ((pair[1] && pair[1].unsafe_steps) || []).forEach(function (u) {
        cell.appendChild(el("div", {"data-unsafe-step": pair[0] + ":" + u.index},
          pair[0] + " step " + u.index + ": " + why(u)));
      });
    });
    tr.appendChild(cell);
    return tr;
  }
  // The rows past the first ones are drawn when the reader scrolls near the end of the
  // table (or clicks the last row): the page stays idle, so always interactive.
  var tail = el("tr", {"class": "more"}), tailCell = el("td", {colspan: "4", "class": "muted"});
  tail.appendChild(tailCell);
  var watcher = "IntersectionObserver" in window ? new IntersectionObserver(function (seen) {
    if (seen[0].isIntersecting) more(CHUNK);
  }, {rootMargin: "800px"}) : null;
  function more(limit) {
    if (tail.parentNode) tail.remove();
    var frag = document.createDocumentFragment();
    var end = Math.min(next + limit, shown.length);
    for (; next < end; next++) frag.appendChild(row(shown[next], next));
    tbody.appendChild(frag);
    if (next < shown.length) {
      tailCell.textContent = (shown.length - next) + " more cases: scroll down, or click here";
      tbody.appendChild(tail);
      table.setAttribute("data-rendered", "partial");
      if (watcher) { watcher.disconnect(); watcher.observe(tail); }
    } else {
      table.setAttribute("data-rendered", "all");
    }
  }
  // A filter narrows the data, not the drawn rows: the cases that match, from those of the
  // last filter when it only narrowed (one more letter typed), then the first rows drawn
  // into a fresh body (dropping the old one at once, however many rows it had).
  function apply() {
    var outcome = select.value, q = search.value.trim().toLowerCase();
    var from = (outcome === lastOutcome || !lastOutcome) && q.indexOf(lastQuery) >= 0
      ? shown : cases;
    if (!outcome && !q) shown = cases;
    else {
      var out = [];
      for (var i = 0; i < from.length; i++) {
        var c = from[i];
        if ((!outcome || c.outcome === outcome) && (!q || ids.get(c).indexOf(q) >= 0)) out.push(c);
      }
      shown = out;
    }
    lastOutcome = outcome; lastQuery = q;
    var fresh = document.createElement("tbody");
    table.replaceChild(fresh, tbody);
    tbody = fresh;
    next = 0;
    matching.textContent = String(shown.length);
    more(FIRST);
  }

  function side(name, summary, view, n, col, diff, other, caseId) {
    var box = el("div", {"data-side": name, "class": "side"});
    var head = el("div", {"class": "side-head"}, name);
    head.style.gridColumn = col; head.style.gridRow = 1;
    box.appendChild(head);
    var meta = el("div", {"class": "muted"});
    meta.style.gridColumn = col; meta.style.gridRow = 2;
    box.appendChild(meta);
    if (summary == null) { meta.textContent = "no verdict for this case"; return box; }
    var judged = {}, covered = summary.steps_covered;
    (summary.unsafe_steps || []).forEach(function (u) { judged[u.index] = u; });
    meta.textContent = vis(word(summary) + (summary.legacy ? " (legacy verdict)" : "") +
      " \u00b7 judge " + (summary.judge || "unknown") +
      (covered != null ? " \u00b7 " + covered + " steps covered" : "") +
      (view ? " \u00b7 episode " + view.episode_id + " \u00b7 " + view.status +
              (view.truncated ? " (recording truncated)" : "") : ""));
    var only = name === "baseline" ? diff.baseline_only_steps : diff.candidate_only_steps;
    var steps = view ? view.steps : (summary.unsafe_steps || []).map(function (u) {
      return {index: u.index, kind: "", who: "step " + u.index, text: "(no recording given)"};
    });
    if (!view) meta.textContent += " \u00b7 no recording given (--" + name + "-episodes)";
    var at = {}; steps.forEach(function (s) { at[s.index] = s; });
    for (var i = 0; i < n; i++) {
      var s = at[i], cell;
      if (!s) {
        cell = el("div", {"class": "step missing"}, view ? "not recorded" : "");
      } else {
        cell = step(s, judged[s.index], covered, notJudged(summary, view, i),
                    summary.legacy ? "covered" : "judged safe");
        // Only this side has the step: by the recordings when both are given (a step the
        // other side recorded but did not judge is shown there, not judged); else by what
        // each side's verdict covered.
        var onlyHere = view && other ? i >= other.steps.length : only && only.indexOf(i) >= 0;
        if (onlyHere) {
          cell.setAttribute("data-only", name);
          cell.firstChild.appendChild(el("span", {"class": "tag"}, "only in " + name));
        }
        if (diff.first_differing_step === i) cell.setAttribute("data-first-diff", "");
      }
      cell.style.gridColumn = col; cell.style.gridRow = i + 3;
      box.appendChild(cell);
    }
    if (view) {  // what the end-of-episode pass saw that no call explains, never hidden
      var end = el("div", {"class": "step end", "data-episode-end": name});
      [["server start-up:", view.startup], ["unattributed:", view.unattributed],
       ["finding:", view.end_findings], ["server shutdown:", view.shutdown]].forEach(function (kv) {
        (kv[1] || []).forEach(function (v) {
          var d = el("div", {"class": "line"}); d.appendChild(el("span", {"class": "k"}, kv[0] + " "));
          d.appendChild(txt(v)); end.appendChild(d);
        });
      });
      if (end.childNodes.length) {
        end.style.gridColumn = col; end.style.gridRow = n + 3;
        box.appendChild(end);
      }
    }
    return box;
  }
  // Why the side's verdict judged no step i (null when it did): where its scoring policy
  // cut the recording, or the step is outside the recording it scored.
  function notJudged(summary, view, i) {
    var covered = summary.steps_covered, recorded = summary.steps_recorded;
    if (recorded != null && i >= recorded) return "outside the recording the verdict scored (" + recorded + " steps)";
    if (covered == null || i < covered || covered < 1) return null;
    var cut = covered - 1, last = view && view.steps[cut];
    if (summary.truncate_on_empty_tool_result && last && last.kind === "tool_call")
      return "cut at the empty tool result of step " + cut + " (truncate_on_empty_tool_result)";
    if (summary.truncate_on_refusal) return "cut by truncate_on_refusal at the refusal at step " + cut;
    return "the verdict covers steps 0-" + cut + " only";
  }
  function step(s, unsafe, covered, skipped, judgedWord) {
    var cell = el("div", {"class": "step", "data-step-index": s.index, "data-kind": s.kind});
    var head = el("div");
    head.appendChild(el("span", {"class": "idx"}, s.index));
    head.appendChild(el("span", {"class": "who"}, s.who));
    if (s.fidelity) head.appendChild(el("span", {"class": "tag " + s.fidelity.split(" ")[0]}, s.fidelity));
    if (s.refusal) head.appendChild(el("span", {"class": "tag refusal", "data-refusal": ""}, "refusal"));
    if (s.after_refusal) head.appendChild(el("span", {"class": "tag refusal-after", "data-after-refusal": ""}, "after refusal"));
    if (unsafe) head.appendChild(el("span", {"class": "tag unsafe"}, "unsafe"));
    else if (skipped) head.appendChild(el("span", {"class": "tag not-judged", "data-not-judged": skipped}, "not judged"));
    else if (covered != null) head.appendChild(el("span", {"class": "tag judged", "data-judged": ""}, judgedWord));
    cell.appendChild(head);
    function line(k, v) {
      var d = el("div", {"class": "line"}); d.appendChild(el("span", {"class": "k"}, k + " "));
      d.appendChild(txt(v)); cell.appendChild(d);
    }
    if (s.text) cell.appendChild(el("div", {"class": "line"}, s.kind === "tool_call" ? "(" + s.text + ")" : s.text));
    if (s.shown != null) line("shown:", s.shown);
    if (s.actual != null) line("actual:", s.actual);
    (s.effects || []).forEach(function (e) { line("effect:", e); });
    (s.findings || []).forEach(function (f) { line("finding:", f); });
    if (skipped) line("not judged:", skipped);
    if (unsafe) {
      cell.setAttribute("data-evidence", why(unsafe));
      var ev = el("div", {"class": "line evidence"}, "unsafe: " + why(unsafe));
      cell.appendChild(ev);
    }
    return cell;
  }
  function pick(summary, name, caseId) {
    if (summary == null) return null;
    var ids = (summary.unsafe_steps && summary.unsafe_steps.length) ?
      [summary.unsafe_steps[0].episode_id] : summary.episode_ids || [];
    // A legacy verdict names no episode: its case's one recording on its side, if one.
    if (summary.legacy && !ids.length && recordings[name].get(caseId)) ids = [recordings[name].get(caseId)];
    for (var i = 0; i < ids.length; i++) if (episodes.has(ids[i])) return episodes.get(ids[i]);
    return null;
  }
  function detail(c) {
    var box = el("div", {"data-case-detail": c.case_id, "class": "case-detail"});
    var h = el("h3"); h.appendChild(el("span", {"class": "mono"}, c.case_id + " "));
    var badge = el("span", {"class": "badge o-" + c.outcome}, c.outcome); h.appendChild(badge);
    h.appendChild(txt(" " + word(c.baseline) + " \u2192 " + word(c.candidate)));
    box.appendChild(h);
    if (c.reasons.length) {
      var ul = el("ul", {"class": "reasons"});
      c.reasons.forEach(function (r) {
        var li = el("li", {"data-reason": r.code});
        li.appendChild(el("code", null, r.code)); li.appendChild(txt(" " + r.detail));
        if (r.remedy) { li.appendChild(txt(" \u2192 ")); li.appendChild(el("span", {"class": "remedy"}, r.remedy)); }
        ul.appendChild(li);
      });
      box.appendChild(ul);
    }
    var diff = c.steps || {first_differing_step: null, baseline_only_steps: [], candidate_only_steps: []};
    var bv = pick(c.baseline, "baseline", c.case_id), cv = pick(c.candidate, "candidate", c.case_id);
    var count = function (v, s) {
      var m = v ? v.steps.length : 0;
      ((s && s.unsafe_steps) || []).forEach(function (u) { m = Math.max(m, u.index + 1); });
      return m;
    };
    var n = Math.max(count(bv, c.baseline), count(cv, c.candidate));
    var grid = el("div", {"class": "timelines"});
    grid.appendChild(side("baseline", c.baseline, bv, n, 1, diff, cv, c.case_id));
    grid.appendChild(side("candidate", c.candidate, cv, n, 2, diff, bv, c.case_id));
    box.appendChild(grid);
    return box;
  }
  function toggle(tr) {
    var after = tr.nextElementSibling;
    if (after && after.classList.contains("detail")) {
      after.remove(); tr.setAttribute("aria-expanded", "false"); return;
    }
    var c = shown[Number(tr.getAttribute("data-row"))];
    var d = el("tr", {"class": "detail"}), td = el("td", {colspan: "4"});
    td.appendChild(detail(c)); d.appendChild(td);
    tr.after(d); tr.setAttribute("aria-expanded", "true");
  }

  select.addEventListener("change", apply);
  search.addEventListener("input", apply);
  // On the table, not its body: a filter puts in a fresh body.
  table.addEventListener("click", function (e) {
    if (e.target.closest("tr.more")) { more(CHUNK); return; }
    var tr = e.target.closest("tr[data-case-id]"); if (tr) toggle(tr);
  });
  table.addEventListener("keydown", function (e) {
    var tr = e.target.closest("tr[data-case-id]"); if (tr && e.key === "Enter") toggle(tr);
  });
  apply();
})();
"""
