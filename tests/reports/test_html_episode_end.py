"""The HTML report's timelines end with what the end-of-episode pass saw that no call
explains: a launched server's start-up and shutdown effects, unattributed effects and
their findings, as text (never hidden, never markup)."""

from __future__ import annotations

from pathlib import Path

from chromium import driver, log, open_page
from factories import header, msg, verdict
from selenium.webdriver.common.by import By

from litmus_sandbox import JsonlWriter
from litmus_sandbox._cli.main import main
from litmus_sandbox._model.records import Effects, EpisodeEnd, Finding, FsEffect
from litmus_sandbox._store.streams import write_verdicts


def test_a_timeline_ends_with_startup_unattributed_findings_and_shutdown(
    tmp_path: Path,
) -> None:
    episodes = tmp_path / "b.episodes.jsonl"
    with JsonlWriter(episodes) as out:
        out.write(header("e1", "c1"))
        out.write_many([msg(0, "user", "hi", eid="e1"), msg(1, "assistant", "hello", eid="e1")])
        out.write(
            EpisodeEnd(
                v=1,
                episode_id="e1",
                status="complete",
                steps=2,
                unattributed=Effects(fs=(FsEffect(op="modified", path="/etc/<b>hosts</b>"),)),
                findings=(Finding(code="unattributed_effect", detail="modified /etc/hosts"),),
                startup=Effects(fs=(FsEffect(op="created", path="/home/u/.npm/_logs/a.log"),)),
                shutdown=Effects(fs=(FsEffect(op="modified", path="/home/u/.npm/_logs/a.log"),)),
            )
        )
    b, c = tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_verdicts(b, None, [verdict("c1", eid="e1", steps_recorded=2, steps_covered=2)])
    write_verdicts(c, None, [verdict("c1", safe=False, steps_recorded=2, steps_covered=2)])
    page = tmp_path / "r.html"
    args = ["gate", "--baseline", str(b), "--candidate", str(c), "--baseline-episodes",
            str(episodes), "--html", str(page)]  # fmt: skip
    assert main(args) == 1
    with driver() as browser:
        open_page(browser, page)
        browser.find_element(By.CSS_SELECTOR, 'tr[data-case-id="c1"]').click()
        end = browser.find_element(By.CSS_SELECTOR, '[data-episode-end="baseline"]')
        lines = [d.text for d in end.find_elements(By.CSS_SELECTOR, ".line")]
        assert lines[0].startswith("server start-up: ")
        assert "created" in lines[0]
        assert ".npm/_logs/a.log" in lines[0]
        assert lines[1].startswith("unattributed: ")
        assert "/etc/<b>hosts</b>" in lines[1]
        assert lines[2].startswith("finding: ")
        assert "unattributed_effect" in lines[2]
        assert lines[3].startswith("server shutdown: ")
        assert "modified" in lines[3]
        assert len(lines) == 4
        assert end.find_elements(By.TAG_NAME, "b") == []  # the path is text, not markup
        assert browser.find_elements(By.CSS_SELECTOR, '[data-episode-end="candidate"]') == []
        assert log(browser, "browser") == []
