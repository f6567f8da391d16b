"""No step is lost to its content: text that is not valid Unicode (lone surrogates, as
``os.listdir`` gives for names that are not UTF-8) and bytes, anywhere an agent or a tool
puts them, are recorded in valid UTF-8 JSON, and :func:`restore_original` gives them back."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litmus_sandbox import (
    Episode,
    Finding,
    MessageStep,
    Policy,
    Sandbox,
    Shown,
    ToolCallStep,
    read_episodes,
    restore_original,
)
from litmus_sandbox._model.records import SCHEMA_VERSION
from litmus_sandbox._runtime.live_scoring import TappedStream
from litmus_sandbox._runtime.tool_calls import cap_args, write_step

pytestmark = pytest.mark.anyio

chars = st.one_of(st.characters(), st.characters(categories=["Cs"]), st.sampled_from("\ufffd#"))
texts = st.one_of(
    st.text(chars, max_size=8),
    st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), texts, st.binary())
values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=8,
)


def strict_lines(path: Path) -> list[Any]:
    """Every line of ``path`` as strict readers read it: UTF-8, then JSON."""
    return [json.loads(line.decode("utf-8")) for line in path.read_bytes().splitlines()]


def one_episode(path: Path) -> Episode:
    strict_lines(path)
    (episode,) = read_episodes([path])
    assert episode.complete
    return episode


async def record(
    root: Path, case: str, agent: str, tool: str, message: str, args: dict[str, Any], result: Any
) -> tuple[Path, Any]:
    """One episode: a message, a call of ``tool`` returning ``result``, and a call of a
    tool that raises ``message``. Returns the stream and what the agent got back."""

    def answer(**kwargs: Any) -> Any:
        assert kwargs == args
        return result

    def fail(**kwargs: Any) -> Any:
        raise ValueError(message)

    episodes = root / "eps.jsonl"
    tools = {tool: answer, f"{tool}!": fail}
    sandbox = Sandbox(root=root / "root", episodes=episodes, tools=tools, egress=False, probes=())
    async with sandbox, sandbox.episode(case, agent=agent) as ep:
        ep.message("user", message)
        got = await ep.call(tool, **args)
        failed = await ep.call(f"{tool}!", **args)
        assert failed.is_error
    return episodes, got.value


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    case=texts,
    agent=texts,
    tool=texts.map(lambda name: f"t{name}"),
    message=texts,
    args=st.dictionaries(texts, values, max_size=4),
    result=values,
)
def test_whatever_text_or_bytes_every_step_is_written_and_restored(
    case: str, agent: str, tool: str, message: str, args: dict[str, Any], result: Any
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        episodes, got = anyio.run(record, root, case, agent, tool, message, args, result)
        episode = one_episode(episodes)
        message_step, answered, failed = restore_original(episode).steps
    assert isinstance(message_step, MessageStep)
    assert isinstance(answered, ToolCallStep)
    assert isinstance(failed, ToolCallStep)
    assert [s.index for s in episode.steps] == [0, 1, 2]
    original = restore_original(episode.header)
    assert (original.case_id, original.agent) == (case, agent)
    assert message_step.text == message
    assert (answered.tool, answered.args) == (tool, args)
    assert (failed.tool, failed.args) == (f"{tool}!", args)
    if result is None:
        assert answered.shown.content == ()
    elif isinstance(result, str):
        assert answered.shown.text() == result
    else:
        assert answered.shown.structured == got == result
    assert failed.actual is not None
    assert failed.actual.error_message == message
    assert failed.shown.text() == f"ValueError: {message}"
    # What judges and reports read: valid text everywhere.
    for step in episode.steps:
        msgspec.json.encode(step)


async def test_a_directory_listing_with_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    """The issue's case: ``os.listdir`` returns ``"\\udcff"`` for the file ``b"\\xff"``.
    The call's step is written, the episode is complete, and the listing is recovered;
    the filesystem probe records the file the next call makes."""
    root = tmp_path / "root"
    folder = root / "dir"
    folder.mkdir(parents=True)
    os.close(os.open(os.fsencode(folder) + b"/\xff", os.O_CREAT | os.O_WRONLY, 0o644))

    def ls(path: str) -> list[str]:
        return sorted(os.listdir(path))

    def touch(name: str) -> str:
        os.close(os.open(os.path.join(folder, name), os.O_CREAT | os.O_WRONLY, 0o644))
        return f"made {name}"

    episodes = tmp_path / "eps.jsonl"
    sandbox = Sandbox(root=root, episodes=episodes, tools={"ls": ls, "touch": touch}, egress=False)
    async with sandbox, sandbox.episode("listing") as ep:
        ep.message("user", "what is in dir?")
        listed = await ep.call("ls", path=str(folder))
        assert listed.value == ["\udcff"]
        made = await ep.call("touch", name=os.fsdecode(b"new\xfe"))
        assert made.value == "made new\udcfe"
        ep.message("assistant", f"dir holds {listed.value[0]!s}")
    episode = one_episode(episodes)
    assert len(episode.steps) == 4
    ls_step, touch_step = (s for s in episode.steps if isinstance(s, ToolCallStep))
    assert ls_step.shown.structured == ["\ufffd"]  # what a judge reads
    assert touch_step.args == {"name": "new\ufffd"}
    assert touch_step.effects.fs, "the probe saw the file made"
    original = restore_original(episode)
    ls_step, touch_step = (s for s in original.steps if isinstance(s, ToolCallStep))
    assert ls_step.shown.structured == ["\udcff"]
    assert ls_step.shown.text() == '["\udcff"]'
    assert touch_step.args == {"name": "new\udcfe"}
    assert touch_step.shown.text() == "made new\udcfe"
    assert isinstance(last := original.steps[-1], MessageStep)
    assert last.text == "dir holds \udcff"


async def test_replay_matches_and_serves_the_original_values(tmp_path: Path) -> None:
    """A recording's calls are matched on, and serve, what was recorded, not the
    stand-ins: an argument that differs only in its lone surrogate does not match."""
    calls: list[dict[str, Any]] = []

    def find(**args: Any) -> list[Any]:
        calls.append(args)
        return ["hit\udcff", b"\x00\xff"]

    tool, recorded = "find\udcff", tmp_path / "recorded.jsonl"
    first = Sandbox(root=tmp_path / "root", episodes=recorded, tools={tool: find}, egress=False)
    async with first, first.episode("case\udcff") as ep:
        await ep.call(tool, **{"name\udcff": "v\udcfe"})
    replaying = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "replayed.jsonl",
        tools={tool: find},
        egress=False,
        replay=[recorded],
        policy=Policy(tools={"*": "replay"}),
    )
    async with replaying, replaying.episode("case\udcff") as ep:
        served = await ep.call(tool, **{"name\udcff": "v\udcfe"})
        missed = await ep.call(tool, **{"name\udcff": "v\udcfd"})
    assert len(calls) == 1, "the replayed episode never ran the tool"
    assert (served.fidelity, served.value) == ("replayed", ["hit\udcff", b"\x00\xff"])
    assert missed.fidelity == "denied"
    (report,) = replaying.replay_reports.values()
    assert report.served == 1
    assert [d.args for d in report.divergences] == [{"name\udcff": "v\udcfd"}]
    episode = one_episode(tmp_path / "replayed.jsonl")
    assert [s.fidelity for s in episode.steps if isinstance(s, ToolCallStep)] == [
        "replayed",
        "denied",
    ]


async def test_two_episode_ids_that_differ_only_in_a_lone_surrogate_are_one(
    tmp_path: Path,
) -> None:
    """They are written alike: the second is refused before it starts, never left to
    make the stream unreadable."""
    from litmus_sandbox import ConfigError

    sandbox = Sandbox(root=tmp_path / "root", episodes=tmp_path / "e.jsonl", egress=False)
    async with sandbox:
        async with sandbox.episode("c", episode_id="id\udcff"):
            pass
        with pytest.raises(ConfigError, match="already used"):
            async with sandbox.episode("c", episode_id="id\udcfe"):
                pass
    (episode,) = read_episodes([tmp_path / "e.jsonl"])
    assert restore_original(episode.header).episode_id == "id\udcff"


async def test_a_runner_result_json_cannot_hold_is_written_by_repr(tmp_path: Path) -> None:
    """The call ran: whatever its result holds, its step is written, with a note of the
    parts written by their ``repr``."""

    class Odd:
        def __repr__(self) -> str:
            return "<odd \udcff>"

    async def runner(tool: str, args: Any) -> Shown:
        return Shown(content=({"type": "text", "text": "x"},), structured={"o": Odd()})

    episodes = tmp_path / "e.jsonl"
    sandbox = Sandbox(root=tmp_path / "root", episodes=episodes, egress=False, probes=())
    async with sandbox, sandbox.episode("c") as ep:
        await ep.call_with(runner, "remote", {"a": Odd()})
    (step,) = one_episode(episodes).steps
    assert isinstance(step, ToolCallStep)
    assert step.meta["parts_repr_only"] == ["shown.structured"]
    assert step.meta["args_repr_only"] is True
    original = restore_original(step)
    assert original.shown.structured == {"o": "<odd \udcff>"}
    assert original.args == {"a": "<odd \udcff>"}


def test_a_step_is_written_even_with_a_field_of_the_wrong_type() -> None:
    """The last resort: a typed field holding what JSON cannot hold (nothing the recorder
    builds does) still leaves a step, by ``repr``, saying why."""
    lines: list[bytes] = []
    step = ToolCallStep(
        v=SCHEMA_VERSION, episode_id="e1", index=0, call_id="e1:1", tool="t", args={"a": 1},
        fidelity="real", shown=Shown(content=({"type": "text", "text": "ok"},)),
        findings=(Finding(code="escape", detail=object()),),  # type: ignore[arg-type]
    )  # fmt: skip
    written = write_step(lines.append, step)
    (line,) = lines
    record = json.loads(line.decode("utf-8"))
    assert record["index"] == 0
    assert record["args"] == {"repr": "{'a': 1}"}
    assert "TypeError" in record["meta"]["unencodable"]
    assert written.meta["unencodable"] == record["meta"]["unencodable"]


async def test_the_live_tap_keeps_the_stand_ins_as_written(tmp_path: Path) -> None:
    """Live scoring scores what a reader of the file scores."""
    stream = TappedStream(tmp_path / "e.jsonl")
    stream.open()
    step = ToolCallStep(
        v=SCHEMA_VERSION, episode_id="e1", index=0, call_id="e1:1", tool="t\udcff",
        args={"b": b"\xff"}, fidelity="real", shown=Shown(), started_at=0.0, ended_at=0.0,
    )  # fmt: skip
    stream.write_now(step)
    stream.close()
    kept = stream._open["e1"][0]
    assert isinstance(kept, ToolCallStep)
    assert (kept.tool, kept.args) == ("t\ufffd", {"b": "\ufffd"})
    on_disk = msgspec.json.decode((tmp_path / "e.jsonl").read_bytes(), type=ToolCallStep)
    assert kept == on_disk
    assert restore_original(kept) == step


@given(args=st.dictionaries(texts, values, max_size=6), cap=st.integers(8, 200))
def test_capping_arguments_takes_any_text(args: dict[str, Any], cap: int) -> None:
    kept, _ = cap_args(args, cap)
    assert list(kept) == list(args)[: len(kept)]
