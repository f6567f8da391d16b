"""The commands' main paths, run for real from the base install (no extra).

One demo folder is made per test module (``demo``), then each command reads it as a
user would: ``score``, ``gate`` in every format and with ``--html``, ``show``,
``rebaseline``, ``replay``, ``diff`` and ``import openai-chat``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from installed.runner import Profile

#: A cold profile venv is made inside the first test that needs it (dev.py makes them
#: before pytest, so a warm run never waits here).
pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def demo(installed: Callable[[str], Profile]) -> tuple[Profile, Path]:
    """The base profile and the folder its ``demo --out`` wrote."""
    profile = installed("base")
    out = profile.cwd / "demo"
    out.mkdir()
    done = profile.run("demo", "--out", out)
    assert "NEEDS_REBASELINE" in done.stdout or "REGRESSION" in done.stdout
    for name in ("baseline.episodes.jsonl", "candidate.episodes.jsonl", "policy.toml"):
        assert (out / name).is_file(), name
    return profile, out


def test_score_gate_every_format_and_the_html_report(demo: tuple[Profile, Path]) -> None:
    profile, out = demo
    profile.run(
        "score",
        out / "candidate.episodes.jsonl",
        "--policy",
        out / "policy.toml",
        "-o",
        "candidate.verdicts.jsonl",
    )
    profile.run(
        "rebaseline",
        "--episodes",
        out / "baseline.episodes.jsonl",
        "--like",
        "candidate.verdicts.jsonl",
        "-o",
        "baseline.verdicts.jsonl",
    )
    sides: list[str | Path] = [
        "--baseline",
        "baseline.verdicts.jsonl",
        "--candidate",
        "candidate.verdicts.jsonl",
        "--baseline-episodes",
        out / "baseline.episodes.jsonl",
        "--candidate-episodes",
        out / "candidate.episodes.jsonl",
    ]
    table = profile.run("gate", *sides, expect=1).stdout
    assert "REGRESSION" in table
    assert "IMPROVEMENT" in table
    report = json.loads(profile.run("gate", *sides, "--format", "json", expect=1).stdout)
    assert report["decision"] == "REGRESSION"
    lines = profile.run("gate", *sides, "--format", "jsonl", expect=1).stdout.splitlines()
    assert all(json.loads(line) for line in lines)
    assert len(lines) > 1
    junit = ET.fromstring(profile.run("gate", *sides, "--format", "junit", expect=1).stdout)
    assert junit.find(".//failure") is not None
    markdown = profile.run("gate", *sides, "--format", "markdown", expect=1).stdout
    assert "REGRESSION" in markdown
    profile.run("gate", *sides, "--html", "report.html", expect=1)
    html = (profile.cwd / "report.html").read_text()
    assert "data-outcome" in html
    assert "<script" in html
    legacy: list[str | Path] = ["--baseline", out / "baseline-legacy.verdicts.jsonl"]
    naive = profile.run("gate", *legacy, "--candidate", "candidate.verdicts.jsonl", expect=4)
    assert "truncation_policy_mismatch" in naive.stdout


def test_show_replay_and_diff(demo: tuple[Profile, Path]) -> None:
    profile, out = demo
    episodes = out / "candidate.episodes.jsonl"
    shown = profile.run(
        "show",
        episodes,
        "--case",
        "refuse-then-continue",
        "--verdicts",
        out / "candidate.verdicts.jsonl",
    ).stdout
    assert "refuse-then-continue" in shown
    checked = profile.run("replay", "--check", "--cassette", episodes, episodes, expect=(0, 1))
    assert checked.stdout
    same = profile.run("diff", episodes, episodes)
    assert same.stdout
    profile.run("diff", out / "baseline.episodes.jsonl", episodes, expect=1)


def test_import_openai_chat_then_score(installed: Callable[[str], Profile]) -> None:
    profile = installed("base")
    transcript = {
        "case_id": "weather",
        "agent": "loop@1",
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
        ],
    }
    (profile.cwd / "chats.jsonl").write_text(json.dumps(transcript) + "\n")
    profile.run("import", "openai-chat", "chats.jsonl", "-o", "episodes.jsonl")
    (profile.cwd / "policy.toml").write_text('[judge]\nkind = "rules"\n')
    profile.run("score", "episodes.jsonl", "--policy", "policy.toml", "-o", "v.jsonl")
    written = [json.loads(line) for line in (profile.cwd / "v.jsonl").read_text().splitlines()]
    (verdict,) = [r for r in written if r["kind"] == "verdict"]
    assert verdict["case_id"] == "weather"
    assert verdict["safe"] is True
