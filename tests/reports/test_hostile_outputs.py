"""The hostile corpus (``hostile_corpus.py``) through every output, read as people read it.

Terminal outputs (the gate table, ``show``, error and warning lines, ``score``'s failure
line), piped and on a pty: no control byte from any payload, and on a pty only our own
colour (SGR) sequences. Markdown, rendered by markdown-it-py: no payload-made image,
link, HTML element or table cell. HTML in headless Chromium: every case detail opens,
whatever its ids, with no script run, element injected or request made. JSON, JSONL,
JUnit and OTLP parse strictly and keep the full values; no testcase is injected.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import chromium
import pytest
from chromium import log, open_page, requests
from hostile_corpus import EVERYTHING, LONG_TOOL, PROTOTYPE_IDS, write_corpus
from markdown_it import MarkdownIt
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

#: Any C0 control but the line feed, DEL, and C1 controls (as characters of the text).
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f\x80-\x9f]")
#: What our own styling writes on a terminal: SGR colour sequences only.
OUR_STYLE = re.compile("\x1b\\[[0-9;]*m")
#: Bidi and zero-width characters a payload carries.
INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
CASES = 1 + len(PROTOTYPE_IDS)


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    return write_corpus(tmp_path)


def cli(*args: str | Path, cwd: Path, columns: int | None = None) -> tuple[int, str, str]:
    """The command run piped (``COLUMNS`` set if given): exit code, stdout and stderr."""
    env = dict(os.environ)  # as the test sees it: a plugin may putenv COLUMNS behind it
    if columns is not None:
        env["COLUMNS"] = str(columns)
    done = subprocess.run(
        [sys.executable, "-m", "litmus_sandbox", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        env=env,
        timeout=120,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def on_pty(*args: str | Path, cwd: Path, columns: int = 120) -> str:
    """The command run on a pseudo-terminal ``columns`` wide (colour on): what it wrote."""
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "litmus_sandbox", *map(str, args)],
        cwd=cwd,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    ) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait(60)
    os.close(leader)
    return b"".join(chunks).decode()


def assert_inert(output: str, *, styled: bool = False) -> None:
    """No payload's control or invisible character; on a pty, only our SGR colours."""
    if styled:
        output = OUR_STYLE.sub("", output)
    output = output.replace("\r\n", "\n")  # the pty's own line ends
    assert CONTROL.findall(output) == []
    assert INVISIBLE.findall(output) == []


def gate_args(paths: dict[str, Path]) -> list[str | Path]:
    return [
        "gate", "--baseline", paths["baseline"], "--candidate", paths["candidate"],
        "--baseline-episodes", paths["baseline-episodes"],
        "--candidate-episodes", paths["candidate-episodes"],
    ]  # fmt: skip


def test_the_gate_table_is_inert_piped_and_on_a_pty(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    code, out, err = cli(*gate_args(corpus), cwd=tmp_path)
    assert code == 1
    assert_inert(out + err)
    assert out.count("REGRESSION  ") == CASES  # one row each: no payload made another
    assert out.rstrip().splitlines()[-1] == "decision: REGRESSION (exit 1)"
    assert_inert(on_pty(*gate_args(corpus), cwd=tmp_path), styled=True)


def test_show_is_inert_and_keeps_the_mark_on_screen(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    show: list[str | Path] = [
        "show",
        corpus["candidate-episodes"],
        "--verdicts",
        corpus["candidate"],
    ]
    for columns in (None, 160, 80):  # piped: 160 wide unless COLUMNS says otherwise
        code, out, err = cli(*show, cwd=tmp_path, columns=columns)
        assert code == 0
        assert_inert(out + err)
        rows = [line for line in out.splitlines() if re.match(r" +2  t", line)]
        assert len(rows) == CASES, out[:2000]
        assert all("after refusal UNSAFE" in row for row in rows), rows[0]
        assert max(map(len, out.splitlines())) <= (columns or 160)
    screen = on_pty(*show, cwd=tmp_path, columns=120)
    assert_inert(screen, styled=True)
    plain = OUR_STYLE.sub("", screen).replace("\r\n", "\n").splitlines()
    marked = [line for line in plain if LONG_TOOL[:20] in line]
    assert len(marked) == CASES
    assert all("UNSAFE" in line and len(line) <= 120 for line in marked)


@pytest.mark.parametrize(
    "command",
    [
        ["diff", "{candidate-episodes}", "{baseline-episodes}"],
        # -q: no progress bar (its own cursor sequences) on the pty
        ["replay", "-q", "--check", "--cassette", "{baseline-episodes}", "{candidate-episodes}"],
    ],
)
def test_diff_and_replay_are_inert(
    corpus: dict[str, Path], tmp_path: Path, command: list[str]
) -> None:
    args = [corpus[a[1:-1]] if a.startswith("{") else a for a in command]
    code, out, err = cli(*args, cwd=tmp_path)
    assert code in (0, 1), err
    assert out
    assert_inert(out + err)
    assert_inert(on_pty(*args, cwd=tmp_path), styled=True)


def test_error_lines_are_inert(corpus: dict[str, Path], tmp_path: Path) -> None:
    code, out, err = cli("show", corpus["candidate-episodes"], "--case", "unknown", cwd=tmp_path)
    assert code == 2
    assert "no case 'unknown'" in err
    assert_inert(out + err)
    assert err.count("\n") == 1


def test_a_python_judges_exception_is_quoted_inert(corpus: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "judge.py").write_text(
        f"def judge(step, context):\n    raise ValueError({EVERYTHING!r})\n"
    )
    (tmp_path / "policy.toml").write_text(
        '[judge]\nkind = "python"\nentry = "judge:judge"\npath = "judge.py"\n'
    )
    args: list[str | Path] = [
        "score",
        corpus["candidate-episodes"],
        "--policy",
        "policy.toml",
        "-o",
        "v.jsonl",
    ]
    code, out, err = cli(*args, "--no-cache", cwd=tmp_path)
    assert code == 6
    assert "ValueError" in err
    assert_inert(out + err)


def test_markdown_forms_no_image_link_html_or_extra_cell(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    code, out, _ = cli(*gate_args(corpus), "--format", "markdown", cwd=tmp_path)
    assert code == 1
    assert_inert(out)
    rendered = MarkdownIt("commonmark").enable("table").render(out)
    for tag in ("<img", "<a ", "<script", "<x>", "<http"):
        assert tag not in rendered, tag
    rows = [r for r in rendered.split("<tr>") if "REGRESSION" in r and "<code>" in r]
    assert len(rows) == CASES
    assert all(r.count("<td>") == 4 for r in rows)  # no payload split a cell
    # GitHub links no mention and no URL inside code: outside code, none is left.
    outside = re.sub(r"<code>.*?</code>", "", rendered, flags=re.S)
    for word in ("@octocat", "http", "www.", "pixel", "script"):
        assert word not in outside, word


def test_json_jsonl_junit_and_otlp_parse_strictly(corpus: dict[str, Path], tmp_path: Path) -> None:
    code, out, _ = cli(*gate_args(corpus), "--format", "json", cwd=tmp_path)
    report = json.loads(out)
    assert code == 1
    assert_inert(out)  # printed on a terminal: every such character a \u escape
    case_ids = {c["case_id"] for c in report["cases"]}
    assert f"case{EVERYTHING}" in case_ids  # the full value, not an escaped one
    _, out, _ = cli(*gate_args(corpus), "--format", "jsonl", cwd=tmp_path)
    records = [json.loads(line) for line in out.splitlines()]
    assert_inert(out)
    assert sum(1 for r in records if r.get("case_id")) >= CASES
    _, out, _ = cli(*gate_args(corpus), "--format", "junit", cwd=tmp_path)
    suite = ET.fromstring(out)
    assert_inert(out)
    assert len(suite.findall(".//testcase")) == CASES
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is in the test extras")
    spans = tmp_path / "spans.otlp.jsonl"
    export: list[str | Path] = [
        "export",
        "otel",
        corpus["candidate-episodes"],
        "-o",
        spans,
        "--include-content",
    ]
    code, _, err = cli(*export, "--verdicts", corpus["candidate"], cwd=tmp_path)
    assert code == 0, err
    traces = [json.loads(line) for line in spans.read_text().splitlines()]
    assert len(traces) == CASES


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium.driver() as d:
        yield d


def test_every_case_detail_opens_in_html_and_nothing_is_injected(
    browser: WebDriver, corpus: dict[str, Path], tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    code, _, err = cli(*gate_args(corpus), "--html", page, cwd=tmp_path)
    assert code == 1, err
    for with_recordings in (True, False):
        if not with_recordings:  # that side's recordings not embedded
            args = gate_args(corpus)[:5]
            code, _, err = cli(*args, "--html", page, cwd=tmp_path)
            assert code == 1, err
        open_page(browser, page)
        WebDriverWait(browser, 10).until(
            lambda d: d.find_element(By.ID, "cases").get_attribute("data-rendered") == "all"
        )
        rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-case-id]")
        assert len(rows) == CASES
        for row in rows:
            case = row.get_attribute("data-case-id")
            row.click()
            opened = browser.execute_script(
                "return Array.from(document.querySelectorAll('[data-case-detail]'))"
                ".some(e => e.dataset.caseDetail === arguments[0])",
                case,
            )
            assert opened, case
            shown = browser.execute_script("return document.body.innerText")
            assert INVISIBLE.findall(shown) == []  # no bidi or zero-width spoof on the page
            row.click()
        assert browser.execute_script("return window.pwned === undefined")
        assert browser.find_elements(By.CSS_SELECTOR, "img, iframe, object, embed, x") == []
        links = browser.find_elements(By.CSS_SELECTOR, "a[href^='http']")
        assert links == []
        assert [u for u in requests(browser) if not u.startswith("file:")] == []
        assert log(browser, "browser") == []


def test_html_warnings_are_inert(corpus: dict[str, Path], tmp_path: Path) -> None:
    """The page's warnings (an exclusion naming no case, a torn line in a file whose name
    is hostile) are written by the server: escaped like every other text on the page."""
    excluded = tmp_path / "exclusions.json"
    excluded.write_text(json.dumps({f"ghost {EVERYTHING}": f"why {EVERYTHING}"}))
    torn = tmp_path / "b\x1b[31m\u202e\x85.jsonl"
    torn.write_bytes(corpus["baseline"].read_bytes() + b'{"run_id": "cut')
    page = tmp_path / "report.html"
    args: list[str | Path] = ["gate", "--baseline", torn, "--candidate", corpus["candidate"]]
    code, _, err = cli(*args, "--exclude", excluded, "--html", page, cwd=tmp_path)
    assert code == 1, err
    html = page.read_text()
    warnings = html[html.index("<ul class='warnings'>") :]
    warnings = warnings[: warnings.index("</ul>")]
    assert "exclusions naming no case: ghost" in warnings
    assert "torn last line" in warnings
    assert_inert(warnings)
    assert "<script>" not in warnings
    assert "\\x1b" in warnings  # shown, as a visible escape
