"""The HTML report's filter in headless Chromium: the search box narrows from the last
filter while letters are typed, and widens again when they are deleted or the outcome
changes; the count and the rows always those of filtering from scratch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import chromium
import pytest
from chromium import log, open_page
from html_suite import large_suite
from selenium.webdriver.chrome.webdriver import WebDriver

from litmus_sandbox._cli.main import main

_SET = """
var s = document.querySelector(arguments[0]);
s.value = arguments[1]; s.dispatchEvent(new Event(arguments[2]));
return [document.querySelector("[data-matching]").textContent,
        Array.from(document.querySelectorAll("tr[data-case-id]")).map(r => r.dataset.caseId)];
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium.driver() as d:
        yield d


def test_typing_deleting_and_switching_outcomes_keep_exact_matches(
    browser: WebDriver, tmp_path: Path
) -> None:
    b, c = large_suite(tmp_path, 1200)
    page, as_json = tmp_path / "r.html", tmp_path / "r.json"
    main(["gate", "--baseline", str(b), "--candidate", str(c), "--format", "json",
          "-o", str(as_json), "--html", str(page)])  # fmt: skip
    cases = json.loads(as_json.read_text())["cases"]
    open_page(browser, page)

    def expect(outcome: str, query: str) -> list[str]:
        return [
            x["case_id"]
            for x in cases
            if (not outcome or x["outcome"] == outcome) and query.lower() in x["case_id"].lower()
        ]

    steps = [("outcome", "IMPROVEMENT")]
    steps += [("search", "CASE-0001"[:i]) for i in range(1, 10)]  # narrowing, any case
    steps += [("search", "case-000"), ("search", "case-00"), ("outcome", ""), ("outcome", "PASS")]
    steps += [("search", "1"), ("search", "12"), ("search", "2"), ("search", "")]
    outcome = query = ""
    for what, value in steps:
        if what == "outcome":
            outcome = value
            count, rows = browser.execute_script(_SET, 'select[name="outcome"]', value, "change")
        else:
            query = value
            count, rows = browser.execute_script(_SET, 'input[name="search"]', value, "input")
        want = expect(outcome, query.strip())
        assert int(count) == len(want), (what, value)
        assert rows == want[: len(rows)], (what, value)
        assert bool(rows) == bool(want), (what, value)
    assert log(browser, "browser") == []
