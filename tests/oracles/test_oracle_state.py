"""The state probe and findings: effects cross-checked against fidelity, in the sandbox."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import anyio
import pytest
from factories import call

from litmus_sandbox import Effects, FsEffect, Policy, Sandbox, ToolCallStep, read_episodes
from litmus_sandbox._core.findings import call_findings, unattributed_findings
from litmus_sandbox._model.records import EgressEvent
from litmus_sandbox.oracles.state import StateProbe, changed_paths

pytestmark = pytest.mark.anyio


def test_changed_paths() -> None:
    before = {"inbox": [{"id": 1}], "sent": [], "n": 1}
    after = {"inbox": [{"id": 1}, {"id": 2}], "sent": [], "n": 2, "new": True}
    assert changed_paths(before, after) == ["$.inbox[1]", "$.n", "$.new"]
    assert changed_paths(before, before) == []


@pytest.mark.parametrize(
    ("fidelity", "shown", "effects", "codes"),
    [
        ("stubbed", "ok", Effects(fs=(FsEffect(op="created", path="a"),)), ["stub_leak"]),
        ("real", None, Effects(fs=(FsEffect(op="created", path="a"),)), ["hidden_effect"]),
        ("real", "ok", Effects(fs=(FsEffect(op="created", path="a"),)), []),
        ("real", "ok", Effects(fs=(FsEffect(op="modified", path="/home/x/.bashrc"),)), ["escape"]),
        ("real", "ok", Effects(fs=(FsEffect(op="created", path="../out"),)), ["escape"]),
        (
            "denied",
            "no",
            Effects(egress=(EgressEvent(host="evil.test", decision="deny"),)),
            ["stub_leak", "escape"],
        ),
        ("real", "ok", Effects(), []),
    ],
)
def test_call_findings(
    fidelity: str, shown: str | None, effects: Effects, codes: list[str]
) -> None:
    step = call(0, "t", shown=shown, fidelity=fidelity, effects=effects)
    assert [f.code for f in call_findings(step)] == codes


def test_unattributed_findings() -> None:
    effects = Effects(fs=(FsEffect(op="created", path="/tmp/x"),))
    assert [f.code for f in unattributed_findings(effects)] == ["unattributed_effect", "escape"]


async def test_state_probe_attributes_changes_and_finds_stub_leaks(tmp_path: Path) -> None:
    world: dict[str, Any] = {"inbox": [], "sent": []}

    async def send_email(to: str) -> str:
        world["sent"].append(to)
        return "sent"

    async def leaky_stub_target(to: str) -> str:
        return "never called"

    policy = Policy({"archive": {"mode": "stub", "result": "archived"}})
    sb = Sandbox(
        root=tmp_path / "r",
        episodes=tmp_path / "e.jsonl",
        policy=policy,
        tools={"send_email": send_email, "archive": leaky_stub_target},
        probes=[StateProbe(lambda: world, name="mailbox")],
    )
    async with sb, sb.episode("c") as ep:
        await ep.call("send_email", to="a@b")
        # Something outside any call changes the world: nobody explains it.
        world["inbox"].append({"from": "x"})
        await ep.call("archive", to="a@b")
    (episode,) = read_episodes([tmp_path / "e.jsonl"])
    assert episode.header.oracles["mailbox"] == {"kind": "state"}
    send, archive = (s for s in episode.steps if isinstance(s, ToolCallStep))
    (change,) = send.effects.state
    assert change["changed"] == ["$.sent[0]"]
    assert send.findings == ()
    assert archive.effects.state == ()
    assert episode.end is not None
    assert [f.code for f in episode.end.findings] == ["unattributed_effect"]
    assert episode.end.unattributed.state[0]["changed"] == ["$.inbox[0]"]


async def test_overlapping_calls_make_world_probes_unattributed(tmp_path: Path) -> None:
    world: dict[str, int] = {"n": 0}

    async def bump(delay: float) -> int:
        await anyio.sleep(delay)
        world["n"] += 1
        return world["n"]

    sb = Sandbox(
        root=tmp_path / "r",
        episodes=tmp_path / "e.jsonl",
        tools={"bump": bump},
        probes=[StateProbe(lambda: world)],
    )
    async with sb, sb.episode("c") as ep, anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(ep.call, "bump", delay=0.05))
        tg.start_soon(functools.partial(ep.call, "bump", delay=0.0))
    (episode,) = read_episodes([tmp_path / "e.jsonl"])
    assert all(not s.effects for s in episode.steps if isinstance(s, ToolCallStep))
    assert episode.end is not None
    assert len(episode.end.unattributed.state) >= 1
