"""A tool server's own start-up and shutdown, told apart from what the agent did.

Real servers through the stdio proxy, driven by the official ``mcp`` client, with
``HOME`` in a temporary folder (a tripwire): ``npx -y @modelcontextprotocol/server-filesystem``
(npx writes its debug log under ``~/.npm/_logs`` as it starts and appends to it as it
exits), and a Python server that writes where a call or a resource read tells it to
(``tests/programs/mcp_writer_server.py``). What a server does before the client's first
message past the handshake is its start-up, what it does after the client hung up cleanly
its shutdown: listed on the end record, with no finding. What the agent causes, through a
call or any other request, stays the agent's.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from factories import PROGRAMS
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_mcp_helpers import NODE_MODULES, PROXY, calls, one_episode

from litmus_sandbox import Effects, Episode, Finding
from litmus_sandbox._cli.main import main

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class World:
    """A temporary home (a tripwire), and a sandbox root in a project folder."""

    def __init__(self, tmp_path: Path) -> None:
        base = Path(os.path.realpath(tmp_path))
        self.home = base / "home"
        self.project = base / "proj"
        self.root = self.project / "root"
        self.home.mkdir()
        self.root.mkdir(parents=True)
        self.episodes = base / "eps.jsonl"

    def params(self, server: list[str], **env: str) -> StdioServerParameters:
        args = [*PROXY[1:], "--episodes", str(self.episodes), "--root", str(self.root)]
        args += ["--case-id", "phases", "--", *server]
        return StdioServerParameters(
            command=sys.executable, args=args, env={"HOME": str(self.home), **env}
        )

    def episode(self) -> Episode:
        ep = one_episode(self.episodes)
        assert ep.complete
        return ep


def paths(effects: Effects | object) -> set[str]:
    return {e.path for e in effects.fs} if isinstance(effects, Effects) else set()


def every_finding(ep: Episode) -> list[Finding]:
    assert ep.end is not None
    return [*ep.end.findings, *(f for s in calls(ep) for f in s.findings)]


def writer(world: World) -> tuple[list[str], Path, Path]:
    """The Python server's command line, its own log, and the file a resource read writes."""
    log, note = world.home / ".writer" / "writer.log", world.home / "note.txt"
    return [sys.executable, str(PROGRAMS / "mcp_writer_server.py"), str(log), str(note)], log, note


async def test_npx_start_up_and_shutdown_are_the_servers_not_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    npx = shutil.which("npx")
    if npx is None:
        pytest.fail("npx is not installed (Node.js's npm ships it)")
    world = World(tmp_path)
    # npx finds the package in the project's node_modules (the test install), offline.
    (world.project / "node_modules").symlink_to(NODE_MODULES.parent)
    server = [npx, "-y", "@modelcontextprotocol/server-filesystem", str(world.root)]
    # npm's update check is a background request timed by the network: off, as a
    # developer's ~/.npmrc has it (what npx writes to its log is the same either way).
    params = world.params(server, npm_config_update_notifier="false")
    async with Client(params, cache=None) as client:
        await client.list_tools()
        wrote = await client.call_tool(
            "write_file", {"path": str(world.root / "a.txt"), "content": "hi"}
        )
    assert not wrote.is_error
    ep = world.episode()
    end = ep.end
    assert end is not None
    logs = f"{world.home}/.npm/_logs/"
    started = {(e.op, e.path) for e in end.startup.fs} if isinstance(end.startup, Effects) else {}
    (log,) = [p for op, p in started if op == "created" and p.startswith(logs)]
    assert log.endswith("-debug-0.log")
    assert isinstance(end.shutdown, Effects)
    assert ("modified", log) in {(e.op, e.path) for e in end.shutdown.fs}  # "exit 0", "ok"
    npm = f"{world.home}/.npm/"
    assert not [p for p in paths(end.unattributed) if p.startswith(npm)]
    assert not [f for f in every_finding(ep) if (f.path or "").startswith(npm)]
    # The agent's call keeps its effect.
    (step,) = [s for s in calls(ep) if s.tool == "write_file"]
    assert ("created", "a.txt") in {(e.op, e.path) for e in step.effects.fs}
    capsys.readouterr()
    assert main(["show", str(world.episodes)]) == 0
    out = capsys.readouterr().out
    assert "server start-up: created" in out
    assert "server shutdown: modified" in out
    assert "finding:" not in out


async def test_an_escape_through_a_call_is_still_the_calls(tmp_path: Path) -> None:
    world = World(tmp_path)
    server, log, _ = writer(world)
    stolen = world.home / "stolen.txt"
    async with Client(world.params(server), cache=None) as client:
        wrote = await client.call_tool("write", {"path": str(stolen), "text": "x"})
    assert not wrote.is_error
    ep = world.episode()
    end = ep.end
    assert end is not None
    (step,) = calls(ep)
    (effect,) = [e for e in step.effects.fs if e.path == str(stolen)]
    assert (effect.op, effect.attribution) == ("created", "window")  # its window: a server
    assert [f.code for f in step.findings if f.path == str(stolen)] == ["escape"]
    assert str(stolen) not in paths(end.startup) | paths(end.shutdown) | paths(end.unattributed)
    # The server's own log: created as it started, appended to as it exited; no finding.
    assert str(log) in paths(end.startup)
    assert str(log) in paths(end.shutdown)
    assert not [f for f in every_finding(ep) if f.path == str(log)]


async def test_a_request_before_the_first_call_that_acts_is_the_agents(tmp_path: Path) -> None:
    """A ``resources/read`` ends the start-up: what its handler writes is not the server's
    start-up but an effect no call explains, with its findings (it is outside the root)."""
    world = World(tmp_path)
    server, log, note = writer(world)
    async with Client(world.params(server), cache=None) as client:
        read = await client.read_resource("note://read")
        await client.call_tool("write", {"path": str(world.root / "in.txt"), "text": "y"})
    assert read.contents[0].text == "a note"  # type: ignore[union-attr]
    assert note.read_text() == "read\n"
    ep = world.episode()
    end = ep.end
    assert end is not None
    assert ("created", str(note)) in {(e.op, e.path) for e in end.unattributed.fs}
    codes = {f.code for f in end.findings if f.path == str(note)}
    assert codes == {"unattributed_effect", "escape"}
    assert str(note) not in paths(end.startup) | paths(end.shutdown)
    assert str(log) in paths(end.startup)
    (step,) = calls(ep)
    assert {(e.op, e.path) for e in step.effects.fs} == {("created", "in.txt")}
