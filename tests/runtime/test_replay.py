"""Replaying recorded episodes in process: hits, misses, on_miss modes, determinism."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from litmus_sandbox import (
    Cassette,
    ConfigError,
    EpisodeRecorder,
    Policy,
    RecordingWarning,
    ReplayOptions,
    Sandbox,
    ToolCallStep,
    diff_episodes,
    read_episodes,
    report_from_log,
)

pytestmark = pytest.mark.anyio


def lookup(key: str, **_ignored: Any) -> dict[str, Any]:
    return {"key": key, "value": len(key) * 7}


async def decide(value: int) -> str:
    return "high" if value > 20 else "low"


TOOLS: dict[str, Callable[..., Any]] = {"lookup": lookup, "decide": decide}


async def scripted_agent(ep: EpisodeRecorder, keys: list[str]) -> None:
    """A deterministic agent: what it does next depends only on what tools show it."""
    ep.message("user", f"look up {', '.join(keys)}")
    for key in keys:
        found = await ep.call("lookup", key=key)
        if found.is_error:
            ep.message("assistant", f"{key}: lookup failed")
            continue
        value = found.value["value"]
        if value > 20:
            verdict = await ep.call("decide", value=value)
            ep.message("assistant", f"{key}: {verdict.text}")
        else:
            ep.message("assistant", f"{key} is small, no decision needed")
    ep.message("assistant", "done")


async def run(
    tmp_path: Path,
    out: str,
    keys: list[str],
    *,
    policy: Policy | None = None,
    replay: Any = None,
    case: str = "c1",
    tools: dict[str, Callable[..., Any]] | None = None,
) -> Sandbox:
    sandbox = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / out,
        policy=policy,
        tools=TOOLS if tools is None else tools,
        replay=replay,
    )
    async with sandbox, sandbox.episode(case, agent="scripted@1") as ep:
        await scripted_agent(ep, keys)
    return sandbox


def tool_calls(path: Path) -> list[ToolCallStep]:
    (ep,) = read_episodes([path])
    return [s for s in ep.steps if isinstance(s, ToolCallStep)]


async def test_rerun_against_its_own_recording_is_the_same_episode(tmp_path: Path) -> None:
    """A deterministic agent replayed against its own recording produces the same
    episode, except ids, timestamps and the fidelity tags."""
    keys = ["a", "abcd", "xyz", "abcd"]
    await run(tmp_path, "rec.jsonl", keys)
    sandbox = await run(
        tmp_path,
        "replay.jsonl",
        keys,
        policy=Policy(default="replay", replay={"order": "strict"}),
        replay=[tmp_path / "rec.jsonl"],
        tools={},  # nothing real is reachable: every result must come from the recording
    )
    (rec,) = read_episodes([tmp_path / "rec.jsonl"])
    (new,) = read_episodes([tmp_path / "replay.jsonl"])
    assert diff_episodes(rec, new, ignore=["fidelity"]).identical
    changes = diff_episodes(rec, new)
    assert changes.categories() == {"fidelity"}
    fields = {(c.field, c.a, c.b) for c in changes.changes if c.field == "fidelity"}
    assert fields == {("fidelity", "real", "replayed")}
    sources = [
        (s.source.episode_id, s.source.step)
        for s in tool_calls(tmp_path / "replay.jsonl")
        if s.source
    ]
    assert sources == [(rec.episode_id, s.index) for s in rec.steps if isinstance(s, ToolCallStep)]
    report = sandbox.replay_reports[new.episode_id]
    assert not report.diverged
    assert report.calls == report.served == 7  # 4 lookups, 3 decisions
    logged = report_from_log(new)
    assert logged is not None
    assert not logged.diverged


async def test_a_miss_is_an_error_the_agent_sees_and_a_divergence(tmp_path: Path) -> None:
    await run(tmp_path, "rec.jsonl", ["abcd", "a"])
    sandbox = await run(
        tmp_path,
        "new.jsonl",
        ["abcd", "abce"],
        policy=Policy({"lookup": "replay", "decide": "replay"}),
        replay=[tmp_path / "rec.jsonl"],
    )
    hit, decided, miss = tool_calls(tmp_path / "new.jsonl")
    assert (hit.fidelity, decided.fidelity) == ("replayed",) * 2
    assert hit.source is not None
    # Nothing recorded served the miss: the sandbox refused it and said so (no source).
    assert miss.fidelity == "denied"
    assert miss.source is None
    assert miss.shown.is_error
    assert miss.actual is not None
    assert miss.actual.outcome == "not_run"
    divergence = miss.meta["replay"]["divergence"]
    assert divergence["reason"] == "no_match"
    assert divergence["step"] == miss.index  # the record names the step, as the report does
    assert divergence["closest"][0]["differs"] == ["$.key"]
    (new,) = read_episodes([tmp_path / "new.jsonl"])
    report = sandbox.replay_reports[new.episode_id]
    assert report.first is not None
    assert report.first.step == miss.index
    assert [(u.tool, u.args) for u in report.unused] == [("lookup", {"key": "a"})]
    # The episode carries the same report: replay --check can read it from the file.
    logged = report_from_log(new)
    assert logged is not None
    assert logged.divergences == report.divergences
    assert logged.unused == report.unused
    assert new.end is not None
    assert new.end.meta["replay"]["served"] == 2


async def test_spy_runs_misses_for_real_and_record_new_grows_the_cassette(
    tmp_path: Path,
) -> None:
    cassette_path = tmp_path / "rec.jsonl"
    await run(tmp_path, "rec.jsonl", ["abcd"])
    spy = Policy(default="replay", replay={"on_miss": "spy"})
    await run(tmp_path, "spy.jsonl", ["abcd", "zz"], policy=spy, replay=[cassette_path])
    _, _, spied = tool_calls(tmp_path / "spy.jsonl")
    assert spied.fidelity == "real"
    assert spied.shown.structured == {"key": "zz", "value": 14}
    assert spied.meta["replay"]["on_miss"] == "spy"
    assert len(read_episodes([cassette_path])) == 1  # spy does not grow the cassette

    grow = Policy(default="replay", replay={"on_miss": "record-new"})
    await run(tmp_path, "grow.jsonl", ["abcd", "zz"], policy=grow, replay=[cassette_path])
    recorded, supplement = read_episodes([cassette_path])
    assert supplement.header.meta["replay"]["supplements"] == [recorded.episode_id]
    assert supplement.complete
    assert report_from_log(supplement) is None  # cassette growth, not a replay run
    assert [s.tool for s in supplement.steps if isinstance(s, ToolCallStep)] == ["lookup"]
    _, _, new_call = tool_calls(tmp_path / "grow.jsonl")
    assert new_call.meta["replay"]["recorded_as"] == {
        "episode_id": supplement.episode_id,
        "step": 0,
    }

    # The next replay serves the new call from the grown cassette, with nothing real.
    strict = Policy(default="replay")
    sandbox = await run(
        tmp_path, "again.jsonl", ["abcd", "zz"], policy=strict, replay=[cassette_path], tools={}
    )
    *_, served = tool_calls(tmp_path / "again.jsonl")
    assert served.source is not None
    assert (served.source.episode_id, served.source.step) == (supplement.episode_id, 0)
    assert not next(iter(sandbox.replay_reports.values())).diverged


async def test_policy_file_replay_options_per_tool_and_default(tmp_path: Path) -> None:
    counter = itertools.count()

    def stamp(text: str, request_id: str) -> str:
        return f"{text}#{next(counter)}"

    tools: dict[str, Callable[..., Any]] = {"stamp": stamp, "lookup": lookup}

    async def agent(ep: EpisodeRecorder, rid: str) -> list[str]:
        out = [(await ep.call("stamp", text="x", request_id=f"{rid}-1")).text]
        out.append((await ep.call("lookup", key="k", _meta={"trace": rid})).text)
        out.append((await ep.call("stamp", text="x", request_id=f"{rid}-2")).text)
        return out

    rec = Sandbox(root=tmp_path / "root", episodes=tmp_path / "rec.jsonl", tools=tools)
    async with rec, rec.episode("c1") as ep:
        recorded = await agent(ep, "first")
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(
        "[tools]\n"
        'default = "replay"\n'
        'stamp = { mode = "replay", order = "strict", ignore = ["$.request_id"] }\n'
        "[replay]\n"
        'ignore = ["$._meta"]\n'
    )
    policy = Policy.from_file(policy_file)
    assert policy.replay_options("stamp") is not None
    assert policy.replay_options("stamp").ignore == ("$._meta", "$.request_id")  # type: ignore[union-attr]
    new = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "new.jsonl",
        policy=policy_file,
        replay=[tmp_path / "rec.jsonl"],
    )
    async with new, new.episode("c1") as ep:
        replayed = await agent(ep, "second")
    assert replayed == recorded == ["x#0", '{"key":"k","value":7}', "x#1"]


async def test_epochs_replay_their_own_recorded_epoch(tmp_path: Path) -> None:
    counter = itertools.count()

    def roll() -> int:
        return next(counter)

    rec = Sandbox(root=tmp_path / "root", episodes=tmp_path / "rec.jsonl", tools={"roll": roll})
    async with rec:
        for _ in range(2):
            async with rec.episode("dice") as ep:
                await ep.call("roll")
    new = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "new.jsonl",
        policy=Policy(default="replay"),
        replay=[tmp_path / "rec.jsonl"],
    )
    values = []
    async with new:
        for _ in range(3):
            async with new.episode("dice") as ep:
                values.append((await ep.call("roll")).value)
    assert values == [0, 1, 0]  # k re-runs replay k recorded epochs, cycling


async def test_replay_needs_a_cassette_and_record_new_needs_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no recorded episodes"):
        await run(tmp_path, "x.jsonl", ["a"], policy=Policy(default="replay"))
    await run(tmp_path, "rec.jsonl", ["a"])
    in_memory = Cassette(read_episodes([tmp_path / "rec.jsonl"]))
    grow = Policy(default="replay", replay={"on_miss": "record-new"})
    with pytest.raises(ConfigError, match="record-new"):
        await run(tmp_path, "y.jsonl", ["b"], policy=grow, replay=in_memory)
    with pytest.raises(ConfigError, match="apply to mode = 'replay' only"):
        Policy({"lookup": {"mode": "real", "on_miss": "spy"}})
    with pytest.raises(ConfigError, match="unknown replay order"):
        Policy({"lookup": {"mode": "replay", "order": "sorted"}})


async def test_cassette_take_serves_anywhere_once(tmp_path: Path) -> None:
    await run(tmp_path, "rec.jsonl", ["abcd", "abcd"])
    cassette = Cassette.from_files([tmp_path / "rec.jsonl"])
    assert cassette.size == 4
    assert cassette.tools() == ["lookup", "decide"]
    hit = cassette.take("lookup", {"key": "abcd"})
    assert hit is not None
    assert hit[1].index == 1
    assert cassette.take("lookup", {"key": "nope"}) is None
    assert [s.tool for _, s in cassette.unused()] == ["decide", "lookup", "decide"]


def test_the_replay_table_is_read_by_the_sandbox_and_accepted_by_the_scorer(
    tmp_path: Path,
) -> None:
    from litmus_sandbox import load_policy

    policy_file = tmp_path / "policy.toml"
    policy_file.write_text('[replay]\norder = "per_tool"\non_miss = "spy"\n')
    assert Policy.from_file(policy_file).replay.on_miss == "spy"
    load_policy(policy_file)  # the scorer ignores the runtime's tables
    policy_file.write_text('[replay]\nordr = "strict"\n')
    with pytest.raises(ConfigError, match="ordr"):
        Policy.from_file(policy_file)
    policy = Policy.from_mapping({"search": {"mode": "replay", "order": "strict"}})
    tuned = policy.with_replay(order="any", on_miss="record-new", ignore=["$._meta"])
    assert tuned.replay_options("search") == ReplayOptions(
        order="strict", on_miss="record-new", ignore=("$._meta",)
    )
    assert tuned.replay_options("other") is None
    assert policy.replay_options("search") == ReplayOptions(order="strict")


def test_replay_mode_without_recordings_is_refused_up_front(tmp_path: Path) -> None:
    policy = Policy({"search": "replay", "fetch_*": "replay"}, source="p.toml")
    with pytest.raises(ConfigError, match=r"p.toml: 'search', 'fetch_\*' in replay mode, but no"):
        Sandbox(root=tmp_path, episodes=tmp_path / "e.jsonl", policy=policy)
    with pytest.raises(ConfigError, match="'default' in replay mode"):
        Sandbox(root=tmp_path, episodes=tmp_path / "e.jsonl", policy=Policy(default="replay"))
    Sandbox(root=tmp_path, episodes=tmp_path / "e.jsonl", policy=Policy({"search": "stub"}))


async def test_record_new_keeps_the_steps_meta_in_the_grown_cassette(tmp_path: Path) -> None:
    """What the live step recorded of the answer (here ``repr_only``) goes into the
    cassette too, without the live episode's replay facts."""

    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    def odd(k: int) -> Any:
        return Opaque()

    cassette = tmp_path / "rec.jsonl"
    async with (
        Sandbox(root=tmp_path / "root", episodes=cassette, tools={"odd": odd}, probes=()) as sb,
        sb.episode("c") as ep,
    ):
        await ep.call("odd", k=1)
    grow = Policy(default="replay", replay={"on_miss": "record-new"})
    sandbox = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "live.jsonl",
        tools={"odd": odd},
        policy=grow,
        replay=[cassette],
        probes=(),
    )
    async with sandbox, sandbox.episode("c") as ep:
        await ep.call("odd", k=2)
    _, supplement = read_episodes([cassette])
    (added,) = [s for s in supplement.steps if isinstance(s, ToolCallStep)]
    assert added.meta == {"repr_only": True}
    (live,) = tool_calls(tmp_path / "live.jsonl")
    assert live.meta["replay"]["recorded_as"]["episode_id"] == supplement.episode_id


async def test_a_torn_recording_is_replayed_with_a_warning_naming_its_line(
    tmp_path: Path,
) -> None:
    """The whole calls of a torn cassette are served; the torn one is said, not dropped
    silently (a RecordingWarning naming file:line)."""
    await run(tmp_path, "rec.jsonl", ["abcd"])
    cassette = tmp_path / "rec.jsonl"
    lines = cassette.read_bytes().splitlines(keepends=True)
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b"".join(lines[:3]) + lines[3][:20])
    with pytest.warns(RecordingWarning, match=r"torn\.jsonl:4: warning: torn last line"):
        sandbox = Sandbox(
            root=tmp_path / "root",
            episodes=tmp_path / "replay.jsonl",
            policy=Policy(default="replay"),
            tools={},
            replay=[torn],
        )
    async with sandbox, sandbox.episode("c1") as ep:
        found = await ep.call("lookup", key="abcd")
    assert found.value == {"key": "abcd", "value": 28}


async def test_record_new_keeps_a_call_whose_arguments_json_cannot_hold(tmp_path: Path) -> None:
    """Grown into the cassette and recorded in the episode alike, by repr."""
    await run(tmp_path, "rec.jsonl", ["abcd"])
    cassette_path = tmp_path / "rec.jsonl"
    marker = object()
    sandbox = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "grow.jsonl",
        policy=Policy(default="replay", replay={"on_miss": "record-new"}),
        tools=TOOLS,
        replay=[cassette_path],
    )
    async with sandbox, sandbox.episode("c1") as ep:
        found = await ep.call("lookup", key="new", when=marker)
    assert found.value == {"key": "new", "value": 21}
    (live,) = tool_calls(tmp_path / "grow.jsonl")
    _, supplement = read_episodes([cassette_path])
    assert supplement.complete
    (grown,) = [s for s in supplement.steps if isinstance(s, ToolCallStep)]
    for step in (live, grown):
        assert step.args == {"key": "new", "when": repr(marker)}
        assert step.meta["args_repr_only"] is True
