"""The HTML report in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, which ``python3 dev.py test`` installs when missing), driven by
selenium against the system driver: no console error, no network request, the counts of
``--format json``, filtering, search, the side-by-side view, and a 5,000-case page."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import chromium
import pytest
from chromium import log, open_page, requests
from html_suite import large_suite, make_suite
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from litmus_sandbox._cli.main import main
from litmus_sandbox._core.gate import OUTCOMES


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium.driver() as d:
        yield d


def _rows(browser: WebDriver) -> list[tuple[str, str]]:
    found = browser.execute_script(
        "return Array.from(document.querySelectorAll('tr[data-case-id]'))"
        ".map(r => [r.dataset.caseId, r.dataset.outcome])"
    )
    return [(a, b) for a, b in found]


def _more_than(drawn: int, table: WebElement) -> Callable[[WebDriver], bool]:
    """Until more than ``drawn`` rows are drawn, or all of them."""

    def done(d: WebDriver) -> bool:
        return len(_rows(d)) > drawn or table.get_attribute("data-rendered") == "all"

    return done


def _wait_rendered(browser: WebDriver) -> None:
    WebDriverWait(browser, 10).until(
        lambda d: d.find_element(By.ID, "cases").get_attribute("data-rendered") == "all"
    )


def test_report_loads_clean_and_matches_the_json_report(
    browser: WebDriver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = make_suite(tmp_path)
    page = tmp_path / "report.html"
    assert suite.gate("--format", "json", "-o", tmp_path / "r.json", html=page) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    open_page(browser, page)
    _wait_rendered(browser)
    errors = [e for e in log(browser, "browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    assert requests(browser) == [page.as_uri()], "nothing but the page itself is loaded"
    decision = browser.find_element(By.CSS_SELECTOR, "[data-decision]")
    assert decision.get_attribute("data-decision") == decision.text == report["decision"]
    for outcome in OUTCOMES:
        count = browser.find_element(By.CSS_SELECTOR, f'[data-count="{outcome}"]')
        assert int(count.text) == report["counts"][outcome]
    assert _rows(browser) == [(c["case_id"], c["outcome"]) for c in report["cases"]]
    remedy = browser.find_element(By.CSS_SELECTOR, '[data-reason-code="judge_mismatch"]')
    assert "rescore_baseline" in remedy.text

    # Filter by outcome, then search by part of a case id.
    Select(browser.find_element(By.CSS_SELECTOR, 'select[name="outcome"]')).select_by_value(
        "REGRESSION"
    )
    _wait_rendered(browser)
    assert _rows(browser) == [
        ("refuse-then-continue", "REGRESSION"),
        ("lock-picking", "REGRESSION"),
    ]
    search = browser.find_element(By.CSS_SELECTOR, 'input[name="search"]')
    search.send_keys("LOCK")
    _wait_rendered(browser)
    assert _rows(browser) == [("lock-picking", "REGRESSION")]
    Select(browser.find_element(By.CSS_SELECTOR, 'select[name="outcome"]')).select_by_value("")
    search.clear()
    search.send_keys("refuse")
    _wait_rendered(browser)
    assert [case for case, _ in _rows(browser)] == ["refuse-then-continue", "refuse-and-stop"]
    assert log(browser, "browser") == []


def test_a_case_opens_its_two_timelines_side_by_side(
    browser: WebDriver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = make_suite(tmp_path)
    page = tmp_path / "report.html"
    suite.gate(html=page)
    open_page(browser, page)
    _wait_rendered(browser)

    def detail(case: str) -> Any:
        browser.find_element(By.CSS_SELECTOR, f'tr[data-case-id="{case}"]').click()
        return browser.find_element(By.CSS_SELECTOR, f'[data-case-detail="{case}"]')

    box = detail("refuse-then-continue")
    base = box.find_element(By.CSS_SELECTOR, '[data-side="baseline"]')
    cand = box.find_element(By.CSS_SELECTOR, '[data-side="candidate"]')
    b_steps = base.find_elements(By.CSS_SELECTOR, "[data-step-index]")
    c_steps = cand.find_elements(By.CSS_SELECTOR, "[data-step-index]")
    assert [s.get_attribute("data-step-index") for s in b_steps] == ["0", "1"]
    assert [s.get_attribute("data-step-index") for s in c_steps] == ["0", "1", "2", "3"]
    # Side by side: step N of each side on one line; the candidate's extra steps marked.
    assert b_steps[1].location["y"] == c_steps[1].location["y"]
    assert b_steps[0].location["x"] < c_steps[0].location["x"]
    assert [s.get_attribute("data-only") for s in c_steps] == [None, None, "candidate", "candidate"]
    assert "refusal" in c_steps[1].text
    assert "after refusal" in c_steps[2].text
    assert "write_file" in c_steps[3].text
    assert "real" in c_steps[3].text
    evidence = [s.get_attribute("data-evidence") for s in c_steps]
    assert evidence == [
        None,
        None,
        "rule harmful-instructions (claimed)",
        "rule payload-written (requested)",
    ]
    assert b_steps[0].get_attribute("data-evidence") is None

    # The first step whose verdict differs, highlighted on both sides.
    box = detail("lock-picking")
    marked = box.find_elements(By.CSS_SELECTOR, "[data-first-diff]")
    assert [(m.get_attribute("data-step-index")) for m in marked] == ["1", "1"]
    # A click again closes it.
    browser.find_element(By.CSS_SELECTOR, 'tr[data-case-id="lock-picking"]').click()
    assert browser.find_elements(By.CSS_SELECTOR, '[data-case-detail="lock-picking"]') == []
    assert log(browser, "browser") == []


def test_a_5000_case_page_filters_opens_and_draws_every_row(
    browser: WebDriver, tmp_path: Path
) -> None:
    b, c = large_suite(tmp_path, 5000)
    page, as_json = tmp_path / "large.html", tmp_path / "large.json"
    code = main(
        [
            "gate",
            "--baseline",
            str(b),
            "--candidate",
            str(c),
            "--format",
            "json",
            "-o",
            str(as_json),
            "--html",
            str(page),
        ]
    )
    assert code in (1, 4)
    counts = json.loads(as_json.read_text())["counts"]
    open_page(browser, page)
    Select(browser.find_element(By.CSS_SELECTOR, 'select[name="outcome"]')).select_by_value(
        "IMPROVEMENT"
    )
    WebDriverWait(browser, 5).until(
        lambda d: (
            d.find_element(By.CSS_SELECTOR, "[data-matching]").text == str(counts["IMPROVEMENT"])
        )
    )
    first = browser.find_element(By.CSS_SELECTOR, "tr[data-case-id]")
    assert first.get_attribute("data-outcome") == "IMPROVEMENT"
    first.click()
    browser.find_element(
        By.CSS_SELECTOR, f'[data-case-detail="{first.get_attribute("data-case-id")}"]'
    )
    # How fast: bench/html_filter_bench.py measures it (a test asserts behaviour only).
    # The rows are drawn lazily, a chunk at a time as the reader scrolls: all in the end.
    Select(browser.find_element(By.CSS_SELECTOR, 'select[name="outcome"]')).select_by_value("")
    assert 0 < len(_rows(browser)) < 5000
    table = browser.find_element(By.ID, "cases")
    while table.get_attribute("data-rendered") != "all":
        drawn = len(_rows(browser))
        browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        WebDriverWait(browser, 5).until(_more_than(drawn, table))
    assert len(_rows(browser)) == 5000
    assert log(browser, "browser") == []
