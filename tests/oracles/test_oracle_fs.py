"""The filesystem oracle on a real filesystem: snapshots, diffs, the probe, tripwires."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox import ConfigError, FsEffect, Sandbox, ToolCallStep, read_episodes
from litmus_sandbox.oracles.fs._probe import (
    FsProbe,
    default_tripwires,
    diff,
    is_tripwire_effect,
    snapshot,
)
from litmus_sandbox.oracles.fs._snapshot import Walker
from litmus_sandbox.oracles.fs._tree import Tree, window_effects

pytestmark = [
    pytest.mark.anyio,
    # watchdog warns (from its inotify thread) when a directory created with its parent gets
    # its watch registered twice; benign, but under "filterwarnings = error" it would kill
    # that thread.
    pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning"),
]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mine(base: Path, path: str | None) -> bool:
    """A path this test made: relative (in the root) or under its own directory."""
    return path is not None and (not path.startswith("/") or path.startswith(f"{base}/"))


def ops(effects: tuple[FsEffect, ...]) -> list[tuple[str, str]]:
    return [(e.path, e.op) for e in effects]


def settle() -> None:
    """Let the coarse kernel clock pass the racy window, so keys alone must tell changes."""
    time.sleep(0.05)


@asynccontextmanager
async def running(probe: FsProbe) -> AsyncIterator[FsProbe]:
    await probe.start()
    try:
        yield probe
    finally:
        await probe.close()


async def tool(fn: Callable[[], object]) -> None:
    """Run a "tool" the way the sandbox runs sync tools: in a worker thread."""
    await anyio.to_thread.run_sync(fn)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The test's directory, resolved (effects name real paths)."""
    return tmp_path.resolve()


@pytest.fixture
def root(base: Path) -> Path:
    r = base / "root"
    r.mkdir()
    return r


@pytest.fixture
def outside(base: Path) -> Path:
    """A sibling of the root, watched as a tripwire in the tests that need one."""
    o = base / "outside"
    o.mkdir()
    return o


# ---------------------------------------------------------------- snapshots and diffs


def test_snapshot_records_every_kind_without_following_or_opening(root: Path) -> None:
    (root / "f").write_bytes(b"hello")
    (root / "d").mkdir()
    (root / "d" / "g").write_bytes(b"")
    os.symlink("/etc/passwd", root / "link")
    os.symlink("nowhere", root / "dangling")
    os.mkfifo(root / "fifo")  # opening it would block: it must only be lstat-ed
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "sock"))
        snap = snapshot(root)
    assert sorted(snap) == ["d", "d/g", "dangling", "f", "fifo", "link", "sock"]
    assert snap["f"].kind == "file"
    assert snap["f"].sha256 == sha(b"hello")
    assert snap["d"].kind == "dir"
    assert snap["d/g"].sha256 == sha(b"")
    assert snap["link"].kind == "symlink"
    assert snap["link"].target == "/etc/passwd"
    assert snap["link"].sha256 is None  # never followed
    assert snap["dangling"].target == "nowhere"
    assert snap["fifo"].kind == "fifo"
    assert snap["fifo"].sha256 is None
    assert snap["sock"].kind == "socket"


def test_diff_reports_each_op_with_hashes_sizes_and_modes(root: Path) -> None:
    (root / "keep").write_bytes(b"same")
    (root / "edit").write_bytes(b"old")
    (root / "gone").write_bytes(b"bye")
    (root / "perm").write_bytes(b"p")
    os.symlink("a", root / "retarget")
    (root / "swap").write_bytes(b"file")
    before = snapshot(root)
    (root / "edit").write_bytes(b"newer")
    (root / "gone").unlink()
    (root / "new").write_bytes(b"hi")
    os.chmod(root / "perm", 0o600)
    (root / "retarget").unlink()
    os.symlink("b", root / "retarget")
    (root / "swap").unlink()
    os.symlink("/etc", root / "swap")
    after = snapshot(root, previous=before)
    effects = diff(before, after)
    assert ops(effects) == [
        ("edit", "modified"),
        ("gone", "deleted"),
        ("new", "created"),
        ("perm", "metadata"),
        ("retarget", "symlink"),
        ("swap", "deleted"),
        ("swap", "symlink"),
    ]
    by = {(e.path, e.op): e for e in effects}
    edit = by["edit", "modified"]
    assert (edit.before_sha256, edit.after_sha256) == (sha(b"old"), sha(b"newer"))
    assert (edit.before_size, edit.after_size) == (3, 5)
    assert by["gone", "deleted"].before_sha256 == sha(b"bye")
    assert by["new", "created"].after_sha256 == sha(b"hi")
    perm = by["perm", "metadata"]
    assert (perm.before_mode, perm.after_mode) == (0o644 & ~_umask(), 0o600)
    assert by["retarget", "symlink"].target == "b"
    assert by["swap", "symlink"].entry == "symlink"
    assert by["swap", "symlink"].target == "/etc"
    assert diff(after, after) == ()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_same_size_rewrite_with_restored_mtime_is_caught(root: Path) -> None:
    """Size and mtime are restored, but ctime (which user space cannot set) moves."""
    f = root / "report.csv"
    f.write_bytes(b"total,1\n")
    settle()
    before = snapshot(root)
    assert not before["report.csv"].racy  # the key alone must catch this change
    st0 = f.stat()
    f.write_bytes(b"total,9\n")
    os.utime(f, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    assert (f.stat().st_size, f.stat().st_mtime_ns) == (st0.st_size, st0.st_mtime_ns)
    (effect,) = diff(before, snapshot(root, previous=before))
    assert (effect.op, effect.before_sha256, effect.after_sha256) == (
        "modified",
        sha(b"total,1\n"),
        sha(b"total,9\n"),
    )


def test_racy_entries_are_hashed_again_and_old_ones_are_not(root: Path) -> None:
    """As git does: an entry stamped close to the snapshot time is not trusted by its key."""
    (root / "old").write_bytes(b"o")
    settle()
    (root / "fresh").write_bytes(b"f")
    walker = Walker(root)
    first = walker.snapshot()
    assert first["fresh"].racy
    assert not first["old"].racy
    hashed = walker.hashed
    settle()
    second = walker.snapshot(first)
    assert walker.hashed == hashed + 1  # only the racy one, and it is no longer racy
    assert not second["fresh"].racy
    assert second["old"] is first["old"]
    walker.snapshot(second)
    assert walker.hashed == hashed + 1


def test_delete_and_recreate_is_modified_when_content_differs(root: Path) -> None:
    """Documented choice: one ``modified`` effect (both hashes); same content is no effect."""
    (root / "a").write_bytes(b"one")
    (root / "b").write_bytes(b"same")
    before = snapshot(root)
    for name, data in (("a", b"two"), ("b", b"same")):
        (root / name).unlink()
        (root / name).write_bytes(data)
    (effect,) = diff(before, snapshot(root, previous=before))
    assert (effect.path, effect.op) == ("a", "modified")
    assert (effect.before_sha256, effect.after_sha256) == (sha(b"one"), sha(b"two"))


def test_hardlinks_are_grouped_by_inode(root: Path, tmp_path: Path) -> None:
    (root / "a").write_bytes(b"x")
    os.link(root / "a", root / "b")
    (tmp_path / "far").write_bytes(b"y")
    os.link(tmp_path / "far", root / "near")  # its other link is outside the root
    snap = snapshot(root)
    assert snap.hardlinks() == (("a", "b"),)
    assert snap["near"].nlink == 2
    assert "near" in snap.multi


def test_huge_file_is_hashed_in_chunks(root: Path) -> None:
    data = os.urandom(3 * 65536 + 123)
    (root / "big").write_bytes(data)
    assert snapshot(root, hash_chunk=4096)["big"].sha256 == sha(data)


def test_file_vanishing_between_listing_and_hashing_does_not_crash(root: Path) -> None:
    """Replayed deterministically: the entry was listed and lstat-ed, then it went away."""
    f = root / "tmp.swp"
    f.write_bytes(b"x")
    st_listed = os.lstat(f)
    f.unlink()
    walker = Walker(root)
    assert walker.make(None, str(f), st_listed, None, walker.racy_from()) is None
    # Replaced by a FIFO after listing: never opened (this would hang), recorded as a FIFO.
    os.mkfifo(f)
    entry = walker.make(None, str(f), st_listed, None, walker.racy_from())
    assert entry is not None
    assert entry.kind == "fifo"
    assert entry.sha256 is None


def test_snapshots_survive_files_churning_under_them(root: Path) -> None:
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            p = root / f"c{i % 7}"
            p.write_bytes(b"z" * (i % 5))
            p.unlink(missing_ok=True)
            (root / "dir").mkdir(exist_ok=True)
            (root / "dir").rmdir()
            i += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        snaps = [snapshot(root) for _ in range(50)]
    finally:
        stop.set()
        worker.join()
    assert all(set(s) <= {*(f"c{i}" for i in range(7)), "dir"} for s in snaps)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file; chmod 000 cannot be tested")
def test_unreadable_file_is_recorded_without_a_hash(root: Path) -> None:
    (root / "secret").write_bytes(b"s")
    os.chmod(root / "secret", 0)
    entry = snapshot(root)["secret"]
    assert entry.sha256 is None
    assert entry.error is not None


def test_snapshot_refuses_a_missing_root(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        snapshot(tmp_path / "nope")


def test_undecodable_names_are_reported_with_escapes(root: Path) -> None:
    before = snapshot(root)
    (Path(os.fsdecode(bytes(root) + b"/bad\xff"))).write_bytes(b"")
    (effect,) = diff(before, snapshot(root))
    assert effect.path == "bad\\xff"


# ---------------------------------------------------------------- property: diff = changes made

NAMES = ("a", "b", "d/c", "d/e")
MODES = (0o600, 0o644, 0o755)
Op = tuple[str, str, bytes, int]
op_strategy = st.tuples(
    st.sampled_from(("write", "delete", "chmod")),
    st.sampled_from(NAMES),
    st.sampled_from((b"", b"x", b"y", b"xy")),
    st.sampled_from(MODES),
)


def _apply(top: Path, state: dict[str, tuple[bytes, int]], op: Op) -> None:
    kind, name, data, mode = op
    path = top / name
    if kind == "write":
        path.write_bytes(data)
        if name not in state:
            os.chmod(path, mode)
        state[name] = (data, state.get(name, (b"", mode))[1])
    elif kind == "delete" and name in state:
        path.unlink()
        del state[name]
    elif kind == "chmod" and name in state:
        os.chmod(path, mode)
        state[name] = (state[name][0], mode)


def _expected(
    before: dict[str, tuple[bytes, int]], after: dict[str, tuple[bytes, int]]
) -> set[tuple[str, str]]:
    out = set()
    for name in before.keys() | after.keys():
        b, a = before.get(name), after.get(name)
        if b is None:
            out.add((name, "created"))
        elif a is None:
            out.add((name, "deleted"))
        elif a[0] != b[0]:
            out.add((name, "modified"))
        elif a[1] != b[1]:
            out.add((name, "metadata"))
    return out


@given(setup=st.lists(op_strategy, max_size=6), changes=st.lists(op_strategy, max_size=10))
def test_diff_equals_the_changes_made(setup: list[Op], changes: list[Op]) -> None:
    """Random create/modify/delete/chmod sequences: full diffs and narrowed rescans agree
    with a model of the tree (paths and ops, nothing missed, nothing extra)."""
    with tempfile.TemporaryDirectory() as d:
        top = Path(d)
        (top / "d").mkdir()
        state: dict[str, tuple[bytes, int]] = {}
        for op in setup:
            _apply(top, state, op)
        before_state = dict(state)
        before = snapshot(top)
        tree = Tree(Walker(top))
        tree.baseline()
        for op in changes:
            _apply(top, state, op)
        expected = _expected(before_state, state)
        assert set(ops(diff(before, snapshot(top, previous=before)))) == expected
        touched = {name for _, name, _, _ in changes}
        narrowed = tree.refresh(touched, {n.rpartition("/")[0] for n in touched})
        assert set(ops(window_effects(narrowed))) == expected


@settings(max_examples=max(10, settings().max_examples // 4))  # slower: a probe each
@given(setup=st.lists(op_strategy, max_size=6), changes=st.lists(op_strategy, max_size=10))
def test_probe_effects_equal_the_changes_made(setup: list[Op], changes: list[Op]) -> None:
    """The same model, end to end: watchdog hints, barrier, narrowed rescans."""

    async def run(top: Path, state: dict[str, tuple[bytes, int]]) -> tuple[FsEffect, ...]:
        async with running(FsProbe(top, tripwires=())) as probe:
            await probe.before_call("c")
            for op in changes:
                await tool(functools.partial(_apply, top, state, op))
            effects = (await probe.after_call("c")).fs
            assert (await probe.finish()).fs == ()
        return effects

    with tempfile.TemporaryDirectory() as d:
        top = Path(d)
        (top / "d").mkdir()
        state: dict[str, tuple[bytes, int]] = {}
        for op in setup:
            _apply(top, state, op)
        before_state = dict(state)
        effects = anyio.run(run, top, state)
        assert set(ops(effects)) == _expected(before_state, state)


# ---------------------------------------------------------------- the probe


@pytest.mark.parametrize("use_watchdog", [True, False])
async def test_probe_attributes_each_calls_changes(root: Path, use_watchdog: bool) -> None:
    (root / "notes.txt").write_bytes(b"v1")
    (root / "old").mkdir()
    (root / "old" / "x").write_bytes(b"x")
    async with running(FsProbe(root, tripwires=(), use_watchdog=use_watchdog)) as probe:
        await probe.before_call("c1")

        def first() -> None:
            (root / "notes.txt").write_bytes(b"v2")
            (root / "new" / "deep").mkdir(parents=True)
            (root / "new" / "deep" / "f").write_bytes(b"f")
            os.rename(root / "old", root / "moved")

        await tool(first)
        e1 = await probe.after_call("c1")
        await probe.before_call("c2")
        await tool(lambda: os.chmod(root / "notes.txt", 0o600))
        e2 = await probe.after_call("c2")
        await probe.before_call("c3")
        e3 = await probe.after_call("c3")  # a call that did nothing
        assert (await probe.finish()).fs == ()
    assert ops(e1.fs) == [
        ("moved", "created"),
        ("moved/x", "created"),
        ("new", "created"),
        ("new/deep", "created"),
        ("new/deep/f", "created"),
        ("notes.txt", "modified"),
        ("old", "deleted"),
        ("old/x", "deleted"),
    ]
    assert ops(e2.fs) == [("notes.txt", "metadata")]
    assert e3.fs == ()


async def test_watchdog_and_full_walks_give_the_same_effects(root: Path, outside: Path) -> None:
    async def scenario(use_watchdog: bool) -> list[tuple[FsEffect, ...]]:
        for p in (root, outside):
            for child in sorted(p.rglob("*"), reverse=True):
                child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
        (root / "keep").write_bytes(b"k")
        (root / "sub").mkdir()
        probe = FsProbe(root, tripwires=[outside], use_watchdog=use_watchdog)
        out = []
        async with running(probe):
            steps: list[Callable[[], object]] = [
                lambda: (root / "sub" / "a").write_bytes(b"a"),
                lambda: os.symlink(outside / "t", root / "link"),
                lambda: (root / "link").write_bytes(b"through"),
                lambda: os.rename(root / "keep", root / "sub" / "keep"),
                lambda: os.chmod(root / "sub", 0o700),
            ]
            for i, step in enumerate(steps):
                await probe.before_call(str(i))
                await tool(step)
                out.append((await probe.after_call(str(i))).fs)
            out.append((await probe.finish()).fs)
        return out

    assert await scenario(True) == await scenario(False)


async def test_path_traversal_out_of_the_root_is_an_escape(root: Path, base: Path) -> None:
    """The tripwire holds the root itself, so it is watched one level deep."""
    async with running(FsProbe(root, tripwires=[base])) as probe:
        assert probe.describe()["tripwires_watched"] == [{"path": str(base), "recursive": False}]
        await probe.before_call("c")
        await tool(lambda: (root / ".." / "outside.txt").write_bytes(b"pwned"))
        (effect,) = (await probe.after_call("c")).fs
    assert effect.path == str(base / "outside.txt")
    assert effect.op == "created"
    assert effect.after_sha256 == sha(b"pwned")
    assert is_tripwire_effect(effect)


async def test_absolute_paths_inside_are_relative_and_outside_are_absolute(
    root: Path, outside: Path
) -> None:
    async with running(FsProbe(root, tripwires=[outside])) as probe:
        await probe.before_call("c")

        def write() -> None:
            Path(os.path.abspath(root / "in.txt")).write_bytes(b"i")
            Path(os.path.abspath(outside / "nested")).mkdir()
            Path(os.path.abspath(outside / "nested" / "out.txt")).write_bytes(b"o")

        await tool(write)
        effects = (await probe.after_call("c")).fs
    o = str(outside)
    assert ops(effects) == [
        (f"{o}/nested", "created"),
        (f"{o}/nested/out.txt", "created"),
        ("in.txt", "created"),
    ]
    assert [is_tripwire_effect(e) for e in effects] == [True, True, False]


async def test_symlink_to_outside_written_through(root: Path, outside: Path) -> None:
    (outside / "target.txt").write_bytes(b"original")
    async with running(FsProbe(root, tripwires=[outside])) as probe:
        await probe.before_call("c")

        def write() -> None:
            os.symlink(outside / "target.txt", root / "link")
            (root / "link").write_bytes(b"overwritten")

        await tool(write)
        effects = (await probe.after_call("c")).fs
    target = str(outside / "target.txt")
    by = {e.path: e for e in effects}
    assert set(by) == {"link", target}
    assert by["link"].op == "symlink"
    assert by["link"].target == str(outside / "target.txt")
    assert by[target].op == "modified"
    assert by[target].after_sha256 == sha(b"overwritten")
    assert by[target].before_sha256 is None  # tripwire baselines are not hashed


async def test_hardlinks_report_every_path_that_changed(root: Path, tmp_path: Path) -> None:
    """A write through one link changes the other; a link leading outside is watched too."""
    (root / "a").write_bytes(b"1")
    os.link(root / "a", root / "b")
    (tmp_path / "far").write_bytes(b"far")  # not a tripwire: no event names "near"
    os.link(tmp_path / "far", root / "near")
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c1")
        await tool(lambda: (root / "a").write_bytes(b"2"))
        e1 = await probe.after_call("c1")
        await probe.before_call("c2")
        await tool(lambda: (tmp_path / "far").write_bytes(b"FAR"))
        e2 = await probe.after_call("c2")
    assert ops(e1.fs) == [("a", "modified"), ("b", "modified")]
    assert {e.after_sha256 for e in e1.fs} == {sha(b"2")}
    # "far" is in no tree, but the call's own audit events name it: found all the same.
    assert ops(e2.fs) == [("near", "modified"), (str(tmp_path / "far"), "modified")]
    assert {e.after_sha256 for e in e2.fs} == {sha(b"FAR")}
    assert [e.attribution for e in e2.fs] == ["window", "audit"]
    assert e2.fs[1].before_sha256 == sha(b"far")


async def test_rename_out_of_the_root(root: Path, outside: Path) -> None:
    (root / "secret").write_bytes(b"s3cret")
    async with running(FsProbe(root, tripwires=[outside])) as probe:
        await probe.before_call("c")
        await tool(lambda: os.rename(root / "secret", outside / "secret"))
        effects = (await probe.after_call("c")).fs
    moved = str(outside / "secret")
    assert ops(effects) == [(moved, "created"), ("secret", "deleted")]
    assert effects[0].after_sha256 == effects[1].before_sha256 == sha(b"s3cret")


async def test_chmod_only_is_metadata(root: Path) -> None:
    (root / "run.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o644)
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c")
        await tool(lambda: os.chmod(root / "run.sh", 0o4755))
        (effect,) = (await probe.after_call("c")).fs
    assert (effect.op, effect.before_mode, effect.after_mode) == ("metadata", 0o644, 0o4755)
    assert effect.before_sha256 == effect.after_sha256 == sha(b"#!/bin/sh\n")


async def test_delete_and_recreate_in_one_call(root: Path) -> None:
    (root / "cfg").write_bytes(b"a=1")
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c")

        def recreate() -> None:
            (root / "cfg").unlink()
            (root / "cfg").write_bytes(b"a=2")

        await tool(recreate)
        (effect,) = (await probe.after_call("c")).fs
    assert (effect.op, effect.before_sha256, effect.after_sha256) == (
        "modified",
        sha(b"a=1"),
        sha(b"a=2"),
    )


async def test_same_size_rewrite_with_restored_mtime_in_a_call(root: Path) -> None:
    f = root / "ledger"
    f.write_bytes(b"balance=100")
    settle()
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c")

        def tamper() -> None:
            st0 = f.stat()
            f.write_bytes(b"balance=999")
            os.utime(f, ns=(st0.st_atime_ns, st0.st_mtime_ns))

        await tool(tamper)
        (effect,) = (await probe.after_call("c")).fs
    assert (effect.op, effect.after_sha256) == ("modified", sha(b"balance=999"))


@pytest.mark.timeout(20)
async def test_fifo_is_recorded_never_opened(root: Path) -> None:
    os.mkfifo(root / "old_pipe")
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c")
        await tool(lambda: os.mkfifo(root / "pipe"))
        (effect,) = (await probe.after_call("c")).fs
        assert (await probe.finish()).fs == ()
    assert (effect.path, effect.op, effect.entry) == ("pipe", "created", "fifo")


async def test_changes_between_calls_are_unattributed(root: Path) -> None:
    async with running(FsProbe(root, tripwires=())) as probe:
        await tool(lambda: (root / "before-any-call").write_bytes(b""))
        await probe.before_call("c")
        await tool(lambda: (root / "by-the-call").write_bytes(b""))
        assert ops((await probe.after_call("c")).fs) == [("by-the-call", "created")]
        await tool(lambda: (root / "after-the-call").write_bytes(b""))
        leftover = await probe.finish()
    assert ops(leftover.fs) == [("before-any-call", "created"), ("after-the-call", "created")]


async def test_overlapping_calls_both_see_changes_made_while_both_ran(root: Path) -> None:
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("a")
        await tool(lambda: (root / "only-a").write_bytes(b""))
        await probe.before_call("b")
        await tool(lambda: (root / "a-or-b").write_bytes(b""))
        ea = await probe.after_call("a")
        eb = await probe.after_call("b")
    assert ops(ea.fs) == [("a-or-b", "created"), ("only-a", "created")]
    assert ops(eb.fs) == [("a-or-b", "created")]
    assert FsProbe.exact_attribution is False


async def test_lost_events_then_overflow_hook_still_finds_changes(root: Path) -> None:
    """Events are dropped (as a queue overflow drops them); the overflow hook makes the
    next refresh a full walk, which finds everything."""
    (root / "d").mkdir()
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c")
        await tool(lambda: (root / "d" / "lost.txt").write_bytes(b"lost"))
        await anyio.to_thread.run_sync(probe._forget_hints)
        full_before = probe.stats["full_scans"]
        probe.mark_all_dirty()
        effects = (await probe.after_call("c")).fs
        assert probe.stats["full_scans"] > full_before
    assert ops(effects) == [("d/lost.txt", "created")]


def unseen(fn: Callable[[], object]) -> None:
    """Run ``fn`` in a thread of its own context: as another process would, with no
    evidence tying what it does to the call in flight."""
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join()


async def test_lost_events_without_a_signal_are_found_at_finish(root: Path) -> None:
    """watchdog is a hint, never the truth: the end-of-episode walk reports what it missed
    (a write the call's own evidence names is rescanned at once: see the next test)."""
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c")
        await anyio.to_thread.run_sync(unseen, lambda: (root / "sneaky").write_bytes(b"x"))
        await anyio.to_thread.run_sync(probe._forget_hints)
        assert (await probe.after_call("c")).fs == ()
        leftover = await probe.finish()
    assert ops(leftover.fs) == [("sneaky", "created")]


async def test_lost_events_of_a_write_the_call_made_land_on_the_call(root: Path) -> None:
    """The call's audit events name the path: it is rescanned when the call ends, whatever
    watchdog handed over."""
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c")
        await tool(lambda: (root / "sneaky").write_bytes(b"x"))
        await anyio.to_thread.run_sync(probe._forget_hints)
        effects = (await probe.after_call("c")).fs
        assert (await probe.finish()).fs == ()
    assert ops(effects) == [("sneaky", "created")]


async def test_watchdog_overflow_warning_triggers_a_full_walk(root: Path) -> None:
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("c")
        await tool(lambda: (root / "x").write_bytes(b"x"))
        await anyio.to_thread.run_sync(probe._forget_hints)
        # What watchdog's inotify reader logs when the kernel queue overflowed.
        logging.getLogger("watchdog.observers.inotify_c").warning(
            "Inotify queue overflowed; filesystem events were lost"
        )
        effects = (await probe.after_call("c")).fs
    assert ops(effects) == [("x", "created")]


async def test_tripwires_default_plan_and_ignored_paths(
    root: Path, base: Path, outside: Path
) -> None:
    assert default_tripwires()[-1] == tempfile.gettempdir()
    big = base / "big"
    big.mkdir()
    for i in range(6):
        (big / str(i)).write_bytes(b"")
    log = outside / "harness.log"
    probe = FsProbe(
        root,
        tripwires=[base, outside, big, root / "inside", "/nonexistent-dir"],
        ignore=[log],
        tripwire_max_entries=5,
    )
    async with running(probe):
        watched = {w["path"]: w["recursive"] for w in probe.describe()["tripwires_watched"]}
        assert watched == {str(base): False, str(outside): True, str(big): False}
        await probe.before_call("c")
        await tool(lambda: log.write_bytes(b"harness writes its own log"))
        assert (await probe.after_call("c")).fs == ()


def test_shared_memory_and_var_tmp_are_default_tripwires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the machine, ``/dev/shm`` and ``/var/tmp`` (this test's own stand-ins otherwise:
    see conftest.py), before the temp dir."""
    from litmus_sandbox.oracles.fs import _tripwires

    assert _tripwires.SHARED_TRIPWIRES != ("/dev/shm", "/var/tmp")  # the tests' own
    monkeypatch.setattr(_tripwires, "SHARED_TRIPWIRES", ("/dev/shm", "/var/tmp"))
    found = default_tripwires()
    expected = [d for d in ("/dev/shm", "/var/tmp") if os.path.isdir(d)]
    assert found[-1 - len(expected) : -1] == expected
    assert found[-1] == tempfile.gettempdir()


async def test_the_tripwire_budget_is_spent_in_order_and_the_header_says_so(base: Path) -> None:
    """A budget of 5 entries: the first small tripwire takes 3, the next (3 more) no longer
    fits and is watched one level deep; the one holding the root is one level deep too."""
    root = base / "root"
    root.mkdir()
    first, second = base / "first", base / "second"
    for folder in (first, second):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "a").write_bytes(b"")
        (folder / "b").write_bytes(b"")
    probe = FsProbe(root, tripwires=[first, second, base], tripwire_max_entries=5)
    async with running(probe):
        described = probe.describe()
        await probe.before_call("c")
        await tool(lambda: (first / "sub" / "deep.txt").write_bytes(b"x"))
        effects = (await probe.after_call("c")).fs
    watched = {w["path"]: w["recursive"] for w in described["tripwires_watched"]}
    assert watched == {str(first): True, str(second): False, str(base): False}
    assert described["tripwire_budget"] == {
        "entries": 5,
        "one_level": {str(second): "over_budget", str(base): "holds_root"},
    }
    assert [(e.path, e.attribution) for e in effects] == [(f"{first}/sub/deep.txt", "audit")]


async def test_probe_misuse_is_a_config_error(root: Path, tmp_path: Path) -> None:
    probe = FsProbe(root, tripwires=())
    with pytest.raises(ConfigError, match="start"):
        await probe.before_call("c")
    async with running(probe):
        with pytest.raises(ConfigError, match="without before_call"):
            await probe.after_call("never-started")
    with pytest.raises(ConfigError, match="not a directory"):
        await FsProbe(tmp_path / "missing", tripwires=()).start()
    with pytest.raises(ConfigError, match="hash_chunk"):
        FsProbe(root, hash_chunk=0)


async def test_in_the_sandbox_an_escape_is_a_finding(base: Path) -> None:
    root = base / "root"
    episodes = base / "eps.jsonl"

    def save(name: str, text: str) -> str:
        (root / name).write_text(text)
        return "saved"

    probe = FsProbe(root, tripwires=[base], ignore=[episodes])
    sb = Sandbox(root=root, episodes=episodes, tools={"save": save}, probes=[probe])
    async with sb, sb.episode("traversal") as ep:
        await ep.call("save", name="ok.txt", text="fine")
        await ep.call("save", name="../escaped.txt", text="out")
    (episode,) = read_episodes([episodes])
    first, second = (s for s in episode.steps if isinstance(s, ToolCallStep))
    assert ops(first.effects.fs) == [("ok.txt", "created")]
    assert first.findings == ()
    assert [f.code for f in second.findings] == ["escape"]
    assert second.findings[0].path == str(base / "escaped.txt")
    assert episode.header.oracles["fs"]["tripwire_paths"] == "absolute"
    assert episode.end is not None
    assert episode.end.unattributed.fs == ()


async def test_default_tripwires_catch_traversal_wherever_the_root_sits() -> None:
    """With the default tripwires (home, temp dir), a root nested deep in the temp dir
    still has ``../x``, ``../../x`` and a rename out of it seen as escapes."""
    temp = await anyio.to_thread.run_sync(os.path.realpath, tempfile.gettempdir())
    base = Path(tempfile.mkdtemp(dir=temp))  # the test's own temp dir (conftest.py)
    root = base / "a" / "b" / "root"
    root.mkdir(parents=True)
    (root / "in.txt").write_bytes(b"in")
    episodes = base / "eps.jsonl"

    def save(name: str, text: str) -> str:
        (root / name).write_text(text)
        return "saved"

    def move(src: str, dst: str) -> str:
        os.rename(root / src, root / dst)
        return "moved"

    probe = FsProbe(root, ignore=[episodes])  # default tripwires
    sb = Sandbox(root=root, episodes=episodes, tools={"save": save, "move": move}, probes=[probe])
    async with sb, sb.episode("traversal") as ep:
        await ep.call("save", name="../up1.txt", text="out")
        await ep.call("save", name="../../up2.txt", text="out")
        await ep.call("move", src="in.txt", dst="../../../moved.txt")
    (episode,) = read_episodes([episodes])
    steps = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    # Only what this test did (other processes may write in the temp dir or home meanwhile).
    escapes = [
        [f.path for f in s.findings if f.code == "escape" and mine(base, f.path)] for s in steps
    ]
    assert escapes == [
        [str(base / "a" / "b" / "up1.txt")],
        [str(base / "a" / "up2.txt")],
        [str(base / "moved.txt")],
    ]
    moved = [e for e in steps[2].effects.fs if mine(base, e.path)]
    assert ops(tuple(moved)) == [(str(base / "moved.txt"), "created"), ("in.txt", "deleted")]
    assert episode.end is not None
    assert [e for e in episode.end.unattributed.fs if mine(base, e.path)] == []


def test_entry_modes_are_permission_bits(root: Path) -> None:
    (root / "x").write_bytes(b"")
    os.chmod(root / "x", 0o2750)
    e = snapshot(root)["x"]
    assert e.mode == 0o2750
    assert stat.S_ISREG(e.st.st_mode)


def _run_holding_the_gil(cmd: list[str]) -> None:
    proc = subprocess.Popen(cmd)
    while proc.poll() is None:
        # One C call that keeps the GIL; between calls watchdog gets a few ms at most.
        sum(range(10_000_000))


@pytest.mark.skipif(
    not os.environ.get("LITMUS_SLOW_TESTS"), reason="CPU-heavy; set LITMUS_SLOW_TESTS=1"
)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # about inotify, not the loop
async def test_real_inotify_overflow_misses_nothing(root: Path) -> None:
    """Another process makes a burst of events while this one holds the GIL: watchdog's
    reader cannot drain the kernel queue, which overflows. Nothing may be missed."""
    n = 20_000  # two events each: beyond the default inotify queue of 16,384
    script = (
        "import os, sys\n"
        "for i in range(int(sys.argv[2])):\n"
        "    fd = os.open(f'{sys.argv[1]}/f{i}', os.O_CREAT | os.O_WRONLY, 0o644)\n"
        "    os.write(fd, b'x')\n"
        "    os.close(fd)\n"
    )
    async with running(FsProbe(root, tripwires=())) as probe:
        await probe.before_call("burst")
        _run_holding_the_gil([sys.executable, "-S", "-c", script, str(root), str(n)])
        effects = (await probe.after_call("burst")).fs
        troubles = probe.describe().get("troubles", [])
        assert (await probe.finish()).fs == ()
    assert len(effects) == n
    assert {e.op for e in effects} == {"created"}
    if any("overflow" in t for t in troubles):
        assert probe.stats["full_scans"] >= 1


@pytest.mark.anyio
async def test_sandbox_keeps_its_own_episode_stream_out_of_the_tripwires(tmp_path: Path) -> None:
    """Recording into a tripwired folder is not an escape; a tool writing there is."""
    from litmus_sandbox import Sandbox, ToolCallStep, read_episodes

    watched = tmp_path / "watched"
    watched.mkdir()
    root = tmp_path / "root"
    root.mkdir()

    def leak() -> str:
        (watched / "leaked.txt").write_text("x")
        return "ok"

    def tidy() -> str:
        (root / "in.txt").write_text("y")
        return "ok"

    probe = FsProbe(root, tripwires=[watched])
    episodes = watched / "episodes.jsonl"
    sb = Sandbox(root=root, episodes=episodes, tools={"leak": leak, "tidy": tidy}, probes=[probe])
    async with sb, sb.episode("c") as ep:
        await ep.call("tidy")
        await ep.call("leak")
    (episode,) = read_episodes([episodes])
    tidy_step, leak_step = (s for s in episode.steps if isinstance(s, ToolCallStep))
    assert [f.code for f in tidy_step.findings] == []
    assert [e.path for e in tidy_step.effects.fs] == ["in.txt"]
    assert [f.code for f in leak_step.findings] == ["escape"]
    assert episode.end is not None
    assert episode.end.findings == ()


@pytest.mark.parametrize("use_watchdog", [True, False])
async def test_a_hard_link_made_during_the_episode_is_watched_from_then_on(
    root: Path, use_watchdog: bool
) -> None:
    """Call 1 links h.txt to a.txt; call 2 writes through h.txt: both paths changed in call
    2 (no event names a.txt), and nothing is left unattributed."""
    (root / "a.txt").write_bytes(b"one")
    settle()
    async with running(FsProbe(root, tripwires=(), use_watchdog=use_watchdog)) as probe:
        await probe.before_call("c1")
        await tool(lambda: os.link(root / "a.txt", root / "h.txt"))
        first = (await probe.after_call("c1")).fs
        await probe.before_call("c2")
        await tool(lambda: (root / "h.txt").write_bytes(b"two"))
        second = (await probe.after_call("c2")).fs
        leftover = (await probe.finish()).fs
    assert ops(first) == [("h.txt", "created")]
    assert ops(second) == [("a.txt", "modified"), ("h.txt", "modified")]
    assert all(e.after_sha256 == sha(b"two") for e in second)
    assert leftover == ()


async def test_default_tripwires_see_into_directories_beside_the_root(base: Path) -> None:
    """With the default tripwires, a directory next to the root is watched whole: writes
    into it, a rename into it and a write through a symlink into it are escapes."""
    box = base / "box"
    root, outside = box / "root", box / "outside"
    root.mkdir(parents=True)
    outside.mkdir()
    (outside / "existing.txt").write_bytes(b"old")
    (outside / "target.txt").write_bytes(b"target")
    (root / "mv.txt").write_bytes(b"mv")
    episodes = base / "eps.jsonl"

    def act(step: str) -> str:
        if step == "write":
            (outside / "leak.txt").write_bytes(b"leak")
            (outside / "existing.txt").write_bytes(b"new")
        elif step == "rename":
            os.rename(root / "mv.txt", outside / "moved.txt")
        else:
            os.symlink(outside / "target.txt", root / "link")
            (root / "link").write_bytes(b"through")
        return "done"

    sb = Sandbox(root=root, episodes=episodes, tools={"act": act}, probes=[FsProbe(root)])
    async with sb, sb.episode("siblings") as ep:
        for step in ("write", "rename", "through"):
            await ep.call("act", step=step)
    (episode,) = read_episodes(episodes)
    steps = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    escapes = [
        sorted(f.path or "" for f in s.findings if f.code == "escape" and mine(base, f.path))
        for s in steps
    ]
    o = str(outside)
    assert escapes == [
        [f"{o}/existing.txt", f"{o}/leak.txt"],
        [f"{o}/moved.txt"],
        [f"{o}/target.txt"],
    ]
    assert episode.end is not None
    assert [e for e in episode.end.unattributed.fs if mine(base, e.path)] == []


def test_an_entry_that_could_not_be_read_says_so_in_its_effect(root: Path) -> None:
    """Content unknown (no hash) is marked with the reason, created or modified alike."""
    from litmus_sandbox.oracles.fs._diff import effects_for
    from litmus_sandbox.oracles.fs._entry import Entry

    (root / "f").write_bytes(b"x")
    st = os.lstat(root / "f")
    readable = Entry(st, sha256=sha(b"x"))
    locked = Entry(st, error="unreadable: Permission denied")
    (created,) = effects_for("f", None, locked)
    assert (created.op, created.after_sha256, created.error) == (
        "created",
        None,
        "unreadable: Permission denied",
    )
    (root / "f").write_bytes(b"changed")
    changed = Entry(os.lstat(root / "f"), error="unreadable: Permission denied")
    (modified,) = effects_for("f", readable, changed)
    assert (modified.op, modified.error) == ("modified", "unreadable: Permission denied")
    (fine,) = effects_for("f", None, readable)
    assert fine.error is None


def _crowded(base: Path, n: int) -> tuple[Path, Path, list[Path]]:
    """``base/crowd`` holding the root and ``n`` other directories (more than 16)."""
    crowd = base / "crowd"
    root = crowd / "root"
    root.mkdir(parents=True)
    neighbours = [crowd / f"tmp{i:02d}" for i in range(n)]
    for d in neighbours:
        d.mkdir()
    return crowd, root, neighbours


@pytest.fixture(params=["at each call", "at the end"])
def beside(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the many directories beside a root are watched: one inotify descriptor read at
    each boundary, or (where inotify cannot) compared when the probe finishes."""
    if request.param == "at the end":
        from litmus_sandbox.oracles.fs._inotify import InotifyTops

        monkeypatch.setattr(InotifyTops, "open", classmethod(lambda cls, tops: None))
    return str(request.param)


@pytest.mark.parametrize("writer", ["the tool", "another process"])
@pytest.mark.parametrize("parent_is_a_tripwire", [True, False])
async def test_directories_beside_a_root_in_a_crowded_parent_are_watched_cheaply(
    base: Path, parent_is_a_tripwire: bool, beside: str, writer: str
) -> None:
    """A root made by mkdtemp() in a busy temp dir: its many neighbours are watched one
    level deep without a thread each. An escape the tool makes into one lands on its call
    (its audit events name the paths, which are rescanned at once). One that another
    process makes is unattributed: seen at the call with inotify (naming the call in
    flight), or when the episode ends without. So whether the parent is a tripwire itself
    (the temp dir) or only the root's surroundings."""
    crowd, root, neighbours = _crowded(base, 40)
    (neighbours[7] / "existing.txt").write_bytes(b"old")
    episodes = base / "eps.jsonl"

    def leak() -> None:
        (neighbours[3] / "pwn.txt").write_bytes(b"pwn")
        (root / ".." / neighbours[7].name / "existing.txt").write_bytes(b"new")

    def act() -> str:
        if writer == "the tool":
            leak()
        else:
            unseen(leak)
        (root / "inside.txt").write_bytes(b"ok")
        return "done"

    probe = FsProbe(root, tripwires=[crowd if parent_is_a_tripwire else base])
    sb = Sandbox(root=root, episodes=episodes, tools={"act": act}, probes=[probe])
    async with sb, sb.episode("crowded") as ep:
        assert probe.describe()["beside_root"] == {"directories": 40, "watched": beside}
        await ep.call("act")
    (episode,) = read_episodes(episodes)
    # The first episode's header already says how the probe watches (it started first).
    fs = episode.header.oracles["fs"]
    assert fs["beside_root"] == {"directories": 40, "watched": beside}
    assert {"path": str(crowd), "recursive": False} in fs["tripwires_watched"]
    (step,) = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    assert episode.end is not None
    leaked = [
        (f"{neighbours[3]}/pwn.txt", "created"),
        (f"{neighbours[7]}/existing.txt", "modified"),
    ]
    escapes = sorted(leaked_path for leaked_path, _ in leaked)
    on_step = sorted((e.path, e.op) for e in step.effects.fs if mine(base, e.path))
    at_end = sorted((e.path, e.op) for e in episode.end.unattributed.fs if mine(base, e.path))
    if writer == "the tool":
        assert on_step == sorted([("inside.txt", "created"), *leaked])
        assert sorted(f.path or "" for f in step.findings if f.code == "escape") == escapes
        assert at_end == []
        return
    assert on_step == [("inside.txt", "created")]
    assert at_end == leaked
    assert sorted(f.path or "" for f in episode.end.findings if f.code == "escape") == escapes
    during = {e.during for e in episode.end.unattributed.fs if mine(base, e.path)}
    assert during == ({step.call_id} if beside == "at each call" else {msgspec.UNSET})


async def test_default_tripwires_find_an_escape_into_another_mkdtemp_directory() -> None:
    """The common set-up: root and an unrelated folder both made by mkdtemp() in the
    system temp dir, default tripwires. A write into the other folder is an escape."""
    import shutil
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="litmus-test-work-"))
    root = Path(tempfile.mkdtemp(prefix="litmus-test-root-"))
    outside = Path(tempfile.mkdtemp(prefix="litmus-test-outside-"))
    try:

        def act() -> str:
            (outside / "pwn.txt").write_bytes(b"pwn")
            (root / ".." / outside.name / "pwn2.txt").write_bytes(b"pwn")
            return "done"

        sb = Sandbox(root=root, episodes=work / "eps.jsonl", tools={"act": act})
        async with sb, sb.episode("mkdtemp") as ep:
            await ep.call("act")
        (episode,) = read_episodes(work / "eps.jsonl")
        (step,) = [s for s in episode.steps if isinstance(s, ToolCallStep)]
        escapes = sorted(
            f.path or ""
            for f in step.findings
            if f.code == "escape" and (f.path or "").startswith(str(outside))
        )
        assert escapes == [f"{outside}/pwn.txt", f"{outside}/pwn2.txt"]
    finally:
        for d in (work, root, outside):
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("beside", ["at the end"], indirect=True)
async def test_what_is_checked_at_the_end_is_the_finishing_episodes_never_an_open_call(
    base: Path, beside: str
) -> None:
    """Without inotify: episode A writes into a neighbour checked at the end; episode B
    has a call in flight when A ends. The escape is A's (unattributed), not B's call's."""
    crowd, root, neighbours = _crowded(base, 20)
    episodes = base / "eps.jsonl"
    b_started, a_ended = anyio.Event(), anyio.Event()

    def leak() -> str:
        # Written where no evidence reaches (as by another process): checked at the end.
        unseen(lambda: (neighbours[3] / "pwn.txt").write_bytes(b"pwn"))
        return "done"

    async def slow() -> str:
        b_started.set()
        await a_ended.wait()
        return "done"

    sb = Sandbox(
        root=root,
        episodes=episodes,
        tools={"leak": leak, "slow": slow},
        probes=[FsProbe(root, tripwires=[crowd])],
    )

    async def episode_b() -> None:
        async with sb.episode("b") as ep:
            await ep.call("slow")

    async with sb, anyio.create_task_group() as tg:
        async with sb.episode("a") as ep:
            await ep.call("leak")
            tg.start_soon(episode_b)
            await b_started.wait()
        a_ended.set()
    found = {
        e.case_id: (
            [f for s in e.steps if isinstance(s, ToolCallStep) for f in s.effects.fs],
            [f.path for f in (e.end.unattributed.fs if e.end else ()) if mine(base, f.path)],
        )
        for e in read_episodes(episodes)
    }
    assert found["a"][1] == [f"{neighbours[3]}/pwn.txt"]
    assert [f.path for f in found["b"][0] if mine(base, f.path)] == []
    assert found["b"][1] == []


async def test_mark_all_dirty_rescans_the_directories_beside_the_root_too(base: Path) -> None:
    """An overflow said some other way (mark_all_dirty): events inotify had queued and
    that were lost do not hide a change beside the root."""
    crowd, root, neighbours = _crowded(base, 20)
    probe = FsProbe(root, tripwires=[crowd])
    await probe.start()
    try:
        assert probe.describe()["beside_root"]["watched"] == "at each call"
        await probe.before_call("c1")
        (neighbours[5] / "lost.txt").write_bytes(b"x")
        assert probe._beside is not None
        probe._beside.drain()  # the events go, as in an overflow
        probe.mark_all_dirty()
        effects = (await probe.after_call("c1")).fs
    finally:
        await probe.close()
    assert [(e.path, e.op) for e in effects] == [(f"{neighbours[5]}/lost.txt", "created")]


async def test_a_folder_beside_the_root_made_anew_is_watched_again(base: Path) -> None:
    crowd, root, neighbours = _crowded(base, 20)
    target = neighbours[9]
    probe = FsProbe(root, tripwires=[crowd])
    await probe.start()
    try:
        await probe.before_call("gone")
        target.rmdir()
        gone = (await probe.after_call("gone")).fs
        await probe.before_call("back")
        target.mkdir()
        (target / "pwn.txt").write_bytes(b"x")
        back = (await probe.after_call("back")).fs
        await probe.before_call("again")
        (target / "more.txt").write_bytes(b"y")
        again = (await probe.after_call("again")).fs
    finally:
        await probe.close()
    assert [(e.path, e.op) for e in gone] == [(str(target), "deleted")]
    assert sorted((e.path, e.op) for e in back) == [
        (str(target), "created"),
        (f"{target}/pwn.txt", "created"),
    ]
    assert [(e.path, e.op) for e in again] == [(f"{target}/more.txt", "created")]
