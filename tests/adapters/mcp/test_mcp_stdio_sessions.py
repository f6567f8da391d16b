"""The stdio MCP proxy against a scripted server: replay, the server's egress, stubs over
the cap, tasks, and how a session ends (a clean shutdown, a probe)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import pytest
from factories import LoopbackHttp
from test_mcp_helpers import (
    RawClient,
    calls,
    initialized,
    one_episode,
    open_proxy,
    proxy_command,
    request,
    server_log,
    tool_call,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The proxy runs in a subprocess (asyncio): the test side needs only one backend."""
    return "asyncio"


async def test_replay_serves_recorded_results_without_the_server_seeing_them(
    tmp_path: Path,
) -> None:
    first = tmp_path / "first"
    first.mkdir()
    client = RawClient(await open_proxy(first))
    await client.send(tool_call(1, "echo", {"text": "recorded"}))
    recorded = await client.recv_json()
    assert await client.finish() == 0
    client = RawClient(await open_proxy(tmp_path, "--replay", str(first / "eps.jsonl")))
    await client.send(tool_call(1, "echo", {"text": "recorded"}))
    replayed = await client.recv_json()
    await client.send(tool_call(2, "echo", {"text": "never recorded"}))
    miss = await client.recv_json()
    assert await client.finish() == 0
    assert replayed["result"]["content"] == recorded["result"]["content"]
    assert miss["result"]["isError"] is True
    assert b"tools/call" not in server_log(tmp_path, "in")
    hit, missed = calls(one_episode(tmp_path / "eps.jsonl"))
    assert (hit.fidelity, missed.fidelity) == ("replayed", "denied")
    assert hit.source is not None
    assert hit.source.step == 0
    assert one_episode(tmp_path / "eps.jsonl").header.tool_modes["default"] == "replay"


@pytest.mark.parametrize("watch_fs", [True, False])
async def test_server_egress_goes_through_the_recording_proxy(
    tmp_path: Path, watch_fs: bool
) -> None:
    """With an [egress] table, the server's requests land on the step of the call in flight
    (whether the call runs in a task, between the probes, or inline with egress alone)."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[egress]\ndefault = "deny"\n"127.0.0.1" = "allow"\n')
    options = ["--case-id", "c", "--policy", str(policy)]
    if not watch_fs:
        options.append("--no-watch-fs")
    with LoopbackHttp(b"hello via proxy") as base:
        url = f"{base}/x"
        client = await initialized(await open_proxy(tmp_path, *options))
        await client.send(tool_call(1, "fetch", {"url": url}))
        reply = json.loads(await client.recv())
        await client.send(tool_call(2, "fetch", {"url": "http://denied.invalid/"}))
        denied = json.loads(await client.recv())
        assert await client.finish() == 0
    assert reply["result"]["content"][0]["text"] == "hello via proxy"
    assert denied["result"]["isError"] is True
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.header.oracles["egress"]["mode"] == "proxy-env"
    ok, bad = calls(ep)
    assert [(e.host, e.decision, e.status) for e in ok.effects.egress] == [
        ("127.0.0.1", "allow", 200)
    ]
    assert [(e.host, e.decision) for e in bad.effects.egress] == [("denied.invalid", "deny")]
    assert "escape" in [f.code for f in bad.findings]


@pytest.mark.parametrize("egress", [True, False])
async def test_server_egress_is_recorded_without_a_policy(tmp_path: Path, egress: bool) -> None:
    """No [egress] table: the server still gets the proxy variables, everything is allowed
    and recorded; ``--no-egress`` leaves its environment (and the step) untouched."""
    options = ("--case-id", "c") if egress else ("--case-id", "c", "--no-egress")
    with LoopbackHttp(b"hello via proxy") as base:
        url = f"{base}/x"
        client = await initialized(await open_proxy(tmp_path, *options))
        await client.send(tool_call(1, "fetch", {"url": url}))
        reply = json.loads(await client.recv())
        assert await client.finish() == 0
    assert reply["result"]["content"][0]["text"] == "hello via proxy"
    ep = one_episode(tmp_path / "eps.jsonl")
    (step,) = calls(ep)
    if egress:
        assert ep.header.oracles["egress"]["mode"] == "proxy-env"
        assert [(e.host, e.decision, e.status) for e in step.effects.egress] == [
            ("127.0.0.1", "allow", 200)
        ]
    else:
        assert "egress" not in ep.header.oracles
        assert step.effects.egress == ()


async def test_a_stub_larger_than_the_cap_reaches_the_client_whole(tmp_path: Path) -> None:
    """The cap (256 KiB) is the record's: the client gets the stub's whole answer."""
    big = "z" * 300_000
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[tools]\necho = {{ mode = "stub", result = "{big}" }}\n')
    client = await initialized(await open_proxy(tmp_path, "--policy", str(policy)))
    await client.send(tool_call(10, "echo", {"text": "x"}))
    reply = json.loads(await client.recv())
    assert await client.finish() == 0
    assert reply["result"]["content"] == [{"type": "text", "text": big}]
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert step.meta["capped"]["size"] == len(big)
    assert len(step.shown.text()) == 256 * 1024


async def test_a_task_call_is_recorded_with_its_final_result(
    tmp_path: Path, oracles: list[str]
) -> None:
    """The client gets the task at once; the step waits for the result tasks/result
    delivers, records it, links the task and says the result came later."""
    client = await initialized(await open_proxy(tmp_path, *oracles))
    await client.send(tool_call(1, "task", task={"ttl": 60000}))
    created = await client.recv_json()
    assert created["result"]["task"]["taskId"] == "task-1"
    await client.send(request(2, "tasks/get", {"taskId": "task-1"}))
    assert (await client.recv_json())["result"]["status"] == "completed"
    await client.send(request(3, "tasks/result", {"taskId": "task-1"}))
    final = await client.recv()
    assert json.loads(final)["result"]["content"][0]["text"] == "task done"
    assert await client.finish() == 0
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.complete
    (step,) = calls(ep)
    assert step.fidelity == "real"
    assert step.shown.text() == "task done"
    mcp = step.meta["mcp"]
    assert mcp["task"] == {"task_id": "task-1", "result_request_id": 3, "result_later": True}
    assert mcp["outcome"] == "result"
    assert mcp["upstream"] == json.loads(final)


async def test_a_stubbed_task_call_is_answered_as_a_task(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\ntask = { mode = "stub", result = "stubbed" }\n')
    client = await initialized(await open_proxy(tmp_path, "--policy", str(policy)))
    await client.send(tool_call(1, "task", task={}))
    created = (await client.recv_json())["result"]["task"]
    assert created["status"] == "completed"
    await client.send(request(2, "tasks/result", {"taskId": created["taskId"]}))
    result = (await client.recv_json())["result"]
    assert result["content"] == [{"type": "text", "text": "stubbed"}]
    assert await client.finish() == 0
    assert b"tasks/" not in server_log(tmp_path, "in")  # the proxy's own task
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert step.fidelity == "stubbed"
    assert step.shown.text() == "stubbed"  # what the client was shown, by tasks/result
    assert step.meta["mcp"]["task"] == {"task_id": created["taskId"], "proxy_task": True}


async def test_a_clean_shutdown_stays_complete_when_a_signal_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The official SDKs close stdin, wait 2 s, then send SIGTERM: a server that outlives
    the close must not turn a finished session into an aborted one."""
    monkeypatch.setenv("LITMUS_TEST_LINGER", "30")
    process = await open_proxy(tmp_path, "--no-watch-fs", "--no-egress")
    client = await initialized(process)
    await client.send(tool_call(1, "echo", {"text": "done"}))
    await client.recv_json()
    assert process.stdin is not None
    await process.stdin.aclose()  # the client is done, with nothing pending
    with anyio.move_on_after(1):  # the server lingers: the proxy is still waiting for it
        await process.wait()
    assert process.returncode is None
    process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        assert await process.wait() == 0
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.complete
    assert len(calls(ep)) == 1


async def test_a_connection_that_only_probed_records_no_episode(tmp_path: Path) -> None:
    """A client negotiating its protocol version spawns a probe that sends
    server/discover and goes: no zero-step episode beside the real one."""
    command = proxy_command(tmp_path, "--no-watch-fs", "--no-egress")
    probe = request(1, "server/discover", {"_meta": {"litmus/case_id": "c"}})
    done = await anyio.run_process(command, input=probe, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == 1  # the server's own answer, relayed
    assert b"only probed the server" in done.stderr
    assert not (tmp_path / "eps.jsonl").exists() or not (tmp_path / "eps.jsonl").read_bytes()
