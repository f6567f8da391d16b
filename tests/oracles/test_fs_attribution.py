"""Attribution by evidence: an effect outside the root lands on a call only when the call's
own audit events (or its process tree) name it; everything else is unattributed."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio
import msgspec
import pytest

from litmus_sandbox import Sandbox, ToolCallStep, read_episodes
from litmus_sandbox._model.records import Episode
from litmus_sandbox.oracles.fs import FsProbe

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning"),
]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path.resolve()


def one_episode(path: Path) -> Episode:
    (episode,) = read_episodes(path)
    return episode


def calls(episode: Episode) -> list[ToolCallStep]:
    return [s for s in episode.steps if isinstance(s, ToolCallStep)]


def mine(base: Path, path: str | None) -> bool:
    return path is not None and (not path.startswith("/") or path.startswith(f"{base}/"))


def escapes(step: ToolCallStep, base: Path) -> list[str]:
    return sorted(f.path or "" for f in step.findings if f.code == "escape" and mine(base, f.path))


_WRITER = """
import os, sys, time
folder, go, done = sys.argv[1:4]
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(2):
    with open(os.path.join(folder, f"unrelated-job-{i}"), "w") as f:
        f.write("not the tool's")
open(done, "w").close()
"""


async def test_another_process_writing_during_a_call_is_not_blamed(base: Path) -> None:
    """A tool that touches nothing runs while a separate process writes in the system temp
    dir (a default tripwire: this test's own, see conftest.py). No escape on the call: the
    writes are unattributed, naming the call that was in flight."""
    temp = Path(await anyio.to_thread.run_sync(os.path.realpath, tempfile.gettempdir()))
    root = base / "root"
    episodes = base / "eps.jsonl"
    go, done = base / "go", base / "done"
    command = [sys.executable, "-c", _WRITER, str(temp), str(go), str(done)]
    writer = subprocess.Popen(command)  # noqa: ASYNC220 - runs beside the sandbox, waited below

    def look(name: str) -> str:
        go.touch()  # the harness's cue, made before the call's own evidence: see below
        deadline = time.monotonic() + 20
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return "nothing to see" if not (root / name).exists() else "found"

    sb = Sandbox(root=root, episodes=episodes, tools={"look": look}, probes=[FsProbe(root)])
    try:
        async with sb, sb.episode("busy machine") as ep:
            await ep.call("look", name="x")
    finally:
        writer.wait(timeout=30)
    episode = one_episode(episodes)
    (step,) = calls(episode)
    leaked = {f"{temp}/unrelated-job-0", f"{temp}/unrelated-job-1"}
    assert [e.path for e in step.effects.fs if e.path in leaked] == []
    assert [f.code for f in step.findings if f.path in leaked] == []
    assert episode.end is not None
    seen = {e.path: e for e in episode.end.unattributed.fs if e.path in leaked}
    assert set(seen) == leaked
    assert {(e.attribution, e.during) for e in seen.values()} == {("none", step.call_id)}
    codes = {f.code for f in episode.end.findings if f.path in leaked}
    assert codes == {"unattributed_effect", "escape"}
    noted = [f for f in episode.end.findings if f.path in leaked and f.code != "escape"]
    assert all(f"while call {step.call_id}" in f.detail for f in noted)


async def test_calls_in_flight_at_once_each_get_their_own_escapes(base: Path) -> None:
    """Two calls overlap, each writing outside the root: each escape is on its own call
    (the audit events say which), while the root's changes of both stay unattributed."""
    root, outside = base / "root", base / "outside"
    outside.mkdir()
    episodes = base / "eps.jsonl"
    both = threading.Barrier(2, timeout=10)

    def leak(name: str) -> str:
        both.wait()  # both calls are in flight
        (outside / f"{name}.txt").write_text(name)
        (root / f"{name}.txt").write_text(name)
        both.wait()
        return "done"

    probe = FsProbe(root, tripwires=[outside])
    sb = Sandbox(root=root, episodes=episodes, tools={"leak": leak}, probes=[probe])
    async with sb, sb.episode("parallel") as ep, anyio.create_task_group() as tg:
        for name in ("a", "b"):
            tg.start_soon(functools.partial(ep.call, "leak", name=name))
    episode = one_episode(episodes)
    by_name = {s.args["name"]: s for s in calls(episode)}
    for name, step in by_name.items():
        assert [(e.path, e.op, e.attribution) for e in step.effects.fs] == [
            (f"{outside}/{name}.txt", "created", "audit")
        ]
        assert escapes(step, base) == [f"{outside}/{name}.txt"]
    assert episode.end is not None
    assert sorted(e.path for e in episode.end.unattributed.fs) == ["a.txt", "b.txt"]


async def test_an_escape_deep_below_a_tripwire_or_beyond_every_tripwire_is_found(
    base: Path,
) -> None:
    """The temp dir holds the root, so it is watched one level deep; a directory beside
    nothing is not watched at all. The call's audit events name both writes anyway."""
    temp = Path(await anyio.to_thread.run_sync(os.path.realpath, tempfile.gettempdir()))
    root = Path(tempfile.mkdtemp(dir=temp)) / "root"
    deep = temp / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "old.txt").write_bytes(b"old")
    elsewhere = base / "nobody-watches"
    elsewhere.mkdir()
    episodes = base / "eps.jsonl"

    def act() -> str:
        (deep / "new.txt").write_bytes(b"new")
        (deep / "old.txt").write_bytes(b"changed")
        (elsewhere / "x.txt").write_bytes(b"x")
        return "done"

    sb = Sandbox(root=root, episodes=episodes, tools={"act": act}, probes=[FsProbe(root)])
    async with sb, sb.episode("deep") as ep:
        await ep.call("act")
    (step,) = calls(one_episode(episodes))
    by_path = {e.path: e for e in step.effects.fs}
    new, old, far = (
        by_path[str(p)] for p in (deep / "new.txt", deep / "old.txt", elsewhere / "x.txt")
    )
    assert (new.op, new.after_sha256, new.attribution) == ("created", sha(b"new"), "audit")
    assert (old.op, old.before_sha256, old.after_sha256) == (
        "modified",
        sha(b"old"),
        sha(b"changed"),
    )
    assert (far.op, far.attribution) == ("created", "audit")
    found = sorted(f.path or "" for f in step.findings if f.code == "escape")
    assert found == sorted([new.path, old.path, far.path])


async def test_rename_out_of_the_root_is_a_move_and_an_escape(base: Path) -> None:
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "secret").write_bytes(b"s3cret")
    (root / "other").write_bytes(b"other")
    episodes = base / "eps.jsonl"

    def move(name: str, dest: str) -> str:
        os.rename(root / name, dest)
        return "moved"

    probe = FsProbe(root, tripwires=[outside])
    sb = Sandbox(root=root, episodes=episodes, tools={"move": move}, probes=[probe])
    unwatched = base / "unwatched.txt"
    async with sb, sb.episode("move out") as ep:
        await ep.call("move", name="secret", dest=str(outside / "secret"))
        await ep.call("move", name="other", dest=str(unwatched))
    first, second = calls(one_episode(episodes))
    for step, dest in ((first, outside / "secret"), (second, unwatched)):
        by_op = {e.op: e for e in step.effects.fs}
        assert (by_op["deleted"].moved_to, by_op["created"].moved_from) == (
            str(dest),
            by_op["deleted"].path,
        )
        assert by_op["created"].path == str(dest)
        assert by_op["created"].attribution == "audit"
        (finding,) = [f for f in step.findings if f.code == "escape"]
        assert finding.path == str(dest)
        assert "moved from" in finding.detail


async def test_times_set_and_modes_changed_are_metadata(base: Path) -> None:
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    for folder in (root, outside):
        (folder / "f.txt").write_bytes(b"same")
        os.utime(folder / "f.txt", ns=(1_000_000_000, 1_000_000_000))
    episodes = base / "eps.jsonl"

    def touch(path: str) -> str:
        os.utime(path)  # to now: only evidence tells this from a write of the same bytes
        return "touched"

    probe = FsProbe(root, tripwires=[outside])
    sb = Sandbox(root=root, episodes=episodes, tools={"touch": touch}, probes=[probe])
    async with sb, sb.episode("times") as ep:
        await ep.call("touch", path=str(root / "f.txt"))
        await ep.call("touch", path=str(outside / "f.txt"))
    first, second = calls(one_episode(episodes))
    (inside,) = first.effects.fs
    (out,) = second.effects.fs
    for effect, path in ((inside, "f.txt"), (out, str(outside / "f.txt"))):
        assert (effect.path, effect.op, effect.before_mtime_ns) == (path, "metadata", 1_000_000_000)
        assert isinstance(effect.after_mtime_ns, int)
        assert effect.after_mtime_ns > 1_000_000_000
    assert out.attribution == "audit"
    assert [f.code for f in second.findings] == ["escape"]


async def test_writes_through_links_in_the_root_are_recorded_at_the_real_target(
    base: Path,
) -> None:
    """A symlink and a hard link placed in the root lead outside: a write through either is
    an escape at the file it really changed."""
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "soft.txt").write_bytes(b"soft")
    (outside / "hard.txt").write_bytes(b"hard")
    os.symlink(outside / "soft.txt", root / "soft")
    os.link(outside / "hard.txt", root / "hard")
    elsewhere = base / "unwatched"
    elsewhere.mkdir()
    (elsewhere / "far.txt").write_bytes(b"far")
    os.symlink(elsewhere / "far.txt", root / "far")
    episodes = base / "eps.jsonl"

    def write(name: str) -> str:
        (root / name).write_bytes(b"through " + name.encode())
        return "written"

    probe = FsProbe(root, tripwires=[outside])
    sb = Sandbox(root=root, episodes=episodes, tools={"write": write}, probes=[probe])
    async with sb, sb.episode("links") as ep:
        for name in ("soft", "hard", "far"):
            await ep.call("write", name=name)
    soft, hard, far = calls(one_episode(episodes))
    assert escapes(soft, base) == [str(outside / "soft.txt")]
    assert escapes(hard, base) == [str(outside / "hard.txt")]
    assert escapes(far, base) == [str(elsewhere / "far.txt")]
    (target,) = [e for e in far.effects.fs if e.path.startswith("/")]
    assert (target.op, target.after_sha256, target.attribution) == (
        "modified",
        sha(b"through far"),
        "audit",
    )


async def test_a_thread_the_tool_starts_itself_is_not_its_evidence(base: Path) -> None:
    """A plain ``threading.Thread`` starts with an empty context: what it writes outside
    the root is unattributed, not the call's (the tool's own sync work, run by the sandbox
    in a worker thread, is covered: the other tests)."""
    root, outside = base / "root", base / "outside"
    outside.mkdir()
    episodes = base / "eps.jsonl"

    def spawn() -> str:
        t = threading.Thread(target=(outside / "t.txt").write_bytes, args=(b"t",))
        t.start()
        t.join()
        return "done"

    probe = FsProbe(root, tripwires=[outside])
    sb = Sandbox(root=root, episodes=episodes, tools={"spawn": spawn}, probes=[probe])
    async with sb, sb.episode("thread") as ep:
        await ep.call("spawn")
    episode = one_episode(episodes)
    (step,) = calls(episode)
    assert step.effects.fs == ()
    assert episode.end is not None
    (effect,) = episode.end.unattributed.fs
    assert (effect.path, effect.attribution, effect.during) == (
        str(outside / "t.txt"),
        "none",
        step.call_id,
    )


async def test_between_calls_and_old_records_say_how_they_were_attributed(base: Path) -> None:
    """Changes seen while no call ran are ``none``; effects read from files written before
    attribution existed have it UNSET, left out of what they encode to (so the content
    hash of their steps, the verdict cache's key, is what it was)."""
    from litmus_sandbox._model.records import FsEffect

    root = base / "root"
    root.mkdir()
    probe = FsProbe(root, tripwires=())
    await probe.start()
    try:
        (root / "between.txt").write_bytes(b"x")
        (effect,) = (await probe.finish()).fs
    finally:
        await probe.close()
    assert (effect.path, effect.attribution) == ("between.txt", "none")
    old = msgspec.json.decode(b'{"op": "created", "path": "a"}', type=FsEffect)
    assert old.attribution is msgspec.UNSET
    new_fields = {"attribution", "during", "moved_to", "moved_from"}
    assert not new_fields & set(msgspec.to_builtins(old))
