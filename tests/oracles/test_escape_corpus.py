"""The filesystem escape corpus: every way out of the root, by an in-process tool and by a
subprocess tool, is an ``escape`` on the call that made it, with its evidence; and the same
change made by another process meanwhile is never the call's."""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from litmus_sandbox import Sandbox, ToolCallStep, read_episodes
from litmus_sandbox._runtime.supervised import how_trees_are_watched
from litmus_sandbox.oracles.fs import FsProbe, _tripwires

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning"),
]


class World(NamedTuple):
    """Where a case happens: the root, and places outside it."""

    root: Path
    outside: Path  # a directory beside the root
    temp: Path  # the temp dir (holds the root: watched one level deep)
    home: Path
    shm: Path  # the test's /dev/shm
    nowhere: Path  # watched by no tripwire


class Case(NamedTuple):
    name: str
    #: Prepares the world (before the episode).
    setup: Callable[[World], object]
    #: What the tool does, in Python.
    act: Callable[[World], object]
    #: The same, as a shell command.
    shell: Callable[[World], str]
    #: The path of the escape and its effect's op.
    expect: Callable[[World], tuple[str, str]]


# Helpers that return True, so that a lambda can do several of them in a tuple.
def _write(path: Path, data: bytes = b"x") -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def _mkdir(path: Path) -> bool:
    path.mkdir()
    return True


def _rmdir(path: Path) -> bool:
    path.rmdir()
    return True


def _link(target: Path, link: Path, *, hard: bool = False) -> bool:
    (os.link if hard else os.symlink)(target, link)
    return True


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def q(path: Path) -> str:
    return shlex.quote(str(path))


CASES = [
    Case(
        "parent",
        lambda w: None,
        lambda w: _write(w.root / ".." / "up.txt"),
        lambda w: "echo x > ../up.txt",
        lambda w: (str(w.root.parent / "up.txt"), "created"),
    ),
    Case(
        "two_levels_up",
        lambda w: None,
        lambda w: _write(w.root / ".." / ".." / "up2.txt"),
        lambda w: "echo x > ../../up2.txt",
        lambda w: (str(w.root.parent.parent / "up2.txt"), "created"),
    ),
    Case(
        "deep_in_temp",
        lambda w: (w.temp / "a" / "b" / "c").mkdir(parents=True),
        lambda w: _write(w.temp / "a" / "b" / "c" / "deep.txt"),
        lambda w: f"echo x > {q(w.temp / 'a' / 'b' / 'c' / 'deep.txt')}",
        lambda w: (str(w.temp / "a" / "b" / "c" / "deep.txt"), "created"),
    ),
    Case(
        "new_deep_folder_in_home",
        lambda w: None,
        lambda w: _write(w.home / ".config" / "x" / "rc"),
        lambda w: (
            f"mkdir -p {q(w.home / '.config' / 'x')} && echo x > {q(w.home / '.config' / 'x' / 'rc')}"
        ),
        lambda w: (str(w.home / ".config" / "x" / "rc"), "created"),
    ),
    Case(
        "shared_memory",
        lambda w: None,
        lambda w: _write(w.shm / "seg"),
        lambda w: f"echo x > {q(w.shm / 'seg')}",
        lambda w: (str(w.shm / "seg"), "created"),
    ),
    Case(
        "nowhere_watched",
        lambda w: None,
        lambda w: _write(w.nowhere / "f.txt"),
        lambda w: f"echo x > {q(w.nowhere / 'f.txt')}",
        lambda w: (str(w.nowhere / "f.txt"), "created"),
    ),
    Case(
        "overwrite_beside",
        lambda w: _write(w.outside / "old.txt", b"old"),
        lambda w: _write(w.outside / "old.txt", b"new"),
        lambda w: f"echo new > {q(w.outside / 'old.txt')}",
        lambda w: (str(w.outside / "old.txt"), "modified"),
    ),
    Case(
        "append_deep",
        lambda w: _write(w.temp / "logs" / "app" / "log", b"1\n"),
        lambda w: _append(w.temp / "logs" / "app" / "log", b"2\n"),
        lambda w: f"echo 2 >> {q(w.temp / 'logs' / 'app' / 'log')}",
        lambda w: (str(w.temp / "logs" / "app" / "log"), "modified"),
    ),
    Case(
        "truncate_deep",
        lambda w: _write(w.temp / "t" / "u" / "f", b"content"),
        lambda w: os.truncate(w.temp / "t" / "u" / "f", 0),
        lambda w: f"truncate -s 0 {q(w.temp / 't' / 'u' / 'f')}",
        lambda w: (str(w.temp / "t" / "u" / "f"), "modified"),
    ),
    Case(
        "delete_deep",
        lambda w: _write(w.temp / "d" / "e" / "gone.txt"),
        lambda w: (w.temp / "d" / "e" / "gone.txt").unlink(),
        lambda w: f"rm {q(w.temp / 'd' / 'e' / 'gone.txt')}",
        lambda w: (str(w.temp / "d" / "e" / "gone.txt"), "deleted"),
    ),
    Case(
        "chmod_deep",
        lambda w: _write(w.temp / "m" / "n" / "f"),
        lambda w: os.chmod(w.temp / "m" / "n" / "f", 0o700),
        lambda w: f"chmod 700 {q(w.temp / 'm' / 'n' / 'f')}",
        lambda w: (str(w.temp / "m" / "n" / "f"), "metadata"),
    ),
    Case(
        "utime_beside",
        lambda w: _write(w.outside / "stamp"),
        lambda w: os.utime(w.outside / "stamp", (1, 1)),
        lambda w: f"touch -d 1970-01-01T00:00:01 {q(w.outside / 'stamp')}",
        lambda w: (str(w.outside / "stamp"), "metadata"),
    ),
    Case(
        "mkdir_deep",
        lambda w: (w.temp / "p" / "q").mkdir(parents=True),
        lambda w: (w.temp / "p" / "q" / "newdir").mkdir(),
        lambda w: f"mkdir {q(w.temp / 'p' / 'q' / 'newdir')}",
        lambda w: (str(w.temp / "p" / "q" / "newdir"), "created"),
    ),
    Case(
        "rename_out",
        lambda w: _write(w.root / "secret", b"s3cret"),
        lambda w: os.rename(w.root / "secret", w.nowhere / "secret"),
        lambda w: f"mv secret {q(w.nowhere / 'secret')}",
        lambda w: (str(w.nowhere / "secret"), "created"),
    ),
    Case(
        "copy_out",
        lambda w: (_write(w.root / "data", b"data"), _mkdir(w.temp / "x")),
        lambda w: shutil.copy(w.root / "data", w.temp / "x" / "y"),
        lambda w: f"cp data {q(w.temp / 'x' / 'y')}",
        lambda w: (str(w.temp / "x" / "y"), "created"),
    ),
    Case(
        "symlink_in_root",
        lambda w: (_write(w.nowhere / "target", b"t"), _link(w.nowhere / "target", w.root / "ln")),
        lambda w: (w.root / "ln").write_bytes(b"through"),
        lambda w: "echo through > ln",
        lambda w: (str(w.nowhere / "target"), "modified"),
    ),
    Case(
        "hardlink_in_root",
        lambda w: (
            _write(w.outside / "linked", b"l"),
            _link(w.outside / "linked", w.root / "hl", hard=True),
        ),
        lambda w: (w.root / "hl").write_bytes(b"through"),
        lambda w: "echo through > hl",
        lambda w: (str(w.outside / "linked"), "modified"),
    ),
    Case(
        "symlinked_folder_in_root",
        lambda w: (_mkdir(w.nowhere / "dir"), _link(w.nowhere / "dir", w.root / "d")),
        lambda w: (w.root / "d" / "f").write_bytes(b"in"),
        lambda w: "echo in > d/f",
        lambda w: (str(w.nowhere / "dir" / "f"), "created"),
    ),
    Case(
        "folder_made_a_link_during_the_call",
        lambda w: (_mkdir(w.root / "d"), _mkdir(w.nowhere / "dir")),
        lambda w: (
            _rmdir(w.root / "d"),
            _link(w.nowhere / "dir", w.root / "d"),
            (w.root / "d" / "f").write_bytes(b"in"),
        ),
        lambda w: f"rmdir d && ln -s {q(w.nowhere / 'dir')} d && echo in > d/f",
        # In process, the hook took d for the root's folder it was: the write is found when
        # the call ends, its state before unknown (so "modified"); fanotify saw it made.
        lambda w: (str(w.nowhere / "dir" / "f"), "created or modified"),
    ),
]

# In-process only: sqlite writes its database (and journal) itself, in C.
SQLITE = Case(
    "sqlite_outside",
    lambda w: None,
    lambda w: _sqlite(w.nowhere / "db.sqlite"),
    lambda w: "",
    lambda w: (str(w.nowhere / "db.sqlite"), "created"),
)


def _sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table t (x)")
    db.close()


@pytest.fixture
def world(tmp_path: Path) -> World:
    temp = Path(os.path.realpath(tempfile.gettempdir()))
    work = temp / "work"
    w = World(
        root=work / "root",
        outside=work / "outside",
        temp=temp,
        home=Path(os.path.realpath(os.environ["HOME"])),
        shm=Path(os.path.realpath(_tripwires.SHARED_TRIPWIRES[0])),
        nowhere=tmp_path.resolve() / "nowhere",
    )
    for folder in (w.root, w.outside, w.nowhere):
        folder.mkdir(parents=True)
    return w


async def record(world: World, tmp_path: Path, case: Case, how: str) -> ToolCallStep:
    case.setup(world)
    episodes = tmp_path / "eps.jsonl"

    def act() -> str:
        case.act(world)
        return "done"

    probe = FsProbe(world.root)  # the default tripwires
    sb = Sandbox(
        root=world.root, episodes=episodes, tools={"act": act}, probes=[probe], egress=False
    )
    async with sb, sb.episode(case.name) as ep:
        if how == "in-process":
            await ep.call("act")
        else:
            await ep.run(["sh", "-c", case.shell(world)])
    ((step,),) = [
        [s for s in e.steps if isinstance(s, ToolCallStep)] for e in read_episodes(episodes)
    ]
    return step


WATCHED = how_trees_are_watched()


@pytest.mark.parametrize("how", ["in-process", "subprocess"])
@pytest.mark.parametrize("case", [*CASES, SQLITE], ids=lambda c: c.name)
async def test_every_escape_is_a_finding_on_the_call_that_made_it(
    world: World, tmp_path: Path, case: Case, how: str
) -> None:
    if how == "subprocess" and not case.shell(world):
        pytest.skip("in-process only")
    if how == "subprocess" and not WATCHED.get("watching"):
        pytest.skip(f"no process evidence here: {WATCHED.get('why')}")
    step = await record(world, tmp_path, case, how)
    path, op = case.expect(world)
    by_path = {e.path: e for e in step.effects.fs}
    assert path in by_path, sorted(by_path)
    assert by_path[path].op in op.split(" or ")
    assert by_path[path].attribution == ("audit" if how == "in-process" else "process")
    assert path in {f.path for f in step.findings if f.code == "escape"}


@pytest.mark.parametrize("case", CASES[:13], ids=lambda c: c.name)
async def test_the_same_change_by_another_process_is_never_the_calls(
    world: World, tmp_path: Path, case: Case
) -> None:
    """Done meanwhile by a thread outside the call's context (as another process would):
    no escape on the call, whatever a tripwire saw."""
    case.setup(world)
    episodes = tmp_path / "eps.jsonl"

    def idle() -> str:
        t = threading.Thread(target=case.act, args=(world,))
        t.start()
        t.join()
        return "did nothing"

    sb = Sandbox(
        root=world.root,
        episodes=episodes,
        tools={"idle": idle},
        probes=[FsProbe(world.root)],
        egress=False,
    )
    async with sb, sb.episode(case.name) as ep:
        await ep.call("idle")
    (episode,) = read_episodes(episodes)
    (step,) = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    path, _ = case.expect(world)
    assert path not in {e.path for e in step.effects.fs}
    assert [f for f in step.findings if f.code == "escape"] == []
