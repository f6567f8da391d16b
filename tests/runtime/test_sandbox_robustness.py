"""The sandbox under concurrency, odd values and misuse: every call recorded once, in the
right place, and a stream that stays readable."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from factories import LoopbackHttp

from litmus_sandbox import ConfigError, Policy, Sandbox, Stub, ToolCallStep, read_episodes

pytestmark = pytest.mark.anyio


async def overlapping(sandbox: Sandbox, gate: anyio.Event, tool: str, **each: list[Any]) -> None:
    """One episode ``c`` calling ``tool`` once per value of the one argument in ``each``,
    all at once; ``gate`` is set once they are all under way."""
    ((arg, values),) = each.items()
    async with sandbox, sandbox.episode("c") as ep, anyio.create_task_group() as tg:
        for value in values:
            tg.start_soon(functools.partial(ep.call, tool, **{arg: value}))
        await anyio.sleep(0.3)
        gate.set()


def tool_steps(path: Path) -> dict[str, list[ToolCallStep]]:
    """case id -> its tool-call steps."""
    return {
        ep.case_id: [s for s in ep.steps if isinstance(s, ToolCallStep)]
        for ep in read_episodes([path])
    }


async def test_concurrent_episodes_share_the_probes_without_losing_a_call(tmp_path: Path) -> None:
    """Episode B starts and ends while a call of A runs: A's call is still recorded (the
    probes start with the first episode and keep open calls' windows), and as the calls
    overlapped, neither is blamed for the other's write: their effects are unattributed."""
    root = tmp_path / "root"
    started, b_done = anyio.Event(), anyio.Event()

    async def slow_write() -> str:
        (root / "a.txt").write_text("a")
        started.set()
        await b_done.wait()
        return "done"

    async def quick_write() -> str:
        (root / "b.txt").write_text("b")
        return "done"

    sandbox = Sandbox(
        root=root,
        episodes=tmp_path / "eps.jsonl",
        tools={"slow_write": slow_write, "quick_write": quick_write},
        egress=False,
    )
    async with sandbox, anyio.create_task_group() as tg:

        async def episode_a() -> None:
            async with sandbox.episode("a") as ep:
                await ep.call("slow_write")

        tg.start_soon(episode_a)
        await started.wait()
        async with sandbox.episode("b") as ep:
            await ep.call("quick_write")
        b_done.set()
    episodes = {ep.case_id: ep for ep in read_episodes([tmp_path / "eps.jsonl"])}
    assert all(ep.complete for ep in episodes.values())
    steps = tool_steps(tmp_path / "eps.jsonl")
    assert [s.shown.text() for s in steps["a"]] == ["done"]
    assert [s.shown.text() for s in steps["b"]] == ["done"]
    assert steps["a"][0].effects.fs == steps["b"][0].effects.fs == ()
    a_end, b_end = episodes["a"].end, episodes["b"].end
    assert a_end is not None
    assert b_end is not None
    assert {"a.txt", "b.txt"} <= {e.path for e in a_end.unattributed.fs}
    assert "b.txt" in {e.path for e in b_end.unattributed.fs}


async def test_parallel_calls_keep_their_own_egress(tmp_path: Path) -> None:
    """Egress carries its call's id: overlapping calls still get their own requests."""
    with LoopbackHttp(b"hi") as base:
        sandbox = Sandbox(root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", probes=())
        gate = anyio.Event()

        async def fetch(path: str) -> int:
            async with sandbox.http_client() as http:
                status = (await http.get(f"{base}/{path}")).status_code
            await gate.wait()  # both calls in flight at once
            return status

        sandbox.tool(fetch)
        await overlapping(sandbox, gate, "fetch", path=["one", "two"])
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    urls = {
        s.args["path"]: [e.url for e in s.effects.egress]
        for s in tool_steps(tmp_path / "eps.jsonl")["c"]
    }
    assert urls == {"one": [f"{base}/one"], "two": [f"{base}/two"]}
    assert episode.end is not None
    assert episode.end.unattributed.egress == ()


async def test_effects_of_overlapping_calls_are_reported_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    gate = anyio.Event()

    async def make(name: str) -> str:
        (root / name).write_text(name)
        await gate.wait()
        return name

    sandbox = Sandbox(
        root=root, episodes=tmp_path / "eps.jsonl", tools={"make": make}, egress=False
    )
    await overlapping(sandbox, gate, "make", name=["a.txt", "b.txt"])
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.end is not None
    paths = [e.path for e in episode.end.unattributed.fs]
    assert sorted(paths) == ["a.txt", "b.txt"]  # overlapping: unattributed, each once
    assert len(episode.end.findings) == 2


async def test_odd_values_and_failing_stubs_are_recorded_not_raised(tmp_path: Path) -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped

    def loop() -> Any:
        return looped

    def boom(**_: Any) -> Any:
        raise KeyError("missing")

    policy = Policy({"computed": {"mode": "stub", "result": Stub(boom)}})
    sandbox = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "eps.jsonl",
        policy=policy,
        tools={"loop": loop},
        probes=(),
        egress=False,
    )
    async with sandbox, sandbox.episode("c") as ep:
        shown = await ep.call("loop")
        failed = await ep.call("computed", x=1)
    assert shown.text == "{'self': {...}}"
    assert failed.is_error
    assert "stub failed: KeyError" in failed.text
    looped_step, stub_step = tool_steps(tmp_path / "eps.jsonl")["c"]
    assert looped_step.meta == {"repr_only": True}
    assert stub_step.fidelity == "stubbed"
    assert stub_step.actual is not None
    assert stub_step.actual.error_type == "KeyError"


async def test_misuse_is_refused_and_the_stream_stays_readable(tmp_path: Path) -> None:
    async def echo(text: str) -> str:
        return text

    sandbox = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "eps.jsonl",
        tools={"echo": echo},
        probes=(),
        egress=False,
    )
    async with sandbox:
        async with sandbox.episode("c", episode_id="e1") as ep:
            with pytest.raises(ConfigError, match="a string"):
                ep.message("user", 5)  # type: ignore[arg-type]
            await ep.call("echo", text="ok")
        with pytest.raises(ConfigError, match="has ended"):
            ep.message("user", "late")
        with pytest.raises(ConfigError, match="has ended"):
            await ep.call("echo", text="late")
        with pytest.raises(ConfigError, match="already used"):
            async with sandbox.episode("c", episode_id="e1"):
                pass
    # Another sandbox on the same file knows the id is taken too.
    again = Sandbox(
        root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", probes=(), egress=False
    )
    with pytest.raises(ConfigError, match="already used"):
        async with again, again.episode("c", episode_id="e1"):
            pass
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])  # still readable, nothing lost
    assert [s.shown.text() for s in tool_steps(tmp_path / "eps.jsonl")["c"]] == ["ok"]
    assert episode.complete


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": -1}, "positive number of seconds"),
        ({"policy": 42}, "policy is a Policy"),
        ({"max_result_bytes": 0}, "max_result_bytes"),
    ],
)
def test_bad_constructor_values_are_config_errors(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Sandbox(root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", **kwargs)


async def test_bad_paths_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="sandbox root"):
        async with Sandbox(root=tmp_path / "afile", episodes=tmp_path / "e.jsonl", probes=()):
            pass
    with pytest.raises(ConfigError, match=r"afile/e\.jsonl': "):  # under a file: unwritable
        async with Sandbox(root=tmp_path / "root", episodes=tmp_path / "afile" / "e.jsonl"):
            pass
    # A folder is not a bad path: each sandbox writes a shard of its own in it (shards.py).
    (tmp_path / "adir").mkdir()
    sb = Sandbox(root=tmp_path / "root", episodes=tmp_path / "adir", probes=())
    async with sb, sb.episode("c1"):
        pass
    assert Path(sb.shard).parent == tmp_path / "adir"


async def test_a_sync_tool_abandoned_at_its_timeout_is_not_blamed_on_the_next_call(
    tmp_path: Path,
) -> None:
    """Its thread runs on: a later write is unattributed, not the next call's effect."""
    root = tmp_path / "root"

    def late_writer() -> str:
        time.sleep(0.4)
        (root / "late.txt").write_text("late")
        return "done"

    async def innocent() -> str:
        await anyio.sleep(0.8)  # the abandoned thread writes meanwhile
        return "ok"

    policy = Policy({"late_writer": {"mode": "real", "timeout": 0.1}})
    sandbox = Sandbox(
        root=root,
        episodes=tmp_path / "eps.jsonl",
        policy=policy,
        tools={"late_writer": late_writer, "innocent": innocent},
        egress=False,
    )
    async with sandbox, sandbox.episode("c") as ep:
        timed_out = await ep.call("late_writer")
        await ep.call("innocent")
    assert timed_out.is_error
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    late, clean = tool_steps(tmp_path / "eps.jsonl")["c"]
    assert late.actual is not None
    assert late.actual.outcome == "timeout"
    assert clean.effects.fs == ()
    assert clean.findings == ()
    assert episode.end is not None
    assert "late.txt" in {e.path for e in episode.end.unattributed.fs}


async def test_a_call_that_fails_to_start_closes_its_windows(tmp_path: Path) -> None:
    """An unknown tool is a ConfigError and no step; what happens after is still seen."""
    root = tmp_path / "root"

    async def ok() -> str:
        return "ok"

    sandbox = Sandbox(root=root, episodes=tmp_path / "eps.jsonl", tools={"ok": ok}, egress=False)
    async with sandbox, sandbox.episode("c") as ep:
        with pytest.raises(ConfigError, match="no tool named"):
            await ep.call("missing")
        (root / "outside_any_call.txt").write_text("x")
        await ep.call("ok")
        (root / "after.txt").write_text("y")
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.end is not None
    assert {e.path for e in episode.end.unattributed.fs} == {"outside_any_call.txt", "after.txt"}


async def test_each_request_counts_even_when_identical(tmp_path: Path) -> None:
    policy = {"default": "deny"}
    sandbox = Sandbox(
        root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", probes=(), egress=policy
    )
    async with sandbox, sandbox.episode("c"), sandbox.http_client() as http:
        for _ in range(3):
            assert (await http.get("http://denied.invalid/x")).status_code == 403
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.end is not None
    assert len(episode.end.unattributed.egress) == 3
    found = [f.code for f in episode.end.findings]
    assert (found.count("unattributed_effect"), found.count("escape")) == (3, 3)


async def test_arguments_json_cannot_hold_keep_the_step_and_its_effects(tmp_path: Path) -> None:
    """In-process calls may pass any Python value: the call ran, so its step is written,
    those values by their repr, with the effects the oracle saw; the episode goes on."""
    root = tmp_path / "root"
    root.mkdir()

    def w(**args: Any) -> str:
        (root / "written.txt").write_text("x")
        return "ok"

    marker = object()
    sandbox = Sandbox(root=root, episodes=tmp_path / "e.jsonl", tools={"w": w})
    async with sandbox, sandbox.episode("c1") as ep:
        first = await ep.call("w", when=marker, n=1)
        await ep.call("w", n=2)
    assert first.value == "ok"
    (episode,) = read_episodes([tmp_path / "e.jsonl"])
    assert episode.complete
    odd, plain = (s for s in episode.steps if isinstance(s, ToolCallStep))
    assert odd.args == {"when": repr(marker), "n": 1}
    assert odd.meta["args_repr_only"] is True
    assert [(e.op, e.path) for e in odd.effects.fs] == [("created", "written.txt")]
    assert plain.args == {"n": 2}
    assert "args_repr_only" not in plain.meta


async def test_a_call_cancelled_after_it_ran_still_records_its_step(tmp_path: Path) -> None:
    """Cancelled while its probes observe the end (an fs rescan), the call that ran is
    recorded as it ended; the cancellation goes on."""
    from litmus_sandbox import Effects

    class SlowProbe:
        name = "slow"

        async def start(self) -> None:
            pass

        async def close(self) -> None:
            pass

        async def before_call(self, call_id: str) -> None:
            pass

        async def after_call(self, call_id: str) -> Effects:
            await anyio.sleep(0.3)
            return Effects()

        async def finish(self) -> Effects:
            return Effects()

    async def runner(_tool: str, _args: Any) -> str:
        return "answered"

    sb = Sandbox(root=tmp_path / "r", episodes=tmp_path / "e.jsonl", probes=[SlowProbe()])
    async with sb, sb.episode("c") as ep:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ep.call_with, runner, "t", {})
                await anyio.sleep(0.1)  # the runner has returned; the probe is observing
                scope.cancel()
    (step,) = tool_steps(tmp_path / "e.jsonl")["c"]
    assert step.actual is None
    assert step.shown.text() == "answered"


async def test_two_episodes_of_one_id_at_once_are_refused(tmp_path: Path) -> None:
    sandbox = Sandbox(root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", egress=False)
    outcomes: list[str] = []

    async def one(name: str) -> None:
        try:
            async with sandbox.episode("c", episode_id="same-id") as ep:
                ep.message("user", name)
                await anyio.sleep(0.2)
            outcomes.append("recorded")
        except ConfigError:
            outcomes.append("refused")

    async with sandbox, anyio.create_task_group() as tg:
        tg.start_soon(one, "a")
        tg.start_soon(one, "b")
    assert sorted(outcomes) == ["recorded", "refused"]
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])  # readable: one header
    assert episode.complete
