"""The sandbox runtime against real tools, on asyncio and trio."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from litmus_sandbox import ConfigError, ToolCallStep, read_episodes
from litmus_sandbox._config.policy import Policy, Stub
from litmus_sandbox._runtime.sandbox import Sandbox

pytestmark = pytest.mark.anyio


def write_file(path: str, text: str) -> str:
    Path(path).write_text(text)
    return f"wrote {len(text)} bytes"


async def send_email(to: str, body: str) -> dict[str, Any]:
    return {"status": "sent", "to": to}


def boom() -> None:
    raise PermissionError("disk is read-only")


async def slow() -> str:
    await anyio.sleep(5)
    return "late"


def make(tmp_path: Path, policy: Policy | None = None, **kw: Any) -> Sandbox:
    return Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "eps.jsonl",
        policy=policy,
        tools={"write_file": write_file, "send_email": send_email, "boom": boom, "slow": slow},
        **kw,
    )


def calls(tmp_path: Path) -> list[ToolCallStep]:
    (ep,) = read_episodes([tmp_path / "eps.jsonl"])
    return [s for s in ep.steps if isinstance(s, ToolCallStep)]


async def test_real_calls_are_recorded_and_refusals_do_not_stop_recording(tmp_path: Path) -> None:
    target = tmp_path / "root" / "out.txt"
    async with make(tmp_path) as sb, sb.episode("adv-017", agent="a@1") as ep:
        ep.message("user", "write it")
        ep.message("assistant", "I can't help with that.")
        r = await ep.call("write_file", path=str(target), text="hello")
        ep.message("assistant", "done")
    assert r.text == "wrote 5 bytes"
    assert target.read_text() == "hello"
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.complete
    assert [s.index for s in episode.steps] == [0, 1, 2, 3]
    assert episode.header.recorder.measurement_version == "1"
    assert episode.header.tool_modes["write_file"] == "real"
    step = episode.steps[2]
    assert isinstance(step, ToolCallStep)
    assert step.fidelity == "real"
    assert step.actual is None


async def test_policy_modes(tmp_path: Path) -> None:
    policy = Policy.from_mapping(
        {
            "default": "real",
            "send_*": {"mode": "stub", "result": "sent"},
            "write_*": {"mode": "deny", "message": "not allowed in this sandbox"},
            "boom": {"mode": "swallow", "shown": ""},
        }
    )
    target = tmp_path / "root" / "x.txt"
    async with make(tmp_path, policy) as sb, sb.episode("c") as ep:
        sent = await ep.call("send_email", to="a@b", body="hi")
        denied = await ep.call("write_file", path=str(target), text="x")
        swallowed = await ep.call("boom")
    assert (sent.text, sent.fidelity) == ("sent", "stubbed")
    assert denied.is_error
    assert denied.text == "not allowed in this sandbox"
    assert not target.exists()  # the real tool never ran
    assert (swallowed.is_error, swallowed.text) == (False, "")
    steps = calls(tmp_path)
    assert [s.fidelity for s in steps] == ["stubbed", "denied", "swallowed"]
    actual = steps[2].actual
    assert actual is not None
    assert (actual.outcome, actual.error_type) == ("raised", "PermissionError")


async def test_real_error_is_shown_not_swallowed(tmp_path: Path) -> None:
    async with make(tmp_path) as sb, sb.episode("c") as ep:
        r = await ep.call("boom")
    assert r.is_error
    assert "PermissionError: disk is read-only" in r.text
    (step,) = calls(tmp_path)
    assert step.fidelity == "real"
    assert step.shown.is_error


async def test_stub_callable_computes_from_args(tmp_path: Path) -> None:
    policy = Policy({"send_email": _stub_policy()})
    async with make(tmp_path, policy) as sb, sb.episode("c") as ep:
        r = await ep.call("send_email", to="z@y", body="b")
    assert r.value == {"queued_for": "z@y"}


def _stub_policy() -> Any:
    from litmus_sandbox._config.policy import ToolPolicy

    return ToolPolicy(mode="stub", result=Stub(lambda **a: {"queued_for": a["to"]}))


async def test_timeout_is_recorded(tmp_path: Path) -> None:
    async with make(tmp_path, timeout=0.05) as sb, sb.episode("c") as ep:
        start = time.monotonic()
        r = await ep.call("slow")
    assert time.monotonic() - start < 2
    assert r.is_error
    assert "timed out" in r.text
    (step,) = calls(tmp_path)
    assert step.actual is not None
    assert step.actual.outcome == "timeout"


async def test_parallel_calls_get_distinct_ids_in_completion_order(tmp_path: Path) -> None:
    async def sleeper(delay: float) -> float:
        await anyio.sleep(delay)
        return delay

    sb = make(tmp_path)
    sb.tool(sleeper)
    async with sb, sb.episode("c") as ep, anyio.create_task_group() as tg:
        for d in (0.2, 0.0, 0.1):
            tg.start_soon(functools.partial(ep.call, "sleeper", delay=d))
    steps = calls(tmp_path)
    assert [s.shown.structured for s in steps] == [0.0, 0.1, 0.2]
    assert len({s.call_id for s in steps}) == 3
    assert [s.index for s in steps] == [0, 1, 2]
    assert all(s.started_at is not None and s.ended_at is not None for s in steps)


async def test_an_error_inside_a_task_group_is_the_abort_reason(tmp_path: Path) -> None:
    """Not the group's "unhandled errors in a TaskGroup" (asyncio) or "Exceptions from
    Trio nursery": the error that ended the episode."""

    async def crash() -> None:
        raise ValueError("agent crashed")

    async def run() -> None:
        async with make(tmp_path) as sb, sb.episode("c"), anyio.create_task_group() as tg:
            tg.start_soon(crash)
            await anyio.sleep(5)

    with pytest.raises(BaseExceptionGroup):
        await run()
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.end is not None
    assert (episode.end.status, episode.end.reason) == ("aborted", "ValueError: agent crashed")


@pytest.mark.parametrize("sync", [True, False])
async def test_a_tool_that_exits_the_process_leaves_an_interrupted_step(
    tmp_path: Path, sync: bool
) -> None:
    import sys

    def quit_sync() -> None:
        sys.exit(3)

    async def quit_async() -> None:
        sys.exit(3)

    sb = Sandbox(
        root=tmp_path / "r",
        episodes=tmp_path / "eps.jsonl",
        tools={"quit": quit_sync if sync else quit_async},
        probes=(),
    )
    async with sb, sb.episode("c") as ep:
        with pytest.raises(SystemExit):
            await ep.call("quit")
        ep.message("assistant", "the agent caught it and went on")
    (step,) = calls(tmp_path)
    assert step.actual is not None
    assert (step.actual.outcome, step.actual.error_type, step.actual.error_message) == (
        "interrupted",
        "SystemExit",
        "3",
    )
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.complete


async def test_exception_aborts_the_episode_and_propagates(tmp_path: Path) -> None:
    async def run() -> None:
        async with make(tmp_path) as sb, sb.episode("c") as ep:
            ep.message("user", "x")
            _ = 1 / 0

    with pytest.raises(ZeroDivisionError):
        await run()
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.end is not None
    assert episode.end.status == "aborted"
    assert "ZeroDivisionError" in (episode.end.reason or "")
    assert not episode.complete


async def test_cancellation_mid_call_records_interrupted(tmp_path: Path) -> None:
    started = anyio.Event()

    async def stalls() -> str:
        started.set()
        await anyio.sleep(5)
        return "late"

    async with make(tmp_path) as sb:
        sb.tool(stalls)
        with anyio.CancelScope() as scope:
            async with sb.episode("c") as ep, anyio.create_task_group() as tg:

                async def cancel_once_called() -> None:
                    await started.wait()  # the call is under way: cancel it
                    scope.cancel()

                tg.start_soon(cancel_once_called)
                await ep.call("stalls")
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.end is not None
    assert (episode.end.status, episode.end.reason) == ("aborted", "cancelled")
    (step,) = calls(tmp_path)
    assert step.actual is not None
    assert step.actual.outcome == "interrupted"


async def test_odd_results_never_crash_the_recorder(tmp_path: Path) -> None:
    sb = Sandbox(root=tmp_path / "r", episodes=tmp_path / "eps.jsonl", max_result_bytes=100)
    sb.tool(lambda: object(), name="weird")
    sb.tool(lambda: "x" * 1000, name="big")
    async with sb, sb.episode("c") as ep:
        weird = await ep.call("weird")
        big = await ep.call("big")
    assert weird.text.startswith("<object object")
    assert big.text == "x" * 1000  # the cap is the record's: the agent gets it whole
    steps = calls(tmp_path)
    assert steps[0].meta == {"repr_only": True}
    assert steps[1].meta["capped"]["size"] == 1000
    assert steps[1].shown.text() == "x" * 100


async def test_capping_is_the_records_the_agent_gets_every_result_whole(tmp_path: Path) -> None:
    import hashlib

    table = {"rows": ["x" * 100] * 50}

    def fail() -> None:
        raise ValueError("y" * 3000)

    def fail_stub() -> None:
        raise ValueError("w" * 3000)

    policy = Policy(
        {
            "canned": {"mode": "stub", "result": table},
            "broken": {"mode": "stub", "result": Stub(fail_stub)},
            "hush": {"mode": "swallow", "run": False, "shown": table},
        }
    )
    sb = Sandbox(
        root=tmp_path / "r",
        episodes=tmp_path / "eps.jsonl",
        policy=policy,
        tools={"table": lambda: table, "fail": fail},
        max_result_bytes=1000,
        probes=(),
    )
    async with sb, sb.episode("c") as ep:
        real = await ep.call("table")
        stubbed = await ep.call("canned")
        failed = await ep.call("fail")
        stub_failed = await ep.call("broken")
        hushed = await ep.call("hush")
    assert real.value == table
    assert stubbed.value == table
    assert failed.is_error
    assert failed.text == "ValueError: " + "y" * 3000
    assert stub_failed.text == "stub failed: ValueError: " + "w" * 3000
    assert hushed.value == table
    as_json = msgspec.json.encode(table)
    real_step, stub_step, fail_step, *_ = calls(tmp_path)
    for step in (real_step, stub_step):
        assert step.meta["capped"] == {
            "size": len(as_json),
            "sha256": hashlib.sha256(as_json).hexdigest(),
        }
        assert step.shown.structured is None
        assert len(step.shown.text().encode()) == 1000
    assert "capped" in fail_step.meta
    assert len(fail_step.shown.text()) < 1100


async def test_unknown_tool_and_closed_sandbox_are_config_errors(tmp_path: Path) -> None:
    sb = make(tmp_path)
    with pytest.raises(ConfigError, match="not open"):
        async with sb.episode("c"):
            pass
    with pytest.raises(ConfigError, match="no tool named"):
        async with sb, sb.episode("c") as ep:
            await ep.call("nope")


def test_policy_file_rejects_unknown_keys(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text('[tools]\n"send_*" = { mode = "stub", reslt = "sent" }\n')
    with pytest.raises(ConfigError, match="reslt"):
        Policy.from_file(p)
    p.write_text('[tools]\n"send_*" = "stubb"\n')
    with pytest.raises(ConfigError, match="unknown tool mode"):
        Policy.from_file(p)


async def test_replay_serves_recorded_results_once_each(tmp_path: Path) -> None:
    async with make(tmp_path) as sb, sb.episode("c", episode_id="rec-1") as ep:
        await ep.call("send_email", to="a", body="1")
        await ep.call("send_email", body="1", to="a")
    policy = Policy({"send_email": "replay"})
    sb2 = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "replayed.jsonl",
        policy=policy,
        replay=[tmp_path / "eps.jsonl"],
    )
    async with sb2, sb2.episode("c") as ep:
        first = await ep.call("send_email", body="1", to="a")  # key order is irrelevant
        second = await ep.call("send_email", to="a", body="1")
        third = await ep.call("send_email", to="a", body="1")
    assert first.value == {"status": "sent", "to": "a"}
    assert first.fidelity == "replayed"
    assert not second.is_error
    assert third.is_error  # the recording had two such calls, not three
    (episode,) = read_episodes([tmp_path / "replayed.jsonl"])
    steps = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    assert [(s.source.episode_id, s.source.step) if s.source else None for s in steps] == [
        ("rec-1", 0),
        ("rec-1", 1),
        None,
    ]
    assert episode.header.tool_modes["send_email"] == "replay"


async def test_fsync_mode_records_the_same(tmp_path: Path) -> None:
    async with make(tmp_path, fsync=True) as sb, sb.episode("c") as ep:
        ep.message("user", "x")
        r = await ep.call("send_email", to="a", body="b")
    assert r.value == {"status": "sent", "to": "a"}
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert episode.complete
    assert len(episode.steps) == 2


async def test_swallow_can_drop_the_call(tmp_path: Path) -> None:
    target = tmp_path / "root" / "never.txt"
    policy = Policy({"write_file": {"mode": "swallow", "run": False, "shown": "ok"}})
    async with make(tmp_path, policy) as sb, sb.episode("c") as ep:
        r = await ep.call("write_file", path=str(target), text="x")
    assert r.text == "ok"
    assert not target.exists()
    (step,) = calls(tmp_path)
    assert step.fidelity == "swallowed"
    assert step.actual is not None
    assert step.actual.outcome == "dropped"


async def test_swallow_keeps_the_real_return_value(tmp_path: Path) -> None:
    policy = Policy({"send_email": {"mode": "swallow"}})
    async with make(tmp_path, policy) as sb, sb.episode("c") as ep:
        r = await ep.call("send_email", to="a", body="b")
    assert r.text == ""
    (step,) = calls(tmp_path)
    assert step.shown.is_empty()
    assert step.actual is not None
    assert (step.actual.outcome, step.actual.value) == ("returned", {"status": "sent", "to": "a"})


async def test_a_swallowed_call_shows_a_table_placeholder_as_a_stub_would(
    tmp_path: Path,
) -> None:
    table = {"status": "ok"}
    policy = Policy(
        {
            "send_email": {"mode": "swallow", "shown": table},
            "send_sms": {"mode": "swallow", "run": False, "shown": table},
            "canned": {"mode": "stub", "result": table},
        }
    )
    async with make(tmp_path, policy) as sb, sb.episode("c") as ep:
        swallowed = await ep.call("send_email", to="a", body="b")
        dropped = await ep.call("send_sms", to="a")
        stubbed = await ep.call("canned")
    assert swallowed.value == dropped.value == stubbed.value == table
    s1, s2, s3 = calls(tmp_path)
    assert s1.shown == s2.shown == s3.shown
    assert s1.shown.structured == table


async def test_call_with_runner_records_what_the_runner_shows(tmp_path: Path) -> None:
    from litmus_sandbox import Shown

    seen: list[tuple[str, dict[str, Any]]] = []

    async def upstream(tool: str, args: dict[str, Any]) -> Shown:
        seen.append((tool, args))
        if tool == "broken":
            raise ConnectionError("upstream went away")
        return Shown(content=({"type": "text", "text": "no such file"},), is_error=True)

    policy = Policy({"write_*": "stub"})
    async with make(tmp_path, policy) as sb, sb.episode("c") as ep:
        r = await ep.call_with(upstream, "read_file", {"path": "/etc/x"})
        stubbed = await ep.call_with(upstream, "write_file", {"path": "y"})
        broken = await ep.call_with(upstream, "broken", {})
    assert (r.is_error, r.text, r.fidelity) == (True, "no such file", "real")
    assert stubbed.fidelity == "stubbed"
    assert broken.is_error
    assert "ConnectionError: upstream went away" in broken.text
    assert seen == [("read_file", {"path": "/etc/x"}), ("broken", {})]  # the stub never ran


async def test_sandbox_run_records_into_the_open_episode(tmp_path: Path) -> None:
    import sys

    sb = make(tmp_path)
    async with sb:
        with pytest.raises(ConfigError, match="open episode"):
            await sb.run([sys.executable, "-c", "print('x')"])
        async with sb.episode("c"):
            r = await sb.run([sys.executable, "-c", "import os; print(os.getcwd())"])
    assert r.text.strip() == str(tmp_path / "root")
    (step,) = calls(tmp_path)
    assert step.tool == "run"
    assert step.shown.structured["exit_code"] == 0


async def test_the_sandboxs_own_files_under_its_root_are_not_effects(tmp_path: Path) -> None:
    """Episodes recorded into the root (a common tmp_path layout) are the sandbox's own
    writes, not the tools': no effects, no unattributed changes, replays diff clean."""

    def add(a: int, b: int) -> int:
        return a + b

    rec = tmp_path / "rec.jsonl"
    async with (
        Sandbox(root=tmp_path, episodes=rec, tools={"add": add}) as sb,
        sb.episode("c") as ep,
    ):
        await ep.call("add", a=1, b=2)
        await ep.call("add", a=3, b=4)
    (episode,) = read_episodes(rec)  # one path, not a list
    assert "fs" in episode.header.oracles
    # Effects in the root (relative paths); tripwires elsewhere may see other processes.
    assert all(
        not [e for e in s.effects.fs if not e.path.startswith("/")]
        for s in episode.steps
        if isinstance(s, ToolCallStep)
    )
    assert episode.end is not None
    assert [e for e in episode.end.unattributed.fs if not e.path.startswith("/")] == []
    assert [
        f
        for f in episode.end.findings
        if f.path and (not f.path.startswith("/") or f.path.startswith(str(tmp_path)))
    ] == []
    rerun = tmp_path / "rerun.jsonl"
    replay = Sandbox(
        root=tmp_path,
        episodes=rerun,
        tools={"add": add},
        policy=Policy(default="replay"),
        replay=rec,  # one path, not a list
    )
    async with replay, replay.episode("c") as ep:
        assert (await ep.call("add", a=1, b=2)).value == 3
    (again,) = read_episodes(str(rerun))
    assert again.end is not None
    assert [e for e in again.end.unattributed.fs if not e.path.startswith("/")] == []


async def test_stubs_computed_from_arguments_however_written(tmp_path: Path) -> None:
    """A callable ``result``, a bare ``Stub``, and ``Stub`` as ``result`` all compute."""
    policy = Policy(
        {
            "mul": {"mode": "stub", "result": lambda a, b: a * b},
            "add": Stub(lambda a, b: a + b),
            "sub": {"mode": "stub", "result": Stub(lambda a, b: a - b)},
        }
    )
    async with (
        Sandbox(root=tmp_path / "r", episodes=tmp_path / "e.jsonl", policy=policy, probes=()) as sb,
        sb.episode("c") as ep,
    ):
        got = [(await ep.call(t, a=6, b=3)).value for t in ("mul", "add", "sub")]
    assert got == [18, 9, 3]
    steps = read_episodes(tmp_path / "e.jsonl")[0].steps
    assert [s.fidelity for s in steps if isinstance(s, ToolCallStep)] == ["stubbed"] * 3


def test_spy_and_record_new_are_modes_too() -> None:
    policy = Policy({"a": "spy", "b": {"mode": "record-new", "ignore": ["$.t"]}})
    assert (policy.for_tool("a").mode, policy.for_tool("a").on_miss) == ("replay", "spy")
    assert (policy.for_tool("b").mode, policy.for_tool("b").on_miss) == ("replay", "record-new")
    with pytest.raises(ConfigError, match="already says"):
        Policy({"c": {"mode": "spy", "on_miss": "error"}})


@pytest.mark.parametrize("value", [3, 2.5, True, ["stub"]])
def test_a_tool_policy_of_the_wrong_type_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError, match="expected a mode"):
        Policy.from_mapping({"foo": value})


async def test_a_policy_given_as_a_mapping_or_document(tmp_path: Path) -> None:
    as_tools = Sandbox(
        root=tmp_path / "r", episodes=tmp_path / "e.jsonl", policy={"send_email": "deny"}
    )
    assert as_tools.policy.for_tool("send_email").mode == "deny"
    document = {"tools": {"send_email": "stub"}, "egress": {"default": "deny"}}
    as_doc = Sandbox(root=tmp_path / "r", episodes=tmp_path / "e.jsonl", policy=document)
    assert as_doc.policy.for_tool("send_email").mode == "stub"
    assert as_doc.egress is not None
    assert as_doc.egress.policy.default.mode == "deny"
    only_egress = Sandbox(
        root=tmp_path / "r", episodes=tmp_path / "e.jsonl", policy={"egress": {"default": "deny"}}
    )
    assert only_egress.egress is not None
    assert only_egress.egress.policy.default.mode == "deny"
    assert only_egress.policy.for_tool("anything").mode == "real"
    # The same from a file read into a Policy object: its [egress] table comes along.
    p = tmp_path / "p.toml"
    p.write_text('[tools]\nsend_email = "stub"\n[egress]\ndefault = "deny"\n')
    from_file = Sandbox(
        root=tmp_path / "r", episodes=tmp_path / "e.jsonl", policy=Policy.from_file(p)
    )
    assert from_file.egress is not None
    assert from_file.egress.policy.default.mode == "deny"


async def test_large_errors_and_swallowed_results_are_capped_with_size_and_hash(
    tmp_path: Path,
) -> None:
    import hashlib

    big = "e" * 300_000

    def explode() -> None:
        raise ValueError(big)

    def hoard() -> dict[str, str]:
        return {"data": big}

    policy = Policy({"hoard": {"mode": "swallow", "shown": "ok"}, "hidden": "swallow"})
    sb = Sandbox(
        root=tmp_path / "r",
        episodes=tmp_path / "e.jsonl",
        policy=policy,
        tools={"explode": explode, "hoard": hoard, "hidden": explode},
        max_result_bytes=1000,
        probes=(),
    )
    async with sb, sb.episode("c") as ep:
        await ep.call("explode")
        await ep.call("hoard")
        await ep.call("hidden")
    raised, hoarded, hidden = (
        s for s in read_episodes(tmp_path / "e.jsonl")[0].steps if isinstance(s, ToolCallStep)
    )
    whole = {"size": len(big), "sha256": hashlib.sha256(big.encode()).hexdigest()}
    assert raised.meta["capped"] == whole
    assert raised.actual is not None
    assert raised.actual.error_message == "e" * 1000
    assert len(raised.shown.text()) < 1100
    as_json = '{"data":"' + big + '"}'
    assert hoarded.meta["actual_capped"] == {
        "size": len(as_json),
        "sha256": hashlib.sha256(as_json.encode()).hexdigest(),
    }
    assert hidden.meta["actual_capped"] == whole
    assert max(len(line) for line in (tmp_path / "e.jsonl").read_bytes().splitlines()) < 5000
