"""Filtering the HTML report's case table in headless Chromium, against a bare floor page.

    python bench/html_filter_bench.py [--cases 5000] [--runs 3]

Gates a suite of ``--cases`` cases (``tests/reports/html_suite.large_suite``) with
``--html``, opens the page in headless Chromium (the tests' driver) and times, in the page
(``performance.now()``, up to the next layout, so what a reader waits for):

* **outcome**: choosing each outcome in ``select[name=outcome]``, then all again;
* **search**: typing a case id letter by letter into ``input[name=search]``, one
  ``input`` event a letter (the slowest letter, and all ten);
* **outcome, all drawn**: the outcome filter once every row has been drawn (scrolled to
  the end), the worst case: a table of ``--cases`` rows to replace.

The floor is the least a page can do for the same filter: the same cases as a JSON
island, filtered with a plain loop and drawn as bare rows (no style sheet, no listeners),
timed the same way in the same browser. Reports the best of ``--runs`` of each, in ms, and
the ratio to the floor. Goal: every filter at most 200 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "reports")]

import chromium  # noqa: E402 - from tests/reports, put on the path above
from html_suite import large_suite  # noqa: E402

from litmus_sandbox._cli.main import main  # noqa: E402
from litmus_sandbox._core.gate import OUTCOMES  # noqa: E402

#: Sets the filter in the page and returns the ms until the next layout is done.
_TIME_SELECT = """
var s = document.querySelector(arguments[0]), t0 = performance.now();
s.value = arguments[1]; s.dispatchEvent(new Event(arguments[2]));
document.body.getBoundingClientRect();
return performance.now() - t0;
"""

_FLOOR_PAGE = """<!doctype html><meta charset="utf-8"><body>
<select name="outcome"><option value=""></option>{options}</select>
<input name="search"><table><tbody></tbody></table>
<script id="cases" type="application/json">{cases}</script>
<script>
var cases = JSON.parse(document.getElementById("cases").textContent);
var sel = document.querySelector("select"), q = document.querySelector("input");
var body = document.querySelector("tbody");
function apply() {{
  var o = sel.value, s = q.value.toLowerCase(), out = [];
  for (var i = 0; i < cases.length; i++) {{
    var c = cases[i];
    if ((!o || c.outcome === o) && (!s || c.case_id.toLowerCase().indexOf(s) >= 0)) out.push(c);
  }}
  var fresh = document.createElement("tbody");
  for (var j = 0; j < Math.min(out.length, 100); j++) {{
    var tr = document.createElement("tr"), td = document.createElement("td");
    td.textContent = out[j].case_id + " " + out[j].outcome; tr.appendChild(td); fresh.appendChild(tr);
  }}
  body.replaceWith(fresh); body = fresh;
}}
sel.addEventListener("change", apply); q.addEventListener("input", apply); apply();
</script>"""


def _draw_all(browser: Any) -> None:
    for _ in range(200):
        if (
            browser.execute_script(
                "return document.getElementById('cases').getAttribute('data-rendered')"
            )
            == "all"
        ):
            return
        browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        time.sleep(0.05)
    raise RuntimeError("the table never finished drawing")


def _outcome(browser: Any) -> float:
    return max(
        float(browser.execute_script(_TIME_SELECT, 'select[name="outcome"]', value, "change"))
        for value in [*OUTCOMES, ""]
    )


def _search(browser: Any, case_id: str) -> tuple[float, float]:
    """The slowest letter, and all the letters, of typing ``case_id``."""
    browser.execute_script(_TIME_SELECT, 'input[name="search"]', "", "input")
    times = [
        browser.execute_script(_TIME_SELECT, 'input[name="search"]', case_id[:i], "input")
        for i in range(1, len(case_id) + 1)
    ]
    browser.execute_script(_TIME_SELECT, 'input[name="search"]', "", "input")
    return max(times), sum(times)


def _measure(browser: Any, page: Path, *, all_drawn: bool) -> dict[str, float]:
    browser.get(page.as_uri())
    letter, word = _search(browser, "case-00499")
    out = {"outcome": _outcome(browser), "search, a letter": letter, "search, 10 letters": word}
    if all_drawn:
        browser.get(page.as_uri())
        _draw_all(browser)
        out["outcome, all drawn"] = browser.execute_script(
            _TIME_SELECT, 'select[name="outcome"]', "IMPROVEMENT", "change"
        )
    return out


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        b, c = large_suite(folder, args.cases)
        page, as_json = folder / "report.html", folder / "report.json"
        main(["gate", "--baseline", str(b), "--candidate", str(c), "--format", "json",
              "-o", str(as_json), "--html", str(page), "--allow-unresolved"])  # fmt: skip
        cases = json.loads(as_json.read_text())["cases"]
        floor = folder / "floor.html"
        floor.write_text(
            _FLOOR_PAGE.format(
                options="".join(f'<option value="{o}">{o}</option>' for o in OUTCOMES),
                cases=json.dumps(
                    [{"case_id": x["case_id"], "outcome": x["outcome"]} for x in cases]
                ),
            )
        )
        with chromium.driver() as browser:
            ours = [_measure(browser, page, all_drawn=True) for _ in range(args.runs)]
            bare = [_measure(browser, floor, all_drawn=False) for _ in range(args.runs)]
    print(f"{args.cases} cases, best of {args.runs} (ms, in the page, up to the next layout)")
    print(f"{'filter':<22}{'report':>10}{'floor':>10}{'ratio':>8}")
    for key in ours[0]:
        mine = min(r[key] for r in ours)
        low = min(r[key] for r in bare) if key in bare[0] else None
        ratio = f"{mine / low:.1f}x" if low else "-"
        print(f"{key:<22}{mine:>10.1f}{(f'{low:.1f}' if low else '-'):>10}{ratio:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
