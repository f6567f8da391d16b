"""Headless Chromium for the HTML report's tests: the driver fixture and log readers.

Debian's ``chromium`` and ``chromium-driver`` (``python3 dev.py test`` installs them when
missing), driven by selenium against the system driver.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@contextmanager
def driver() -> Iterator[WebDriver]:
    """A headless Chromium, quit at the end of the block (a module's ``browser`` fixture)."""
    if CHROMIUM is None or DRIVER is None:
        pytest.fail(
            "the HTML report's tests need Chromium and its driver: apt-get install chromium "
            "chromium-driver (python3 dev.py test installs them on Debian and Ubuntu)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def log(browser: WebDriver, kind: str) -> list[dict[str, Any]]:
    """The browser's log of ``kind`` since the last call (``browser``: the console)."""
    entries: list[dict[str, Any]] = browser.get_log(kind)  # type: ignore[no-untyped-call]  # selenium leaves it untyped
    return entries


def open_page(browser: WebDriver, page: Path) -> None:
    log(browser, "browser")  # drop what an earlier page logged
    log(browser, "performance")
    browser.get(page.as_uri())


def requests(browser: WebDriver) -> list[str]:
    urls = []
    for entry in log(browser, "performance"):
        message: dict[str, Any] = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
