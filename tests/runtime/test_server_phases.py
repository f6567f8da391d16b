"""``sandbox.server_phases()``: a launched server's start-up and shutdown, listed apart.

The writes here stand for a server's (outside the root, in a tripwire) and the agent's
(through a call, or with no call in flight), made in-process at each phase.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from litmus_sandbox import ConfigError, Effects, EpisodeEnd, read_episodes
from litmus_sandbox._runtime.sandbox import Sandbox
from litmus_sandbox.oracles.fs import FsProbe

pytestmark = pytest.mark.anyio


def write(path: str, text: str) -> str:
    Path(path).write_text(text)
    return "ok"


def make(tmp_path: Path) -> tuple[Sandbox, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    probe = FsProbe(root, tripwires=[outside])
    sandbox = Sandbox(
        root=root, episodes=tmp_path / "eps.jsonl", tools={"write": write}, probes=[probe]
    )
    return sandbox, outside


def the_end(tmp_path: Path) -> EpisodeEnd:
    (ep,) = read_episodes([tmp_path / "eps.jsonl"])
    assert ep.end is not None
    return ep.end


def ops(effects: Effects | object) -> set[tuple[str, str]]:
    assert isinstance(effects, Effects)
    return {(e.op, e.path) for e in effects.fs}


async def test_start_up_session_and_shutdown_are_told_apart(tmp_path: Path) -> None:
    sandbox, outside = make(tmp_path)
    log = outside / "server.log"
    async with sandbox, sandbox.server_phases() as phases:
        log.write_text("starting\n")  # before the baseline would have been taken
        await phases.end_startup()
        (tmp_path / "root" / "between.txt").write_text("the agent's, with no call")
        async with sandbox.episode("c") as ep:
            await ep.call("write", path=str(tmp_path / "root" / "called.txt"), text="x")
            await phases.end_session()
            log.write_text("starting\nexit 0\n")
    end = the_end(tmp_path)
    assert ops(end.startup) == {("created", str(log))}
    assert ops(end.shutdown) == {("modified", str(log))}
    assert ops(end.unattributed) == {("created", "between.txt")}
    assert [(f.code, f.path) for f in end.findings] == [("unattributed_effect", "between.txt")]


async def test_a_session_that_did_not_end_cleanly_has_no_shutdown(tmp_path: Path) -> None:
    """Without the client's clean end (the server died, a signal), what no call explains
    after the start-up is unattributed, and a write outside the root an escape."""
    sandbox, outside = make(tmp_path)
    late = outside / "late.txt"
    async with sandbox, sandbox.server_phases() as phases, sandbox.episode("c"):
        await phases.end_startup()
        late.write_text("x")
    end = the_end(tmp_path)
    assert end.shutdown is msgspec.UNSET  # left out of the record
    assert ops(end.unattributed) == {("created", str(late))}
    assert {f.code for f in end.findings} == {"unattributed_effect", "escape"}


async def test_a_client_that_never_got_past_the_handshake_saw_only_the_start_up(
    tmp_path: Path,
) -> None:
    sandbox, outside = make(tmp_path)
    async with sandbox, sandbox.server_phases(), sandbox.episode("c"):
        (outside / "cache").write_text("x")
    end = the_end(tmp_path)
    assert ops(end.startup) == {("created", str(outside / "cache"))}
    assert not end.unattributed
    assert end.findings == ()


async def test_without_phases_the_end_record_is_as_before(tmp_path: Path) -> None:
    sandbox, outside = make(tmp_path)
    async with sandbox, sandbox.episode("c"):
        (outside / "x").write_text("x")
    (line,) = [
        json.loads(text)
        for text in (tmp_path / "eps.jsonl").read_text().splitlines()
        if '"kind":"end"' in text
    ]
    assert "startup" not in line  # left out: old readers see the record they know
    assert "shutdown" not in line
    assert [e["path"] for e in line["unattributed"]["fs"]] == [str(outside / "x")]


async def test_one_server_at_a_time(tmp_path: Path) -> None:
    sandbox, _ = make(tmp_path)
    async with sandbox, sandbox.server_phases():
        with pytest.raises(ConfigError, match="one tool server at a time"):
            async with sandbox.server_phases():
                pass
