"""``gate --html``: one self-contained page beside the report ``--format`` prints, with the
documented ``data-*`` hooks (read here as HTML; the browser test drives the page)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from factories import verdict
from html_suite import make_suite

from litmus_sandbox._cli.main import main
from litmus_sandbox._core.gate import OUTCOMES
from litmus_sandbox._core.suite import gate
from litmus_sandbox._store.streams import write_verdicts
from litmus_sandbox.reports import render_json
from litmus_sandbox.reports._html import HtmlWriter


class Hooks(HTMLParser):
    """The elements carrying a ``data-*`` hook, the scripts' bodies, every URL."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[tuple[str, dict[str, str | None], str]] = []
        self.urls: list[str] = []
        self.scripts: dict[str, str] = {}
        self._open: list[tuple[str, dict[str, str | None]]] = []
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "action")]
        self._open.append((tag, a))
        self._text = ""

    def handle_data(self, data: str) -> None:
        self._text += data

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            t, a = self._open.pop()
            if any(k.startswith("data-") or k == "name" for k in a):
                self.hooks.append((t, a, self._text))
            if t == "script":
                self.scripts[a.get("id") or "code"] = self._text
            if t == tag:
                break

    def find(
        self, attr: str, value: str | None = None
    ) -> list[tuple[str, dict[str, str | None], str]]:
        return [h for h in self.hooks if attr in h[1] and (value is None or h[1][attr] == value)]


def parse(path: Path) -> Hooks:
    hooks = Hooks()
    hooks.feed(path.read_text())
    return hooks


def test_html_report_carries_the_json_reports_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = make_suite(tmp_path)
    capsys.readouterr()
    page = tmp_path / "report.html"
    assert suite.gate("--format", "json", "-o", tmp_path / "r.json", html=page) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    hooks = parse(page)
    [(_, decision, text)] = hooks.find("data-decision")
    assert decision["data-decision"] == text == report["decision"] == "REGRESSION"
    for outcome in OUTCOMES:
        [(_, _, n)] = hooks.find("data-count", outcome)
        assert int(n) == report["counts"][outcome] > 0
    # Reasons grouped, each with its remedy and what that remedy asks.
    reasons = {h[1]["data-reason-code"]: h[2] for h in hooks.find("data-reason-code")}
    assert set(reasons) == set(report["reasons"])
    assert "rescore_baseline" in reasons["judge_mismatch"]
    assert "rebaseline" in reasons["judge_mismatch"]
    assert "rerun_candidate" in reasons["candidate_missing"]
    # The cases, in the JSON report's order, each side with its unsafe steps' evidence.
    cases = json.loads(hooks.scripts["litmus-cases"])
    assert [c["case_id"] for c in cases] == [c["case_id"] for c in report["cases"]]
    by_id = {c["case_id"]: c for c in cases}
    assert by_id["refuse-then-continue"]["candidate"]["unsafe_steps"] == [
        {
            "index": 2,
            "episode_id": "refuse-then-continue-c",
            "rules": ["harmful-instructions"],
            "reason": "matched harmful-instructions",
            "evidence": "claimed",
        },
        {
            "index": 3,
            "episode_id": "refuse-then-continue-c",
            "rules": ["payload-written"],
            "reason": "matched payload-written",
            "evidence": "requested",
        },
    ]
    # The timelines of both sides' recordings, refusals told.
    episodes = json.loads(hooks.scripts["litmus-episodes"])
    assert {"refuse-then-continue-b", "refuse-then-continue-c"} <= set(episodes)
    steps = episodes["refuse-then-continue-c"]["steps"]
    assert [s["refusal"] for s in steps] == [False, True, False, False]
    assert [s["after_refusal"] for s in steps] == [False, False, True, True]
    # Controls, and nothing loaded from anywhere.
    assert hooks.find("name", "outcome")[0][0] == "select"
    assert hooks.find("name", "search")[0][0] == "input"
    assert all(u.startswith("data:") for u in hooks.urls), hooks.urls
    assert "default-src 'none'" in page.read_text()


def test_html_report_keeps_the_exit_code_and_the_printed_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = make_suite(tmp_path)
    capsys.readouterr()
    assert suite.gate() == 1
    without = capsys.readouterr().out
    assert suite.gate(html=tmp_path / "r.html") == 1
    assert capsys.readouterr().out == without
    assert (tmp_path / "r.html").stat().st_size > 0


def test_html_report_refuses_the_file_of_another_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = make_suite(tmp_path)
    capsys.readouterr()
    same = tmp_path / "same.out"
    assert suite.gate("-o", same, html=same) == 2
    assert "--html" in capsys.readouterr().err
    assert suite.gate(html=suite.baseline[0]) == 2
    assert "is also an input" in capsys.readouterr().err


def test_hostile_case_ids_stay_text(tmp_path: Path) -> None:
    """A case id is data: it never closes the JSON island nor becomes markup."""
    evil = "</script><img src=x onerror=alert(1)><!--"
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_verdicts(b, None, [verdict(evil)])
    write_verdicts(c, None, [verdict(evil, safe=False)])
    page = tmp_path / "r.html"
    assert main(["gate", "--baseline", str(b), "--candidate", str(c), "--html", str(page)]) == 1
    text = page.read_text()
    assert "<img" not in text
    assert text.count("</script>") == 4  # the three JSON islands and the script, no more
    hooks = parse(page)
    assert json.loads(hooks.scripts["litmus-cases"])[0]["case_id"] == evil


def test_nothing_compared_is_said_as_the_json_report_says_it(tmp_path: Path) -> None:
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_verdicts(b, None, [])
    write_verdicts(c, None, [])
    page = tmp_path / "r.html"
    argv = ["gate", "--baseline", str(b), "--candidate", str(c), "--html", str(page)]
    assert main([*argv, "--allow-empty-input"]) == 5  # empty files: refused unless accepted
    [(_, attrs, _)] = parse(page).find("data-decision")
    assert attrs["data-decision"] == "EMPTY"
    assert json.loads(parse(page).scripts["litmus-cases"]) == []


def test_writer_gives_the_json_reports_cases_for_a_report_in_memory(tmp_path: Path) -> None:
    """The writer takes the gate's cases as every format does (here a whole report), and
    embeds them as the JSON report writes them."""
    import io

    report = gate([verdict("a"), verdict("b")], [verdict("a", safe=False), verdict("b")])
    buf = io.BytesIO()
    with HtmlWriter(buf) as w:
        w.write(report.cases)
        w.finish(report)
    island = re.search(rb'id="litmus-cases">(.*?)</script>', buf.getvalue(), re.S)
    assert island is not None
    cases: list[dict[str, Any]] = json.loads(island.group(1))
    assert cases == json.loads(render_json(report))["cases"]
