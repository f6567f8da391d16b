"""The stdio proxy on each event loop ``--loop`` picks: uvloop and the standard library's.

End to end against the real filesystem server (npm), the egress recorder on: the answer
the client gets, the step recorded before it, and a SIGTERM that ends the episode with
exit 130, on each loop. In process: which loop each choice runs, and the clear error of
``--loop uvloop`` where uvloop does not import.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest
from test_mcp_helpers import PROXY, RawClient, calls, node_server, one_episode, request, tool_call

from litmus_sandbox import ConfigError

pytestmark = pytest.mark.anyio

LOOPS = ["asyncio", "uvloop", "auto"]
INIT = request(
    0,
    "initialize",
    {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
)


@pytest.fixture
def anyio_backend() -> str:
    """The proxy runs in a subprocess: the test side needs only one backend."""
    return "asyncio"


async def _proxy(tmp_path: Path, loop: str) -> RawClient:
    root = tmp_path / "root"
    root.mkdir()
    (root / "note.txt").write_text("hello\n")
    command = [*PROXY, "--loop", loop, "--episodes", str(tmp_path / "eps.jsonl")]
    command += ["--case-id", f"on-{loop}", "--", *node_server("filesystem"), str(root)]
    process = await anyio.open_process(
        command, cwd=root, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=None
    )
    client = RawClient(process)
    await client.send(INIT)
    assert (await client.recv_json())["result"]["serverInfo"]
    await client.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    return client


@pytest.mark.parametrize("loop", LOOPS)
async def test_the_proxy_relays_and_records_on_each_loop(tmp_path: Path, loop: str) -> None:
    client = await _proxy(tmp_path, loop)
    read = {"path": str(tmp_path / "root" / "note.txt")}
    for rid in (1, 2):
        await client.send(tool_call(rid, "read_text_file", read))
        answer = await client.recv_json()
        assert answer["id"] == rid
        assert answer["result"]["content"][0]["text"] == "hello\n"
    assert await client.finish() == 0
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.case_id == f"on-{loop}"
    assert ep.end is not None
    assert ep.end.status == "complete"
    steps = calls(ep)
    assert [s.tool for s in steps] == ["read_text_file", "read_text_file"]
    assert all(s.meta["mcp"]["outcome"] == "result" for s in steps)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_a_signal_ends_the_episode_on_each_loop(tmp_path: Path, loop: str) -> None:
    client = await _proxy(tmp_path, loop)
    read = {"path": str(tmp_path / "root" / "note.txt")}
    await client.send(tool_call(1, "read_text_file", read))
    assert (await client.recv_json())["id"] == 1
    client.process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        assert await client.process.wait() == 130
    ep = one_episode(tmp_path / "eps.jsonl")
    assert ep.end is not None
    assert ep.end.status == "aborted"
    assert ep.end.reason == "the proxy was stopped by SIGTERM"
    assert len(calls(ep)) == 1


def _loop_type(loop: str) -> str:
    from litmus_sandbox.adapters.mcp._cli import _run

    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    return str(_run(which, loop=loop))


def test_each_choice_runs_its_loop() -> None:
    pytest.importorskip("uvloop", reason="the mcp and test extras install uvloop")
    assert _loop_type("uvloop").startswith("uvloop")
    assert _loop_type("auto").startswith("uvloop")
    assert _loop_type("asyncio").startswith("asyncio")


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert _loop_type("auto").startswith("asyncio")
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        _loop_type("uvloop")


def test_loop_uvloop_without_it_exits_2_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from litmus_sandbox._cli.main import main

    monkeypatch.setitem(sys.modules, "uvloop", None)
    monkeypatch.chdir(tmp_path)  # where the default episode file would go
    marker = tmp_path / "started"
    server = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    assert main(["proxy", "mcp", "--loop", "uvloop", "--", *server]) == 2
    assert "uvloop is not installed" in capsys.readouterr().err
    assert not marker.exists()  # the server was never started
    assert not (tmp_path / "litmus-mcp.episodes.jsonl").exists()


def test_an_unknown_loop_is_a_usage_error(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [*PROXY, "--loop", "trio", "--", sys.executable, "-c", "pass"],
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"--loop" in done.stderr
    assert done.stdout == b""  # stdout stays the protocol's
