"""The HTML report calls out the cases still unsafe (unsafe on both sides: a PASS), and
says where the candidate stands against ``--max-unsafe``: in a real headless Chromium."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import chromium
import msgspec
import pytest
from chromium import log, open_page
from factories import legacy, verdict
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from litmus_sandbox._cli.main import main
from litmus_sandbox._store.streams import write_verdicts


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium.driver() as d:
        yield d


def _suite(folder: Path) -> tuple[Path, Path]:
    """Native and legacy cases: two still unsafe, one regression, plain passes."""
    b, c = folder / "b.jsonl", folder / "c.jsonl"
    write_verdicts(
        b,
        None,
        [verdict("n-still", False), verdict("n-pass"), verdict("n-reg")],
    )
    write_verdicts(
        c,
        None,
        [verdict("n-still", False), verdict("n-pass"), verdict("n-reg", False)],
    )
    line = msgspec.json.encode(legacy("l-still", False)) + b"\n"
    for path in (b, c):
        with path.open("ab") as f:
            f.write(line)
    return b, c


def test_rows_still_unsafe_are_marked_and_counted(
    browser: WebDriver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b, c = _suite(tmp_path)
    page, out = tmp_path / "r.html", tmp_path / "r.json"
    args = ["gate", "--baseline", str(b), "--candidate", str(c), "--format", "json"]
    assert main([*args, "-o", str(out), "--html", str(page), "--max-unsafe", "50%"]) == 1
    report = json.loads(out.read_text())
    assert report["statistics"]["still_unsafe"] == 2
    open_page(browser, page)
    WebDriverWait(browser, 10).until(
        lambda d: d.find_element(By.ID, "cases").get_attribute("data-rendered") == "all"
    )
    marked = browser.execute_script(
        "return Array.from(document.querySelectorAll('tr[data-still-unsafe=\"true\"]'))"
        ".map(r => [r.dataset.caseId, r.dataset.outcome, getComputedStyle(r).backgroundColor,"
        " r.textContent])"
    )
    assert sorted(m[0] for m in marked) == ["l-still", "n-still"]
    assert all(m[1] == "PASS" and "still unsafe" in m[3] for m in marked)
    plain = browser.execute_script(
        "var r = document.querySelector('tr[data-case-id=\"n-pass\"]');"
        "return [r.hasAttribute('data-still-unsafe'), getComputedStyle(r).backgroundColor]"
    )
    assert plain[0] is False
    assert {m[2] for m in marked} != {plain[1]}, "a still unsafe row looks like any other"
    count = browser.find_element(By.CSS_SELECTOR, "[data-still-unsafe-count]")
    assert count.text == "2"
    budget = browser.find_element(By.CSS_SELECTOR, "[data-unsafe-budget]")
    # 3 unsafe candidates of 4 comparable cases: past 50%.
    assert budget.get_attribute("data-exceeded") == "true"
    assert "3 of 4 comparable cases" in budget.text
    assert log(browser, "browser") == []


def test_no_budget_line_without_the_flag(tmp_path: Path) -> None:
    b, c = _suite(tmp_path)
    page = tmp_path / "r.html"
    args = ["gate", "--baseline", str(b), "--candidate", str(c), "-o", str(tmp_path / "t")]
    assert main([*args, "--html", str(page)]) == 1
    text = page.read_text()
    assert "data-unsafe-budget" not in text
    assert "<b data-still-unsafe-count>2</b>" in text
