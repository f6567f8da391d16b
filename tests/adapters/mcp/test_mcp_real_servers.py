"""The stdio proxy in front of real MCP servers, driven by the official ``mcp`` client.

@modelcontextprotocol/server-filesystem (npm, 2025-11-25 handshake) and mcp-server-git
(PyPI, stateless 2026-07-28): listing and calling tools through the proxy gives what a
direct connection gives; write, edit and move calls carry their filesystem effects (the
fs oracle, ``--watch-fs``); policies keep the server from seeing what it must not.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from factories import PROGRAMS
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from test_mcp_helpers import PROXY, calls, git_server, node_server, one_episode

from litmus_sandbox import FsEffect
from litmus_sandbox.oracles.fs._probe import is_tripwire_effect

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def proxied(tmp_path: Path, server: list[str], *options: str) -> StdioServerParameters:
    args = [*PROXY[1:], "--episodes", str(tmp_path / "eps.jsonl"), *options, "--", *server]
    return StdioServerParameters(command=sys.executable, args=args)


def direct(server: list[str], cwd: Path) -> StdioServerParameters:
    return StdioServerParameters(command=server[0], args=server[1:], cwd=cwd)


def in_root(effects: Iterable[FsEffect]) -> set[tuple[str, str]]:
    """Effects under the root: tripwire effects (absolute paths: home, the system temp
    directory) also see whatever other processes on the machine do meanwhile."""
    return {(e.op, e.path) for e in effects if not is_tripwire_effect(e)}


def dump(result: Any) -> Any:
    return result.model_dump(mode="json", exclude_none=True)


async def test_filesystem_server_works_through_the_proxy_with_effects(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\n")
    server = [*node_server("filesystem"), str(root)]
    read = {"path": str(root / "notes.txt")}
    async with Client(direct(server, root), cache=None) as client:
        tools_direct = dump(await client.list_tools())
        read_direct = dump(await client.call_tool("read_text_file", read))
    options = ("--root", str(root), "--case-id", "fs-1")  # --root: the fs oracle watches it
    async with Client(proxied(tmp_path, server, *options), cache=None) as client:
        assert dump(await client.list_tools()) == tools_direct
        assert dump(await client.call_tool("read_text_file", read)) == read_direct
        wrote = await client.call_tool(
            "write_file", {"path": str(root / "new.txt"), "content": "hello"}
        )
        edited = await client.call_tool(
            "edit_file",
            {"path": str(root / "notes.txt"), "edits": [{"oldText": "beta", "newText": "gamma"}]},
        )
        moved = await client.call_tool(
            "move_file", {"source": str(root / "new.txt"), "destination": str(root / "moved.txt")}
        )
        outside = await client.call_tool("read_text_file", {"path": "/etc/hostname"})
    assert [wrote.is_error, edited.is_error, moved.is_error] == [False, False, False]
    assert outside.is_error  # the server's own refusal, shown as it gave it
    assert (root / "moved.txt").read_text() == "hello"
    assert (root / "notes.txt").read_text() == "alpha\ngamma\n"
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.case_id == "fs-1"
    assert ep.complete
    assert ep.header.meta["mcp"]["protocol_version"] == "2025-11-25"
    by_tool = {s.tool: s for s in calls(ep)}
    assert all(s.fidelity == "real" for s in calls(ep))

    def ops(tool: str) -> set[tuple[str, str]]:
        return in_root(by_tool[tool].effects.fs)

    assert ops("read_text_file") == set()
    assert ops("write_file") == {("created", "new.txt")}
    assert ops("edit_file") == {("modified", "notes.txt")}
    assert ops("move_file") == {("deleted", "new.txt"), ("created", "moved.txt")}
    refused = calls(ep)[-1]
    assert refused.shown.is_error
    assert refused.meta["mcp"]["outcome"] == "tool_error"
    assert refused.meta["mcp"]["forwarded"] is True


@pytest.mark.parametrize("list_first", [True, False])
async def test_stubbed_and_denied_calls_never_reach_the_filesystem_server(
    tmp_path: Path, list_first: bool
) -> None:
    """Whether or not the client lists the tools first (the official SDK lists them only
    after its first call, then checks that call's result against the output schema)."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "keep.txt").write_text("keep")
    policy = tmp_path / "policy.toml"
    policy.write_text(
        # These tools declare output schemas, which the official client enforces: the
        # proxy's own answers must carry conforming structured content.
        '[tools]\nwrite_file = { mode = "stub", result = "Successfully wrote" }\n'
        'edit_file = { mode = "stub", result = { content = "Edited" } }\n'
        'create_directory = { mode = "swallow", run = false, shown = "" }\n'
        'move_file = { mode = "deny", message = "moves are not allowed here" }\n'
    )
    server = [*node_server("filesystem"), str(root)]
    options = ("--root", str(root), "--policy", str(policy))
    async with Client(proxied(tmp_path, server, *options), cache=None) as client:
        if list_first:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed["write_file"].output_schema is not None
        stub = await client.call_tool(
            "write_file", {"path": str(root / "evil.txt"), "content": "x"}
        )
        edited = await client.call_tool("edit_file", {"path": str(root / "keep.txt"), "edits": []})
        swallowed = await client.call_tool("create_directory", {"path": str(root / "d")})
        denied = await client.call_tool(
            "move_file", {"source": str(root / "keep.txt"), "destination": str(root / "x.txt")}
        )
    assert not stub.is_error
    assert stub.structured_content == {"content": "Successfully wrote"}
    assert edited.structured_content == {"content": "Edited"}  # the stub's own structure
    assert not swallowed.is_error
    assert swallowed.structured_content == {"content": ""}
    assert denied.is_error
    assert denied.content[0].text == "moves are not allowed here"  # type: ignore[union-attr]
    assert sorted(p.name for p in root.iterdir()) == ["keep.txt"]
    write, edit, mkdir, move = calls(one_episode(tmp_path / "eps.jsonl"))
    assert [s.fidelity for s in (write, edit, mkdir, move)] == [
        "stubbed",
        "stubbed",
        "swallowed",
        "denied",
    ]
    # The record says what the client was shown, placeholder structure included.
    assert write.shown.structured == {"content": "Successfully wrote"}
    assert write.meta["mcp"]["structured_placeholder"] is True
    assert "structured_placeholder" not in edit.meta["mcp"]
    assert mkdir.shown.structured == {"content": ""}
    assert all(in_root(s.effects.fs) == set() for s in (write, edit, mkdir, move))
    assert write.meta["mcp"]["forwarded"] is False
    assert move.meta["mcp"]["reply"] == "result"


def make_repo(path: Path) -> None:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (path / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)


async def test_git_server_speaks_the_stateless_revision_through_the_proxy(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    (repo / "b.txt").write_text("two\n")
    server = [*git_server(), "--repository", str(repo)]
    status = {"repo_path": str(repo)}
    async with Client(direct(server, repo), cache=None) as client:
        tools_direct = dump(await client.list_tools())
        status_direct = dump(await client.call_tool("git_status", status))
    async with Client(proxied(tmp_path, server, "--root", str(repo)), cache=None) as client:
        assert dump(await client.list_tools()) == tools_direct
        meta: Any = {"litmus/case_id": "git-1"}  # the SDK's TypedDict does not know our key
        got = await client.call_tool("git_status", status, meta=meta)
        assert dump(got) == status_direct
        added = await client.call_tool("git_add", {"repo_path": str(repo), "files": ["b.txt"]})
        outside = await client.call_tool("git_status", {"repo_path": str(tmp_path)})
        with pytest.raises(MCPError, match="Unknown tool"):  # Python servers: a protocol error
            await client.call_tool("no_such_tool", {})
    assert not added.is_error
    assert outside.is_error
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.case_id == "git-1"
    assert ep.header.meta["mcp"]["case_id_source"] == "meta:tools/call"
    assert ep.header.meta["mcp"]["protocol_version"] == "2026-07-28"
    steps = calls(ep)
    assert [s.fidelity for s in steps] == ["real"] * 4
    assert [s.meta["mcp"]["outcome"] for s in steps[2:]] == ["tool_error", "protocol_error"]
    assert "b.txt" in steps[0].shown.text()


async def test_a_stub_fits_a_stateless_servers_output_schema_from_the_first_call(
    tmp_path: Path,
) -> None:
    """The proxy lists the tools itself in the client's own envelope (protocol revision,
    capabilities), so a stand-in answer fits a schema the client has not fetched yet."""
    server = [sys.executable, str(PROGRAMS / "mcp_typed_server.py")]
    async with Client(direct(server, tmp_path), cache=None) as client:
        real = await client.call_tool("weather", {"city": "Oslo"})
    assert real.structured_content == {"city": "Oslo", "celsius": 21.5}
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\nweather = { mode = "stub", result = "sunny" }\n')
    async with Client(proxied(tmp_path, server, "--policy", str(policy)), cache=None) as client:
        stub = await client.call_tool("weather", {"city": "Oslo"})
    assert not stub.is_error
    assert stub.structured_content == {"city": "sunny", "celsius": 0.0}
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.header.meta["mcp"]["protocol_version"] == "2026-07-28"
    (step,) = calls(ep)
    assert step.fidelity == "stubbed"
    assert step.meta["mcp"]["structured_placeholder"] is True
