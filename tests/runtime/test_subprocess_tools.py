"""Subprocess tools (``ep.run``): bounded output, the call ends with its process, the whole
tree killed (checked by PID), and effects outside the root told by the process tree."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from litmus_sandbox import Policy, Sandbox, ToolCallStep, read_episodes
from litmus_sandbox._model.records import Episode
from litmus_sandbox._runtime.supervised import how_trees_are_watched
from litmus_sandbox.oracles.egress import strict_available
from litmus_sandbox.oracles.fs import FsProbe

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning"),
]

WATCHED = how_trees_are_watched()
needs_evidence = pytest.mark.skipif(
    not WATCHED.get("watching"), reason=f"no process evidence here: {WATCHED.get('why')}"
)


def one_episode(path: Path) -> Episode:
    (episode,) = read_episodes(path)
    return episode


def calls(episode: Episode) -> list[ToolCallStep]:
    return [s for s in episode.steps if isinstance(s, ToolCallStep)]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The test's directory, resolved (effects name real paths)."""
    return tmp_path.resolve()


def sandbox(base: Path, **kw: Any) -> Sandbox:
    kw.setdefault("probes", ())
    kw.setdefault("egress", False)
    return Sandbox(root=base / "root", episodes=base / "eps.jsonl", **kw)


async def test_a_child_holding_stdout_open_does_not_hold_the_call(tmp_path: Path) -> None:
    """The call ends when the tool exits; its background child (holding stdout) and a
    ``setsid`` grandchild run on until the episode ends, and are killed then: no orphan."""
    sb = sandbox(tmp_path)
    script = "sleep 60 & setsid sleep 61 & echo started"
    async with sb:
        async with sb.episode("background") as ep:
            t0 = time.monotonic()
            result = await ep.run(["sh", "-c", script])
            took = time.monotonic() - t0
            (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
            listed = step.meta["processes"]["left_running"]
            assert sorted(cmd for _, cmd in listed) == ["sleep 60", "sleep 61"]  # as exec'd
            left = [pid for pid, _ in listed]
            assert all(alive(pid) for pid in left)
        episode = one_episode(tmp_path / "eps.jsonl")
        assert not any(alive(pid) for pid in left)
    assert result.text == "started\n"
    assert took < 10
    assert episode.end is not None
    (ended,) = episode.end.meta["processes_killed"]
    assert sorted(pid for pid, _ in ended["killed"]) == sorted(left)
    assert {cmd for _, cmd in ended["killed"]} == {"sleep 60", "sleep 61"}


async def test_the_whole_tree_is_killed_at_the_time_limit(tmp_path: Path) -> None:
    """And the step keeps the sizes and hashes of what the tool printed until then."""
    policy = Policy({"run": {"mode": "real", "timeout": 1.0}})
    sb = sandbox(tmp_path, policy=policy)
    async with sb, sb.episode("timeout") as ep:
        result = await ep.run(["sh", "-c", "echo before; sleep 60 & setsid sleep 61 & sleep 62"])
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert result.is_error
    assert step.actual is not None
    assert step.actual.outcome == "timeout"
    killed = {cmd: pid for pid, cmd in step.meta["processes"]["killed"]}
    assert {"sleep 60", "sleep 61", "sleep 62"} <= set(killed)
    assert not any(alive(pid) for pid in killed.values())
    assert step.meta["processes"]["output"] == {
        "stdout_bytes": 7,
        "stderr_bytes": 0,
        "stdout_sha256": hashlib.sha256(b"before\n").hexdigest(),
        "stderr_sha256": hashlib.sha256(b"").hexdigest(),
    }
    assert "before" not in result.text  # the agent is shown the timeout, as before


# The peak is VmHWM (this process's own memory, new at exec), not getrusage's ru_maxrss,
# which an exec keeps: it would count the test runner that started the driver.
_DRIVER = """
import anyio, json, sys
from litmus_sandbox import Sandbox
async def main():
    sb = Sandbox(root=sys.argv[1] + "/root", episodes=sys.argv[1] + "/eps.jsonl",
                 probes=(), egress=False, max_result_bytes=1000)
    async with sb, sb.episode("loud") as ep:
        r = await ep.run([sys.executable, "-c", sys.argv[2]])
    with open("/proc/self/status") as f:
        peak = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    print(json.dumps({"peak": peak, "text": r.text}))
anyio.run(main)
"""


def test_output_is_bounded_by_the_cap_whatever_the_tool_prints(tmp_path: Path) -> None:
    """300 MiB on stdout: the agent is shown the first 1,000 bytes, the step has the whole
    size and hash, and the recording process's peak memory stays far below the output."""
    mib = 1 << 20
    loud = f"import sys\nb = b'x' * {mib}\nfor _ in range(300): sys.stdout.buffer.write(b)"
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(tmp_path), loud],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    out = json.loads(done.stdout)
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert step.shown.structured["stdout_bytes"] == 300 * mib
    assert step.shown.structured["stdout_sha256"] == hashlib.sha256(b"x" * 300 * mib).hexdigest()
    assert out["text"] == "x" * 1000
    assert out["peak"] < 120 * mib  # about 45 MiB here, whatever the output's size


@needs_evidence
async def test_a_subprocess_escape_at_any_depth_is_told_by_its_process_tree(
    base: Path,
) -> None:
    """The temp dir holds the root (watched one level deep); another folder is watched by
    nobody. The tool's own process tree says what it wrote in both."""
    temp = Path(await anyio.to_thread.run_sync(os.path.realpath, tempfile.gettempdir()))
    root = Path(await anyio.to_thread.run_sync(tempfile.mkdtemp)) / "root"
    far = base / "unwatched"
    far.mkdir()
    script = f"mkdir -p {temp}/a/b/c && echo x > {temp}/a/b/c/deep.txt && echo y > {far}/f.txt"
    episodes = base / "eps.jsonl"
    sb = Sandbox(root=root, episodes=episodes, probes=[FsProbe(root)], egress=False)
    async with sb, sb.episode("deep") as ep:
        await ep.run(["sh", "-c", script])
    (step,) = calls(one_episode(episodes))
    found = {e.path: (e.op, e.attribution) for e in step.effects.fs}
    assert found[f"{temp}/a/b/c/deep.txt"] == ("created", "process")
    assert found[f"{far}/f.txt"] == ("created", "process")
    escapes = {f.path for f in step.findings if f.code == "escape"}
    assert {f"{temp}/a/b/c/deep.txt", f"{far}/f.txt"} <= escapes


_WRITER = textwrap.dedent(
    """
    import os, sys, time
    folder, go, done = sys.argv[1:4]
    while not os.path.exists(go):
        time.sleep(0.005)
    for i in range(2):
        with open(os.path.join(folder, f"unrelated-job-{i}"), "w") as f:
            f.write("not the tool's")
    open(done, "w").close()
    """
)


@needs_evidence
async def test_another_process_writing_during_a_subprocess_call_is_not_blamed(
    base: Path,
) -> None:
    temp = Path(await anyio.to_thread.run_sync(os.path.realpath, tempfile.gettempdir()))
    go, done = base / "go", base / "done"
    writer = await anyio.open_process(
        [sys.executable, "-c", _WRITER, str(temp), str(go), str(done)]
    )
    wait = f"touch {go}; while [ ! -e {done} ]; do sleep 0.01; done; echo waited"
    root = base / "root"
    sb = Sandbox(root=root, episodes=base / "eps.jsonl", probes=[FsProbe(root)], egress=False)
    async with writer, sb, sb.episode("busy") as ep:
        await ep.run(["sh", "-c", wait])
    episode = one_episode(base / "eps.jsonl")
    (step,) = calls(episode)
    leaked = {f"{temp}/unrelated-job-0", f"{temp}/unrelated-job-1"}
    assert [e.path for e in step.effects.fs if e.path in leaked] == []
    assert episode.end is not None
    seen = {e.path: e for e in episode.end.unattributed.fs if e.path in leaked}
    assert set(seen) == leaked
    assert {e.during for e in seen.values()} == {step.call_id}


@needs_evidence
async def test_times_set_by_a_subprocess_tool_are_metadata(base: Path) -> None:
    root = base / "root"
    root.mkdir()
    (root / "f.txt").write_bytes(b"same")
    sb = Sandbox(root=root, episodes=base / "eps.jsonl", probes=[FsProbe(root)], egress=False)
    async with sb, sb.episode("touch") as ep:
        await ep.run(["touch", "-d", "2001-01-01", "f.txt"])
    (step,) = calls(one_episode(base / "eps.jsonl"))
    (effect,) = step.effects.fs
    assert (effect.path, effect.op) == ("f.txt", "metadata")
    assert effect.after_mtime_ns == 978307200 * 10**9


async def test_a_missing_command_is_an_error_the_agent_sees(tmp_path: Path) -> None:
    async with sandbox(tmp_path) as sb, sb.episode("missing") as ep:
        result = await ep.run(["/nonexistent/tool", "x"])
    (step,) = calls(one_episode(tmp_path / "eps.jsonl"))
    assert result.is_error
    assert step.actual is not None
    assert step.actual.error_type == "FileNotFoundError"


STRICT, STRICT_WHY = strict_available()
MODES = [
    pytest.param(False, id="proxy-env"),
    pytest.param(
        True,
        id="strict",
        marks=pytest.mark.skipif(not STRICT, reason=f"no strict egress mode: {STRICT_WHY}"),
    ),
]
_DAEMON = (
    "import os, sys\n"
    "if os.fork(): sys.exit(0)\n"
    "os.setsid()\n"
    "if os.fork(): sys.exit(0)\n"
    "os.execvp('sleep', ['sleep', '73'])"
)


def in_mode(base: Path, strict: bool, **kw: Any) -> Sandbox:
    """A sandbox whose subprocess tools go out through the proxy, in strict mode or not."""
    return sandbox(base, egress={"default": "allow"}, strict_egress=strict, **kw)


@pytest.mark.parametrize("strict", MODES)
async def test_what_a_tool_left_running_is_listed_by_what_it_runs(
    tmp_path: Path, strict: bool
) -> None:
    """Listed on the step as it is when the call ends: a ``setsid`` child whose output is
    closed, a background child named by the program it exec'd (not the shell it forked
    from), and of a double-forked daemon the daemon alone (its middle process has exited).
    In strict mode too, whose namespace lives on with them (nothing of its wrapper is
    listed); all killed when the episode ends."""
    tools = {
        "setsid": ["sh", "-c", "setsid sleep 71 </dev/null >/dev/null 2>&1 &"],
        "background": ["sh", "-c", "sleep 72 &"],
        "daemon": [sys.executable, "-c", _DAEMON],
    }
    async with in_mode(tmp_path, strict) as sb:
        async with sb.episode("left") as ep:
            for name, cmd in tools.items():
                await ep.run(cmd, name=name)
            steps = {s.tool: s for s in calls(one_episode(tmp_path / "eps.jsonl"))}
            left = {
                name: [tuple(p) for p in steps[name].meta["processes"]["left_running"]]
                for name in tools
            }
            assert all(alive(pid) for entries in left.values() for pid, _ in entries)
        episode = one_episode(tmp_path / "eps.jsonl")
    assert {name: [cmd for _, cmd in entries] for name, entries in left.items()} == {
        "setsid": ["sleep 71"],
        "background": ["sleep 72"],
        "daemon": ["sleep 73"],
    }
    assert not any(alive(pid) for entries in left.values() for pid, _ in entries)
    assert episode.end is not None
    ended = episode.end.meta["processes_killed"]
    assert [e["cmd"] for e in ended] == list(tools.values())
    assert sorted(tuple(k) for e in ended for k in e["killed"]) == sorted(
        entry for entries in left.values() for entry in entries
    )


@pytest.mark.skipif(not STRICT, reason=f"no strict egress mode: {STRICT_WHY}")
async def test_in_strict_mode_what_a_tool_left_still_goes_out_through_the_proxy(
    tmp_path: Path,
) -> None:
    """The tool's namespace outlives it while what it left runs: a background child that
    fetches after the tool exited still reaches the server through the proxy. At the time
    limit, what is killed is the tool's tree, not strict mode's wrapper."""

    async def answer(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
            )

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    late = f"(sleep 0.5; curl -s -o late.txt http://127.0.0.1:{port}/late) >/dev/null 2>&1 &"
    policy = Policy({"slow": {"mode": "real", "timeout": 1.0}})
    root = tmp_path / "root"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, answer)
        async with in_mode(tmp_path, True, policy=policy) as sb, sb.episode("late") as ep:
            await ep.run(["sh", "-c", late + " echo started"], name="early")
            with anyio.fail_after(10):
                for _ in range(1000):
                    if (root / "late.txt").exists() and (root / "late.txt").read_bytes():
                        break
                    await anyio.sleep(0.01)
            await ep.run(["sh", "-c", "sleep 74 & sleep 75"], name="slow")
        tg.cancel_scope.cancel()
    assert (root / "late.txt").read_bytes() == b"ok"
    episode = one_episode(tmp_path / "eps.jsonl")
    steps = {s.tool: s for s in calls(episode)}
    assert episode.end is not None
    egress = [*steps["early"].effects.egress, *steps["slow"].effects.egress]
    egress += episode.end.unattributed.egress
    assert [(e.path, e.status) for e in egress] == [("/late", 200)]
    killed = [cmd for _, cmd in steps["slow"].meta["processes"]["killed"]]
    assert sorted(killed) == ["sh -c sleep 74 & sleep 75", "sleep 74", "sleep 75"]


def test_the_supervisor_and_the_bridge_name_the_same_exit_pipe() -> None:
    """Two scripts that import nothing of each other: the variable is spelled in both."""
    from litmus_sandbox._runtime import _supervisor
    from litmus_sandbox.oracles.egress import _netns

    assert _supervisor.TOOL_EXIT_FD == _netns.TOOL_EXIT_FD
