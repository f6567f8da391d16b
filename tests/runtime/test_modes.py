"""The fidelity-mode registry, and each mode on its own (no sandbox, no probes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from litmus_sandbox import Sandbox, Shown, ToolCallStep, read_episodes
from litmus_sandbox._config.policy import Stub, ToolPolicy
from litmus_sandbox._core.divergence import META_KEY
from litmus_sandbox._core.replay_match import ReplayOptions, ReplaySession
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import SCHEMA_VERSION, TOOL_MODES, Fidelity
from litmus_sandbox._runtime import modes
from litmus_sandbox._runtime.modes import MODES, CallEnv, Performed, Runner, mode_for
from litmus_sandbox._runtime.steps import CallSteps

pytestmark = pytest.mark.anyio


def call(tool: str = "send", **args: Any) -> CallSteps:
    return CallSteps("ep", "ep:1", tool, args)


def env(**kw: Any) -> CallEnv:
    kw.setdefault("tools", {})
    kw.setdefault("cap", 1024)
    return CallEnv(**kw)


def test_every_tool_mode_of_the_policy_has_a_registered_mode() -> None:
    assert set(MODES) == set(TOOL_MODES)
    fidelity = {name: mode_for(name).fidelity for name in TOOL_MODES}
    assert fidelity == {
        "real": "real",
        "stub": "stubbed",
        "swallow": "swallowed",
        "deny": "denied",
        "replay": "replayed",
        "emulate": "emulated",
    }


def test_only_a_real_call_may_run_inline() -> None:
    assert [name for name in TOOL_MODES if mode_for(name).inline] == ["real"]


def test_an_unknown_mode_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown tool mode 'stubbed' \(one of real, stub"):
        mode_for("stubbed")


async def test_deny_tells_the_agent_and_runs_nothing() -> None:
    done = await MODES["deny"].perform(call(), ToolPolicy(mode="deny", message="no"), env(), None)
    assert done.whole is None
    step = done.step
    assert (step.fidelity, step.index, step.actual) == ("denied", -1, None)
    assert step.shown == Shown(content=({"type": "text", "text": "no"},), is_error=True)


async def test_stub_answers_a_fixed_result_or_one_computed_from_the_arguments() -> None:
    fixed = await MODES["stub"].perform(
        call(), ToolPolicy(mode="stub", result={"ok": 1}), env(), None
    )
    assert (fixed.step.fidelity, fixed.step.shown.structured) == ("stubbed", {"ok": 1})
    computed = ToolPolicy(mode="stub", result=Stub(lambda to: f"sent to {to}"))
    done = await MODES["stub"].perform(call(to="bob"), computed, env(), None)
    assert done.step.shown.text() == "sent to bob"


async def test_a_capped_stub_result_is_shown_whole() -> None:
    """The cap applies to the record, never to what the agent gets."""
    done = await MODES["stub"].perform(
        call(), ToolPolicy(mode="stub", result="x" * 50), env(cap=10), None
    )
    assert done.step.shown.text() == "x" * 10
    assert done.step.meta["capped"]["size"] == 50
    assert done.whole is not None
    assert done.whole.text() == "x" * 50


async def test_a_stub_that_raises_is_shown_as_an_error_and_recorded() -> None:
    def broken(**_: Any) -> str:
        raise ValueError("bad stub")

    done = await MODES["stub"].perform(
        call(), ToolPolicy(mode="stub", result=Stub(broken)), env(), None
    )
    step = done.step
    assert step.shown.is_error
    assert step.shown.text() == "stub failed: ValueError: bad stub"
    assert step.actual is not None
    assert step.actual.outcome == "raised"


async def test_swallow_without_running_drops_the_call() -> None:
    def tool() -> str:
        raise AssertionError("a dropped call never runs")

    policy = ToolPolicy(mode="swallow", run=False, shown="ok")
    done = await MODES["swallow"].perform(call("t"), policy, env(tools={"t": tool}), None)
    assert (done.step.fidelity, done.step.shown.text()) == ("swallowed", "ok")
    assert done.step.actual is not None
    assert done.step.actual.outcome == "dropped"


async def test_swallow_runs_the_tool_and_records_what_it_returned() -> None:
    done = await MODES["swallow"].perform(
        call("t", n=2), ToolPolicy(mode="swallow"), env(tools={"t": lambda n: n * 21}), None
    )
    assert done.step.shown.is_empty()
    assert done.step.actual is not None
    assert (done.step.actual.outcome, done.step.actual.value) == ("returned", 42)


async def test_real_runs_the_runner_when_given_one() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def runner(tool: str, args: dict[str, Any]) -> str:
        seen.append((tool, args))
        return "relayed"

    done = await MODES["real"].perform(call("t", a=1), ToolPolicy(), env(), runner)
    assert (done.step.fidelity, done.step.shown.text()) == ("real", "relayed")
    assert seen == [("t", {"a": 1})]


async def test_a_real_call_of_an_unregistered_tool_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no tool named 'nope'"):
        await MODES["real"].perform(call("nope"), ToolPolicy(), env(), None)


async def test_a_real_call_past_its_policy_timeout_is_shown_as_timed_out() -> None:
    import anyio

    async def slow() -> None:
        await anyio.sleep(10)

    policy = ToolPolicy(timeout=0.01)
    done = await MODES["real"].perform(
        call("slow"), policy, env(tools={"slow": slow}, timeout=5), None
    )
    assert done.step.shown.text() == "tool timed out after 0.01s"
    assert done.step.actual is not None
    assert done.step.actual.outcome == "timeout"


def recorded_session(on_miss: str) -> ReplaySession:
    recorded = ToolCallStep(
        v=SCHEMA_VERSION,
        episode_id="old",
        index=3,
        call_id="old:1",
        tool="search",
        args={"q": "cats"},
        fidelity="real",
        shown=Shown(content=({"type": "text", "text": "recorded"},)),
    )
    opts = ReplayOptions(on_miss=on_miss)
    return ReplaySession([recorded], lambda tool: opts if tool == "search" else None)


async def test_replay_serves_a_recorded_call_and_names_its_source() -> None:
    replay = MODES["replay"]
    done = await replay.perform(
        call("search", q="cats"),
        ToolPolicy(mode="replay"),
        env(replay=recorded_session("error")),
        None,
    )
    step = done.step
    assert (step.fidelity, step.shown.text()) == ("replayed", "recorded")
    assert step.source is not None
    assert (step.source.episode_id, step.source.step) == ("old", 3)


async def test_a_replay_miss_is_refused_or_run_for_real() -> None:
    miss = call("search", q="dogs")
    refused = await MODES["replay"].perform(
        miss, ToolPolicy(mode="replay"), env(replay=recorded_session("error")), None
    )
    assert refused.step.fidelity == "denied"
    assert refused.step.meta[META_KEY]["on_miss"] == "error"

    async def runner(_tool: str, _args: dict[str, Any]) -> str:
        return "live"

    spied = await MODES["replay"].perform(
        call("search", q="dogs"),
        ToolPolicy(mode="replay"),
        env(replay=recorded_session("spy")),
        runner,
    )
    assert (spied.step.fidelity, spied.step.shown.text()) == ("real", "live")
    assert spied.step.meta[META_KEY]["divergence"]["tool"] == "search"


async def test_replay_without_a_recording_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no recorded episodes"):
        await MODES["replay"].perform(call("search"), ToolPolicy(mode="replay"), env(), None)


class Echo:
    """A mode of a test's own: shows the arguments back, recorded as stubbed."""

    fidelity: Fidelity = "stubbed"
    inline = False

    async def perform(
        self, call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
    ) -> Performed:
        return Performed(call.step("stubbed", Shown(structured=call.args), meta={"echo": True}))


async def test_the_recorder_performs_calls_through_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mode registered in MODES is what the recorder runs: adding one never touches it."""
    monkeypatch.setitem(modes.MODES, "deny", Echo())
    sandbox = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "eps.jsonl",
        policy={"send": "deny"},
        probes=(),
        egress=False,
    )
    async with sandbox, sandbox.episode("c") as ep:
        result = await ep.call("send", to="bob")
        assert ep.begin_call("send", {}) is None  # not an inline mode
    assert (result.value, result.fidelity) == ({"to": "bob"}, "stubbed")
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    (step,) = episode.steps
    assert isinstance(step, ToolCallStep)
    assert (step.index, step.meta) == (0, {"echo": True})


def test_an_interrupted_step_says_what_stopped_it() -> None:
    steps = call()
    cancelled = steps.interrupted("stubbed")
    assert cancelled.actual is not None
    assert cancelled.actual.error_type is None
    exited = steps.interrupted("real", SystemExit(3))
    assert exited.shown == Shown(content=(), is_error=True)
    assert exited.actual is not None
    assert (exited.actual.outcome, exited.actual.error_type, exited.actual.error_message) == (
        "interrupted",
        "SystemExit",
        "3",
    )
