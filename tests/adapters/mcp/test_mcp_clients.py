"""Real MCP clients through the proxy: what each receives is what it gets direct.

The matrix: @modelcontextprotocol/server-everything over stdio and streamable HTTP and
@modelcontextprotocol/server-filesystem over stdio, each with the Python SDK (2.3), the
TypeScript SDK v1 (1.32) and v2 (2.3, version negotiation on) as client, running a
scripted session (``tests/mcp_servers/clients``: lists, calls including ones that fail,
a resource, a prompt, ping, progress, a cancelled call, a task) direct and proxied;
TS SDK v2 against mcp-server-git in the 2026-07-28 revision; and the MCP Inspector
CLI's ``tools/list`` and ``tools/call``. Each proxied session must
give the client the same transcript (ids and ``_meta`` aside), record every tools/call
once as ``real``, and leave one episode, ``complete`` after the SDK's own shutdown
(stdio: stdin closed, 2 s, SIGTERM; HTTP: the client just leaves, or sends DELETE).

All sessions of one server run at once (they mostly wait on the servers' timers and
their SDKs' 2 s shutdown), which keeps the file near 70 s on two cores. Left out for time: server-memory and
server-sequential-thinking (pinned and installed, but their tools are plain calls the
filesystem cells already cover), the Inspector over HTTP, and filesystem over HTTP (a
stdio-only server).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_mcp_clients_helpers import (
    CLIENTS,
    NODE_MODULES,
    Session,
    background,
    bound_url,
    check_recording,
    node,
    proxy_args,
    read_episodes,
    run_session,
)
from test_mcp_helpers import PROXY, free_port, git_server, node_server, one_episode

from litmus_sandbox.oracles.fs._probe import is_tripwire_effect

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


LONG_OP = "trigger-long-running-operation"
EVERYTHING_PLAN: list[dict[str, Any]] = [
    {"op": "tools/list"},
    {"op": "resources/list"},
    {"op": "prompts/list"},
    {"op": "call", "name": "echo", "arguments": {"message": "hi"}},
    {"op": "call", "name": "get-sum", "arguments": {"a": "x"}},  # invalid arguments
    {"op": "call", "name": "no-such-tool", "arguments": {}},
    {"op": "read", "uri": "demo://resource/static/document/architecture.md"},
    {"op": "prompt", "name": "simple-prompt"},
    {"op": "ping"},
    {"op": "progress", "name": LONG_OP, "arguments": {"duration": 0.3, "steps": 3}},
    {"op": "cancel", "name": LONG_OP, "arguments": {"duration": 5, "steps": 10}},
    {"op": "call", "name": "echo", "arguments": {"message": "after the cancel"}},
    {"op": "task", "name": "simulate-research-query", "arguments": {"topic": "relays"}},
]
EVERYTHING_OUTCOMES = {
    3: "result",
    4: "tool_error",
    5: "tool_error",
    9: "result",
    10: "interrupted",
    11: "result",
    12: "result",
}

FILESYSTEM_PLAN: list[dict[str, Any]] = [
    {"op": "tools/list"},
    {"op": "resources/list"},  # not served: an error, the same either way
    {"op": "prompts/list"},
    {"op": "call", "name": "list_allowed_directories", "arguments": {}},
    {"op": "call", "name": "write_file", "arguments": {"path": "<root>/new.txt", "content": "hi"}},
    {"op": "call", "name": "read_text_file", "arguments": {"path": "<root>/new.txt"}},
    {"op": "call", "name": "read_text_file", "arguments": {"path": "<root>/missing.txt"}},
    {"op": "call", "name": "list_directory", "arguments": {"path": "<root>"}},
    {"op": "call", "name": "no_such_tool", "arguments": {}},
    {"op": "ping"},
]
FILESYSTEM_OUTCOMES = {3: "result", 4: "result", 5: "result", 6: "tool_error", 8: "tool_error"}


async def make_repo(path: Path, files: dict[str, str]) -> None:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    await anyio.run_process([*git, "init", "-q", "-b", "main"])
    for name, text in files.items():
        (path / name).write_text(text)
    await anyio.run_process([*git, "add", *files])
    await anyio.run_process([*git, "commit", "-q", "-m", "first"])
    (path / "b.txt").write_text("two\n")


def in_plan(plan: list[dict[str, Any]], root: Path) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(json.dumps(plan).replace("<root>", str(root)))
    return loaded


def by_client(
    sessions: list[Session], clients: tuple[str, ...] = CLIENTS
) -> dict[str, tuple[Session, Session]]:
    """client -> (direct, proxied)."""
    pairs: dict[str, tuple[Session, Session]] = {}
    for client in clients:
        direct, proxied = sorted(
            (s for s in sessions if s.client == client), key=lambda s: s.proxied
        )
        pairs[client] = (direct, proxied)
    return pairs


async def stdio_sessions(
    tmp_path: Path,
    server: list[str],
    plan: list[dict[str, Any]],
    *options: str,
    repo: dict[str, str] | None = None,
    only: str | None = None,
) -> dict[str, tuple[Session, Session]]:
    """Every client, direct and proxied, all at once, each with a root of its own (the
    server's ``<root>`` argument; with ``repo``, a git repository committing those
    files, and an untracked ``b.txt``); ``only``: that client alone."""
    sessions: list[Session] = []

    async def one(client: str, proxied: bool) -> None:
        tmp = tmp_path / f"{client}-{'proxied' if proxied else 'direct'}"
        root = tmp / "root"
        root.mkdir(parents=True)
        if repo is not None:
            await make_repo(root, repo)
        command = [str(root) if c == "<root>" else c for c in server]
        if proxied:
            command = [*proxy_args(tmp, "--root", str(root), *options), "--", *command]
        session = Session(client, proxied)
        session.transcript = await run_session(
            client, in_plan(plan, root), ["stdio", *command], root
        )
        if proxied:
            session.episodes = read_episodes(tmp)
        sessions.append(session)

    clients = CLIENTS if only is None else (only,)
    async with anyio.create_task_group() as tg:
        for client in clients:
            for proxied in (False, True):
                tg.start_soon(one, client, proxied)
    return by_client(sessions, clients)


def check_everything(direct: Session, proxied: Session, *, cancelled: bool = True) -> None:
    """The transcripts match, and they are what the plan asked for (so that a proxy
    breaking both the same way, or a broken session script, cannot pass); without
    ``cancelled``, the plan's cancelled call was a ping."""
    who = direct.client
    assert proxied.transcript == direct.transcript, who
    steps = direct.transcript["steps"]
    assert "error" not in steps[0], (who, steps[0])
    assert steps[3]["result"]["content"][0]["text"] == "Echo: hi", who
    assert steps[4]["result"]["isError"], who
    assert steps[5]["result"]["isError"], who
    assert steps[9]["progressed"] is True, who
    assert steps[10] == (
        {"op": "cancel", "cancelled": True} if cancelled else {"op": "ping", "result": {}}
    ), who
    assert "after the cancel" in steps[11]["result"]["content"][0]["text"], who
    assert steps[12]["created"] == {"status": "working"}, who
    assert "Research Report" in steps[12]["result"]["content"][0]["text"], who


async def test_server_everything_over_stdio(tmp_path: Path) -> None:
    server = node_server("everything")
    pairs = await stdio_sessions(tmp_path, server, EVERYTHING_PLAN, "--no-watch-fs")
    for direct, proxied in pairs.values():
        check_everything(direct, proxied)
        steps = check_recording(proxied, EVERYTHING_PLAN, EVERYTHING_OUTCOMES)
        progress = steps[3].meta["mcp"]["notifications"]
        assert [n["params"]["progress"] for n in progress] == [1, 2, 3]
        task = steps[-1]
        assert task.meta["mcp"]["task"]["result_later"] is True
        assert "Research Report" in task.shown.text()


async def test_server_filesystem_over_stdio(tmp_path: Path) -> None:
    server = [*node_server("filesystem"), "<root>"]
    pairs = await stdio_sessions(tmp_path, server, FILESYSTEM_PLAN)
    for client, (direct, proxied) in pairs.items():
        assert proxied.transcript == direct.transcript, client
        steps = direct.transcript["steps"]
        # No resources here: the server says so, or TS SDK v2 answers [] itself.
        assert steps[1].get("error", {}).get("code") == -32601 or client == "v2", client
        assert steps[5]["result"]["content"][0]["text"] == "hi", client
        assert "[FILE] new.txt" in steps[7]["result"]["content"][0]["text"], client
        recorded = check_recording(proxied, FILESYSTEM_PLAN, FILESYSTEM_OUTCOMES)
        write = recorded[1]
        effects = {(e.op, e.path) for e in write.effects.fs if not is_tripwire_effect(e)}
        assert effects == {("created", "new.txt")}, client


GIT_PLAN: list[dict[str, Any]] = [
    {"op": "tools/list"},
    {"op": "resources/list"},
    {"op": "prompts/list"},
    {"op": "call", "name": "git_status", "arguments": {"repo_path": "<root>"}},
    {"op": "call", "name": "git_status", "arguments": {"repo_path": "/"}},  # outside
    {"op": "call", "name": "no_such_tool", "arguments": {}},  # a protocol error here
    {"op": "ping"},  # removed in 2026-07-28: TS SDK v2 refuses to send it
]
GIT_OUTCOMES = {3: "result", 4: "tool_error", 5: "protocol_error"}


async def test_ts_sdk_v2_speaks_the_2026_revision_through_the_proxy(tmp_path: Path) -> None:
    """mcp-server-git speaks 2026-07-28: TS SDK v2 negotiates it, after a probe on a
    sibling process (a second proxy, which records nothing). Only v2 here: a Python
    server and proxy per process make this cell CPU-bound, and the Python SDK's 2026
    session through the proxy is test_mcp_real_servers.py's."""
    git = [*git_server(), "--repository", "<root>"]
    files = {"a.txt": "one\n"}
    pairs = await stdio_sessions(tmp_path, git, GIT_PLAN, "--no-watch-fs", repo=files, only="v2")
    direct, proxied = pairs["v2"]
    assert proxied.transcript == direct.transcript
    assert direct.transcript["initialize"]["protocolVersion"] == "2026-07-28"
    steps = direct.transcript["steps"]
    assert "b.txt" in steps[3]["result"]["content"][0]["text"]
    assert steps[4]["result"]["isError"]
    assert steps[5]["error"]["code"] == -32602
    check_recording(proxied, GIT_PLAN, GIT_OUTCOMES)


async def http_sessions(
    tmp_path: Path, plan: list[dict[str, Any]], clients: tuple[str, ...] = CLIENTS
) -> dict[str, tuple[Session, Session]]:
    """server-everything over streamable HTTP; every client direct and through a proxy
    of its own (``--listen 127.0.0.1:0``), all at once. Each proxy is stopped (SIGTERM)
    once its client has left: a session that finished is not aborted by that."""
    port = free_port()
    everything = [*node_server("everything"), "streamableHttp"]
    env = {**os.environ, "PORT": str(port)}
    upstream = f"http://127.0.0.1:{port}/mcp"
    sessions: list[Session] = []

    async def one(client: str, proxied: bool) -> None:
        tmp = tmp_path / f"{client}-{'proxied' if proxied else 'direct'}"
        root = tmp / "root"
        root.mkdir(parents=True)
        session = Session(client, proxied)
        if not proxied:
            session.transcript = await run_session(client, plan, ["http", upstream], root)
        else:
            listen = ["--listen", "127.0.0.1:0", "--upstream", upstream]
            async with background(proxy_args(tmp, *listen), b"MCP proxy on") as (_, said):
                session.transcript = await run_session(
                    client, plan, ["http", bound_url(said)], root
                )
            session.episodes = read_episodes(tmp)
        sessions.append(session)

    async with (
        background(everything, b"listening on port", env=env),
        anyio.create_task_group() as tg,
    ):
        for client in clients:
            for proxied in (False, True):
                tg.start_soon(one, client, proxied)
    return by_client(sessions, clients)


#: Over HTTP the cancelled call has a test of its own (below): here, a ping instead.
HTTP_PLAN = [*EVERYTHING_PLAN[:10], {"op": "ping"}, *EVERYTHING_PLAN[11:]]
HTTP_OUTCOMES = {i: outcome for i, outcome in EVERYTHING_OUTCOMES.items() if i != 10}


async def test_server_everything_over_streamable_http(tmp_path: Path) -> None:
    failures: list[str] = []
    for client, (direct, proxied) in (await http_sessions(tmp_path, HTTP_PLAN)).items():
        try:
            check_everything(direct, proxied, cancelled=False)
            steps = check_recording(proxied, HTTP_PLAN, HTTP_OUTCOMES)
            assert proxied.episodes[0].header.meta["mcp"]["transport"] == "streamable-http"
            assert steps[-1].meta["mcp"]["task"]["result_later"] is True
        except AssertionError as exc:
            failures.append(f"{client}: {exc}")
    assert not failures, "\n".join(failures)


async def test_a_call_cancelled_over_http_changes_nothing_else(tmp_path: Path) -> None:
    plan = [{"op": "cancel", "name": LONG_OP, "arguments": {"duration": 2, "steps": 10}}]
    port = free_port()
    everything = [*node_server("everything"), "streamableHttp"]
    upstream = f"http://127.0.0.1:{port}/mcp"
    listen = ["--listen", "127.0.0.1:0", "--upstream", upstream]
    got: dict[str, Any] = {}

    async def direct() -> None:
        got["direct"] = await run_session("v1", plan, ["http", upstream], tmp_path)

    async with (
        background(everything, b"listening on port", env={**os.environ, "PORT": str(port)}),
        background(proxy_args(tmp_path, *listen), b"MCP proxy on") as (proxy, said),
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(direct)
            got["proxied"] = await run_session("v1", plan, ["http", bound_url(said)], tmp_path)
        # The server runs the cancelled call on (2 s), its progress going to a client
        # that has left: the proxy must outlive that, serving on.
        with anyio.move_on_after(3):
            await proxy.wait()
        assert proxy.returncode is None, "the proxy died"
    assert got["proxied"] == got["direct"]
    assert got["direct"]["steps"] == [{"op": "cancel", "cancelled": True}]
    (ep,) = read_episodes(tmp_path)
    assert ep.complete, ep.end
    assert ep.steps[0].meta["mcp"]["outcome"] == "interrupted"


INSPECTOR = NODE_MODULES / "@modelcontextprotocol" / "inspector" / "clients" / "launcher"


async def inspector(method: list[str], server: list[str]) -> Any:
    command = [node(), str(INSPECTOR / "build" / "index.js"), "--cli", *method, "--", *server]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return json.loads(done.stdout)


async def test_the_inspector_cli_lists_and_calls_through_the_proxy(tmp_path: Path) -> None:
    server = node_server("everything")
    methods = {
        "list": ["--method", "tools/list"],
        "call": ["--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=hi"],
    }
    got: dict[tuple[str, bool], Any] = {}

    async def one(name: str, proxied: bool) -> None:
        command = server
        if proxied:
            eps = tmp_path / name
            eps.mkdir()
            command = [*PROXY, "--episodes", str(eps / "eps.jsonl"), "--no-watch-fs"]
            command += ["--root", str(tmp_path), "--", *server]
        got[name, proxied] = await inspector(methods[name], command)

    async with anyio.create_task_group() as tg:
        for name in methods:
            for proxied in (False, True):
                tg.start_soon(one, name, proxied)
    assert got["list", True] == got["list", False]
    assert "echo" in {t["name"] for t in got["list", True]["tools"]}
    assert (
        got["call", True]
        == got["call", False]
        == {"content": [{"type": "text", "text": "Echo: hi"}]}
    )
    listed = one_episode(tmp_path / "list" / "eps.jsonl")
    assert listed.complete
    assert listed.steps == ()  # a session that called nothing: a run with no step
    called = one_episode(tmp_path / "call" / "eps.jsonl")
    assert called.complete
    assert [(s.tool, s.fidelity) for s in called.steps] == [("echo", "real")]  # type: ignore[union-attr]
