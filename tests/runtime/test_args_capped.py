"""Arguments over ``max_result_bytes`` are recorded capped, like results: a step line
stays far below the readers' line limit whatever the agent passed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox import Sandbox, ToolCallStep, read_episodes
from litmus_sandbox._model.records import SCHEMA_VERSION, Shown
from litmus_sandbox._runtime.live_scoring import TappedStream
from litmus_sandbox._runtime.tool_calls import cap_args

pytestmark = pytest.mark.anyio


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


async def test_a_huge_argument_reaches_the_tool_whole_and_the_record_capped(
    tmp_path: Path,
) -> None:
    got: list[int] = []

    def write_note(path: str, text: str) -> str:
        got.append(len(text))
        return "saved"

    sandbox = Sandbox(
        root=tmp_path / "root", episodes=tmp_path / "e.jsonl", egress=False, probes=()
    )
    sandbox.tool(write_note)
    text = "x" * (17 << 20)  # over the readers' 16 MiB line limit
    async with sandbox, sandbox.episode("c") as ep:
        assert (await ep.call("write_note", path="a.txt", text=text)).value == "saved"
        ep.begin_call("write_note", {"path": "b.txt", "text": text}).done("saved")  # type: ignore[union-attr]
    assert got == [len(text)]
    lines = (tmp_path / "e.jsonl").read_bytes().splitlines()
    assert max(map(len, lines)) < 1 << 20
    (episode,) = read_episodes([tmp_path / "e.jsonl"])  # the default line limit
    whole = {"path": "a.txt", "text": text}
    for step, path in zip(episode.steps, ("a.txt", "b.txt"), strict=True):
        assert isinstance(step, ToolCallStep)
        assert step.args == {"path": path, "text": "x" * (32 << 10)}
        whole["path"] = path
        assert step.meta["args_capped"] == {
            "size": len(compact(whole)),
            "sha256": sha(compact(whole)),
            "cut": ["text"],
        }


async def test_small_arguments_are_recorded_as_they_are(tmp_path: Path) -> None:
    sandbox = Sandbox(
        root=tmp_path / "root", episodes=tmp_path / "e.jsonl", egress=False, max_result_bytes=64
    )
    sandbox.tool(lambda **kw: "y" * 500, name="t")
    async with sandbox, sandbox.episode("c") as ep:
        await ep.call("t", a=1, b="short")  # the result is capped, the arguments are not
    (episode,) = read_episodes([tmp_path / "e.jsonl"])
    (step,) = episode.steps
    assert isinstance(step, ToolCallStep)
    assert step.args == {"a": 1, "b": "short"}
    assert "args_capped" not in step.meta
    assert "capped" in step.meta


async def test_the_live_tap_keeps_the_step_as_written(tmp_path: Path) -> None:
    stream = TappedStream(tmp_path / "e.jsonl", cap=1024)
    stream.open()
    step = ToolCallStep(
        v=SCHEMA_VERSION, episode_id="e1", index=0, call_id="e1:1", tool="t",
        args={"blob": "z" * 5000}, fidelity="real", shown=Shown(), started_at=0.0, ended_at=0.0,
    )  # fmt: skip
    written = stream.write_now(step)
    stream.close()
    assert isinstance(written, ToolCallStep)
    assert written.args == {"blob": "z" * 128}
    on_disk = msgspec.json.decode((tmp_path / "e.jsonl").read_bytes())
    assert on_disk["args"] == written.args
    assert on_disk["meta"] == written.meta


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(args=st.dictionaries(st.text(max_size=10), values, max_size=12), cap=st.integers(8, 400))
def test_capped_arguments_fit_the_cap_and_say_what_they_were(
    args: dict[str, Any], cap: int
) -> None:
    kept, facts = cap_args(args, cap)
    data = msgspec.json.encode(args)
    if len(data) <= cap:
        assert (kept, facts) == (args, None)
        return
    assert facts is not None
    assert (facts["size"], facts["sha256"]) == (len(data), sha(data))
    assert len(msgspec.json.encode(kept)) <= cap + 2  # the braces
    assert list(kept) == list(args)[: len(kept)]  # in order, dropped from the end
    assert facts.get("dropped", 0) == len(args) - len(kept)
    for name, value in kept.items():
        if name in facts["cut"]:
            assert isinstance(value, str)
            assert len(value.encode(errors="surrogatepass")) <= max(cap // 8, 1)
        else:
            assert value == args[name]
