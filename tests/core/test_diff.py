"""``diff_episodes`` and ``litmus-sandbox diff``: step-by-step comparison of two episodes."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from factories import call, episode, msg

from litmus_sandbox import (
    Effects,
    EgressEvent,
    Episode,
    JsonlWriter,
    ReplaySource,
    diff_episodes,
)
from litmus_sandbox._cli.main import main


def base(eid: str = "a", **changes: object) -> Episode:
    steps = [
        msg(0, "user", "find cats", eid=eid, at=1.0),
        call(1, "search", "3 hits", eid=eid, args={"q": "cats", "n": 1}, started_at=2.0),
        msg(2, "assistant", "found 3", eid=eid),
    ]
    ep = episode(steps, eid=eid, agent="bot@1")
    return msgspec.structs.replace(ep, **changes) if changes else ep


def save(path: Path, *episodes: Episode) -> Path:
    with JsonlWriter(path) as w:
        for ep in episodes:
            w.write(ep.header)
            for s in ep.steps:
                w.write(s)
            if ep.end is not None:
                w.write(ep.end)
    return path


def test_ids_timestamps_and_number_spelling_never_count() -> None:
    a = base("a")
    b_steps = list(base("b").steps)
    b_steps[1] = msgspec.structs.replace(
        b_steps[1], args={"n": 1.0, "q": "cats"}, started_at=99.0, call_id="other", meta={"x": 1}
    )
    b = msgspec.structs.replace(base("b"), steps=tuple(b_steps))
    d = diff_episodes(a, b)
    assert d.identical, d.changes


def test_every_kind_of_change_is_reported_by_category() -> None:
    a = base("a")
    steps = list(base("b").steps)
    steps[0] = msgspec.structs.replace(steps[0], text="find dogs")
    steps[1] = msgspec.structs.replace(
        steps[1],
        args={"q": "dogs", "n": 1},
        shown=msgspec.structs.replace(steps[1].shown, is_error=True),  # type: ignore[union-attr]
        fidelity="replayed",
        source=ReplaySource(episode_id="r", step=1),
        effects=Effects(egress=(EgressEvent(host="api.example", decision="deny"),)),
    )
    steps.append(call(3, "send", eid="b"))
    b = msgspec.structs.replace(base("b"), steps=tuple(steps), end=None)
    d = diff_episodes(a, b)
    got = {(c.step, c.category, c.field) for c in d.changes}
    assert got == {
        (0, "message", "text"),
        (1, "call", "args"),
        (1, "result", "is_error"),
        (1, "fidelity", "fidelity"),
        (1, "fidelity", "source"),
        (1, "effects", "egress"),
        (3, "step", "only_in_b"),
        (None, "end", "status"),
    }
    args = next(c for c in d.changes if c.field == "args")
    assert args.paths == ("$.q",)
    assert d.without("fidelity", "effects").categories() == {
        "message",
        "call",
        "result",
        "step",
        "end",
    }
    with pytest.raises(ValueError, match="unknown diff categories"):
        diff_episodes(a, b, ignore=["colour"])


def test_a_message_against_a_call_is_a_step_type_change() -> None:
    a = base("a")
    b = msgspec.structs.replace(base("b"), steps=(*base("b").steps[:2], call(2, "search", eid="b")))
    (change,) = diff_episodes(a, b).changes
    assert (change.step, change.category, change.field) == (2, "step", "type")


def test_cli_compares_two_files_and_exits_by_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = save(tmp_path / "a.jsonl", base("a"))
    same = save(tmp_path / "same.jsonl", base("s"))
    steps = list(base("b").steps)
    steps[1] = msgspec.structs.replace(steps[1], args={"q": "dogs", "n": 1})
    b = save(tmp_path / "b.jsonl", msgspec.structs.replace(base("b"), steps=tuple(steps)))
    assert main(["diff", str(a), str(same)]) == 0
    assert "identical" in capsys.readouterr().out
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert 'step 1   call      args         $.q: "cats" -> "dogs"' in out
    assert main(["diff", str(a), str(b), "--ignore", "call", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["identical"] is True
    assert report["pairs"][0]["changes"] == []


def test_cli_selects_episodes_and_pairs_runs_by_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_a = save(
        tmp_path / "run_a.jsonl",
        base("a1"),
        msgspec.structs.replace(
            base("a2"), header=msgspec.structs.replace(base("a2").header, case_id="c2")
        ),
    )
    run_b = save(tmp_path / "run_b.jsonl", base("b1"))
    assert main(["diff", f"{run_a}#a1", str(run_b)]) == 0
    assert main(["diff", f"{run_a}#c1", str(run_b)]) == 0  # a case id selects too
    capsys.readouterr()
    assert main(["diff", str(run_a), str(run_b), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["only_in_a"] == [{"case_id": "c2", "episode_id": "a2"}]
    assert report["pairs"][0]["identical"] is True
    assert main(["diff", f"{run_a}#nope", str(run_b)]) == 2
    assert "no episode or case with id 'nope'" in capsys.readouterr().err
    twice = save(tmp_path / "twice.jsonl", base("t1"), base("t2"))
    assert main(["diff", str(twice), str(run_a)]) == 2
    assert "select one with FILE#EPISODE_ID" in capsys.readouterr().err
