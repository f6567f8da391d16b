"""MCP tools emulated by a scripted loopback emulator, driven by the MCP SDK client: in
front of a real server (the npm filesystem server: it lists the tools, never sees the
emulated calls), and with no server at all (``--tools-list``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from emulator_endpoint import Endpoint, Request, Script, called, running_emulator
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_mcp_helpers import PROXY, calls, node_server, one_episode
from test_mcp_real_servers import dump

from litmus_sandbox.oracles.fs._probe import is_tripwire_effect

pytestmark = pytest.mark.anyio

KEY = "sk-mcp-emulator-31c5"


@pytest.fixture
def anyio_backend() -> str:
    """The proxy runs in a subprocess (asyncio): the test side needs only one backend."""
    return "asyncio"


def policy(tmp_path: Path, endpoint: Endpoint, tools: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(
        f"[tools]\n{tools}\n"
        '[emulator]\nkind = "openai"\nlabel = "fs-sim"\n'
        f'[emulator.params]\nbase_url = "{endpoint.url}"\nmodel = "sim"\n'
        'api_key_env = "EMULATOR_KEY"\nmax_retries = 0\n'
    )
    return path


def proxy(tmp_path: Path, *options: str, server: list[str] | None = None) -> StdioServerParameters:
    args = [*PROXY[1:], "--episodes", str(tmp_path / "eps.jsonl"), "--case-id", "fs-1"]
    args += ["--cache", str(tmp_path / "cache.sqlite"), *options]
    if server is not None:
        args += ["--", *server]
    # The SDK passes a server only a few variables: the key's is given explicitly, and the
    # test's own temp folder (a tripwire: the system's is every process's).
    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "EMULATOR_KEY": KEY}
    env["TMPDIR"] = os.environ.get("TMPDIR", str(tmp_path))
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=tmp_path)


def wrote(args: dict[str, Any], request: Request) -> dict[str, Any]:
    """As the server would answer: it declares an ``outputSchema`` of ``{content}``."""
    del request
    return {"result": {"content": f"Successfully wrote to {args['path']}"}}


async def test_a_real_servers_tools_are_emulated_from_its_listing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\n")
    server = [*node_server("filesystem"), str(root)]
    with running_emulator(Script(write_file=wrote)) as endpoint:
        rules = policy(tmp_path, endpoint, '"write_file" = "emulate"\n"edit_file" = "emulate"')
        params = proxy(tmp_path, "--policy", str(rules), "--root", str(root), server=server)
        async with Client(params, cache=None) as client:
            listed = {t["name"]: t for t in dump(await client.list_tools())["tools"]}
            target = str(root / "new.txt")
            got = dump(await client.call_tool("write_file", {"path": target, "content": "x"}))
            read = dump(await client.call_tool("read_text_file", {"path": str(root / "notes.txt")}))
    said = {"content": f"Successfully wrote to {target}"}
    assert json.loads(got["content"][0]["text"]) == said
    assert got["structured_content"] == said  # conforms to the listed outputSchema
    assert not got.get("is_error")
    assert not (root / "new.txt").exists()  # the server never got the call
    assert "alpha" in json.dumps(read)  # a real tool still reaches it
    (request,) = endpoint.requests
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert called(request) == ("write_file", {"content": "x", "path": target})
    # The emulator is told the tool as the server listed it.
    assert listed["write_file"]["description"][:60] in request.prompt
    assert '"arguments":{' in request.prompt
    assert '"path":{' in request.prompt
    ep = one_episode(tmp_path / "eps.jsonl")
    write, real = calls(ep)
    assert (write.tool, write.fidelity, real.fidelity) == ("write_file", "emulated", "real")
    facts = write.meta["emulator"]
    assert facts["label"] == "fs-sim"
    assert facts["asked"]["spec"]["description"] == listed["write_file"]["description"]
    assert ep.header.tool_modes["write_file"] == f"emulate:{facts['fingerprint']}"
    # Nothing happened in the root (a tripwire may see what another process did meanwhile).
    assert not [e for e in write.effects.fs if not is_tripwire_effect(e)]
    assert not write.effects.egress
    assert KEY not in (tmp_path / "eps.jsonl").read_text()


async def test_no_server_is_started_with_a_tools_list(tmp_path: Path) -> None:
    listing = {
        "tools": [
            {
                "name": "send_email",
                "description": "Send an email to one recipient.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                    "required": ["to", "body"],
                },
            },
            {"name": "delete_account", "inputSchema": {"type": "object"}},
        ]
    }
    (tmp_path / "tools.json").write_text(json.dumps(listing))

    def send(args: dict[str, Any], request: Request) -> dict[str, Any]:
        return {"result": {"queued": True, "to": args["to"]}}

    def refuse(args: dict[str, Any], request: Request) -> str:
        return '{"error": "account is locked", "error": "x"}'  # a key twice: failed

    with running_emulator(Script(send_email=send, delete_account=refuse)) as endpoint:
        rules = policy(tmp_path, endpoint, 'default = "emulate"')
        params = proxy(tmp_path, "--policy", str(rules), "--tools-list", "tools.json")
        async with Client(params, cache=None) as client:
            tools = dump(await client.list_tools())["tools"]
            sent = dump(await client.call_tool("send_email", {"to": "a@b.example", "body": "hi"}))
            failed = dump(await client.call_tool("delete_account", {"id": 7}))
        assert [t["name"] for t in tools] == ["send_email", "delete_account"]
        assert json.loads(sent["content"][0]["text"]) == {"queued": True, "to": "a@b.example"}
        assert failed["is_error"] is True
        assert "emulation of 'delete_account' failed (bad_answer)" in failed["content"][0]["text"]
        assert "Send an email to one recipient." in endpoint.requests[0].prompt
        ep = one_episode(tmp_path / "eps.jsonl")
        assert ep.header.meta["mcp"]["serverless_emulation"] is True
        assert [(s.tool, s.fidelity) for s in calls(ep)] == [
            ("send_email", "emulated"),
            ("delete_account", "emulated"),
        ]
        assert calls(ep)[1].meta["emulator"]["failure"]["class"] == "bad_answer"

        # The recording kept the listing: it serves a server-less emulation in its turn,
        # and the same calls after the same history are served from the cache.
        again = tmp_path / "again"
        again.mkdir()
        params = proxy(
            tmp_path, "--policy", str(rules), "--tools-list", str(tmp_path / "eps.jsonl")
        )
        params.args[params.args.index("--episodes") + 1] = str(again / "eps.jsonl")
        asked = len(endpoint.requests)
        async with Client(params, cache=None) as client:
            assert [t["name"] for t in dump(await client.list_tools())["tools"]] == [
                "send_email",
                "delete_account",
            ]
            resent = dump(await client.call_tool("send_email", {"to": "a@b.example", "body": "hi"}))
        assert resent["content"] == sent["content"]
        assert len(endpoint.requests) == asked  # served from the cache
        (step,) = calls(one_episode(again / "eps.jsonl"))
        assert step.meta["emulator"]["cached"] is True


def test_a_tools_list_with_a_policy_that_needs_a_server_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from litmus_sandbox._cli.main import main

    (tmp_path / "tools.json").write_text('{"tools": []}')
    (tmp_path / "p.toml").write_text(
        '[tools]\n"x" = "emulate"\n[emulator]\nkind = "openai"\n'
        '[emulator.params]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    )
    args = ["proxy", "mcp", "--policy", str(tmp_path / "p.toml")]
    assert main([*args, "--tools-list", str(tmp_path / "tools.json")]) == 2
    assert "'default' is in mode 'real'" in capsys.readouterr().err
    assert main([*args, "--tools-list", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "bad.json").write_text('{"tool": []}')
    assert main([*args, "--tools-list", str(tmp_path / "bad.json")]) == 2
    assert 'without a "tools" list' in capsys.readouterr().err


async def test_the_http_proxy_emulates_a_tool_before_the_client_listed_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over streamable HTTP, in front of server-everything: the proxy lists the tools for
    itself before the first emulated call, so the emulator is told the tool's entry."""
    import anyio
    from litmus_sandbox.adapters.mcp import HttpProxy
    from test_mcp_helpers import everything_over_http

    from litmus_sandbox import Policy

    monkeypatch.setenv("EMULATOR_KEY", KEY)
    echo = Script(echo=lambda args, r: {"result": f"emulated echo: {args['message']}"})
    with running_emulator(echo) as endpoint:
        rules = Policy.from_file(policy(tmp_path, endpoint, '"echo" = "emulate"'))
        async with everything_over_http() as upstream:
            proxy = HttpProxy(
                upstream,
                episodes=tmp_path / "eps.jsonl",
                root=tmp_path,
                policy=rules,
                timeout=20,
                cache=tmp_path / "cache.sqlite",
            )
            async with anyio.create_task_group() as tg:
                port = await tg.start(proxy.serve, "127.0.0.1", 0)
                async with Client(f"http://127.0.0.1:{port}/mcp", cache=None) as client:
                    got = dump(await client.call_tool("echo", {"message": "hi"}))
                    listed = {t["name"]: t for t in dump(await client.list_tools())["tools"]}
                proxy.stop()
    assert got["content"] == [{"type": "text", "text": "emulated echo: hi"}]
    (request,) = endpoint.requests
    assert listed["echo"]["description"] in request.prompt
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert (step.fidelity, step.meta["mcp"]["forwarded"]) == ("emulated", False)
    assert step.meta["emulator"]["asked"]["spec"]["input_schema"] == listed["echo"]["input_schema"]


async def test_an_emulated_result_must_fit_the_declared_output_schema(tmp_path: Path) -> None:
    """A tool with an ``outputSchema`` gets ``structuredContent`` only from a result that
    conforms (the SDK client checks it); any other result is a failed emulation, shown as
    a tool error, never reshaped to fit. A result that is not an object, for a tool
    without a schema, goes as text only (structured content is an object)."""
    schema = {
        "type": "object",
        "properties": {"status": {"type": "string"}, "id": {"type": "integer"}},
        "required": ["status", "id"],
    }
    listing = {
        "tools": [
            {"name": name, "inputSchema": {"type": "object"}, "outputSchema": schema}
            for name in ("send_ok", "send_short", "send_text", "send_null")
        ]
        + [{"name": "list_ids", "inputSchema": {"type": "object"}}]
    }
    (tmp_path / "tools.json").write_text(json.dumps(listing))
    answers: dict[str, Any] = {
        "send_ok": {"status": "queued", "id": 7},
        "send_short": {"status": "queued"},
        "send_text": "plain text",
        "send_null": None,
        "list_ids": [1, 2],
    }
    script = Script(**{n: (lambda a, r, v=v: {"result": v}) for n, v in answers.items()})
    with running_emulator(script) as endpoint:
        rules = policy(tmp_path, endpoint, 'default = "emulate"')
        params = proxy(tmp_path, "--policy", str(rules), "--tools-list", "tools.json")
        async with Client(params, cache=None) as client:
            await client.list_tools()
            got = {name: dump(await client.call_tool(name, {})) for name in answers}
    assert got["send_ok"]["structured_content"] == {"status": "queued", "id": 7}
    assert not got["send_ok"].get("is_error")
    for name in ("send_short", "send_text", "send_null"):
        assert got[name]["is_error"] is True, name
        assert got[name].get("structured_content") is None, name
        assert f"emulation of {name!r} failed (bad_answer)" in got[name]["content"][0]["text"]
    assert got["list_ids"].get("structured_content") is None
    assert json.loads(got["list_ids"]["content"][0]["text"]) == [1, 2]
    steps = {s.tool: s for s in calls(one_episode(tmp_path / "eps.jsonl"))}
    assert steps["send_ok"].shown.structured == {"status": "queued", "id": 7}
    for name in ("send_short", "send_text", "send_null"):
        failure = steps[name].meta["emulator"]["failure"]
        assert failure["class"] == "bad_answer"
        assert "does not conform to the tool's outputSchema" in failure["detail"]
        assert steps[name].shown.structured is None  # nothing made up, in the record either
        assert "structured_placeholder" not in steps[name].meta["mcp"]
    assert steps["list_ids"].shown.structured is None
    assert steps["list_ids"].meta["mcp"]["structured_not_an_object"] is True
