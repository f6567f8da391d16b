"""Full walks shared with the stat helper process give the same snapshot as a walk alone."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox.oracles.fs import _stat_helper as _fs_stat_helper
from litmus_sandbox.oracles.fs._entry import Snapshot
from litmus_sandbox.oracles.fs._probe import diff
from litmus_sandbox.oracles.fs._snapshot import Walker
from litmus_sandbox.oracles.fs._stat_helper import StatHelper, shared_helper
from litmus_sandbox.oracles.fs._stat_worker import list_dirs

View = dict[str, tuple[object, ...]]


def view(snap: Snapshot) -> tuple[View, dict[str, str], set[str]]:
    """Everything a snapshot says, in comparable form (not atime, which reads may move)."""
    entries: View = {}
    for path in snap:
        e = snap[path]
        entries[path] = (e.key(), e.nlink, e.sha256, e.target, e.error, e.flags)
    return entries, dict(snap.errors), set(snap.multi)


@pytest.fixture
def helper() -> StatHelper:
    h = shared_helper()
    if h is None:
        pytest.skip("the stat helper needs two CPUs (or is turned off)")
    return h


def both_ways(top: Path, previous: Snapshot, helper: StatHelper) -> tuple[Snapshot, Snapshot]:
    """A full walk with the helper (checked to have answered) and one without."""
    asked = helper.requests
    shared = Walker(top, helper_min_entries=0).snapshot(previous)
    assert helper.requests == asked + 1, "the helper did not take part in the walk"
    alone = Walker(top, use_helper=False).snapshot(previous)
    return shared, alone


def settle() -> None:
    time.sleep(0.05)  # past the racy window: keys alone must tell changes


def build(top: Path) -> None:
    for d in ("a", "a/x", "a/x/deep", "b", "c", "gone", "gone/sub", "swap", "swap/inner"):
        (top / d).mkdir()
    for i in range(6):
        for d in ("a", "a/x", "b", "c", "swap/inner", "gone/sub"):
            (top / d / f"f{i}.txt").write_bytes(f"{d} {i}\n".encode())
    os.symlink("a/f0.txt", top / "b" / "link")
    os.link(top / "a" / "f1.txt", top / "c" / "hard")
    os.mkfifo(top / "c" / "pipe")


def built(top: Path) -> Snapshot:
    """``build`` the tree in ``top``, let the racy window pass, and snapshot it alone."""
    build(top)
    settle()
    return Walker(top, use_helper=False).snapshot()


def test_split_walk_sees_every_kind_of_change_like_a_walk_alone(helper: StatHelper) -> None:
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as outside:
        top = Path(d)
        build(top)
        (Path(outside) / "inner").mkdir()
        (Path(outside) / "inner" / "secret").write_bytes(b"outside the tree")
        settle()
        before = Walker(top, use_helper=False).snapshot()
        # Changes of every kind, in directories either side may list.
        (top / "a" / "new.txt").write_bytes(b"new")
        (top / "b" / "f2.txt").unlink()
        (top / "c" / "f3.txt").chmod(0o600)
        f4 = top / "a" / "x" / "f4.txt"
        st = f4.stat()
        f4.write_bytes(b"a/x 9\n")  # same size, then the old mtime put back
        os.utime(f4, ns=(st.st_atime_ns, st.st_mtime_ns))
        (top / "a" / "x" / "deep" / "more").mkdir()
        (top / "a" / "x" / "deep" / "more" / "m.txt").write_bytes(b"m")
        shutil.rmtree(top / "gone")
        shutil.rmtree(top / "swap")
        os.symlink(Path(outside), top / "swap")  # its old subdirectory now leads outside
        (top / "b" / "link").unlink()
        os.symlink("c/f5.txt", top / "b" / "link")
        os.link(top / "b" / "f0.txt", top / "b" / "hard2")
        settle()
        shared, alone = both_ways(top, before, helper)
        assert view(shared) == view(alone)
        assert not any(p.startswith("swap/") for p in shared), "walked through a symlink"
        ops = {(e.path, e.op) for e in diff(before, shared)}
        assert ("a/new.txt", "created") in ops
        assert ("b/f2.txt", "deleted") in ops
        assert ("c/f3.txt", "metadata") in ops
        assert ("a/x/f4.txt", "modified") in ops
        assert ("a/x/deep/more/m.txt", "created") in ops
        assert ("gone/sub/f0.txt", "deleted") in ops
        assert ("swap/inner/f0.txt", "deleted") in ops
        assert ops == {(e.path, e.op) for e in diff(before, alone)}


# A small tree model for the property: a few directories, files and symlinks.
_DIRS = ("", "p", "p/q", "r", "r/s")
_op = st.tuples(
    st.sampled_from(["write", "delete", "chmod", "mkdir", "rmtree", "symlink_dir", "touch"]),
    st.sampled_from(_DIRS),
    st.sampled_from(["n1", "n2", "q", "s"]),
    st.binary(max_size=8),
)


def _apply(top: Path, op: tuple[str, str, str, bytes]) -> None:
    kind, parent, name, data = op
    base = top / parent
    if not base.is_dir() or base.is_symlink():
        return
    p = base / name
    exists = p.exists() or p.is_symlink()
    if kind == "write" and (not exists or p.is_file()):
        p.write_bytes(data)
    elif kind == "delete" and exists and not p.is_dir():
        p.unlink()
    elif kind == "chmod" and p.is_file() and not p.is_symlink():
        p.chmod(0o640 if p.stat().st_mode & 0o777 == 0o644 else 0o644)
    elif kind == "mkdir" and not exists:
        p.mkdir()
        (p / "inside").write_bytes(data)
    elif kind == "rmtree" and p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif kind == "symlink_dir" and p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
        os.symlink(top / "r", p)  # a directory becomes a link to another one
    elif kind == "touch" and p.is_file() and not p.is_symlink():
        os.utime(p, ns=(1, 1_000_000_000))


@settings(max_examples=max(10, settings().max_examples // 2))
@given(setup=st.lists(_op, max_size=12), changes=st.lists(_op, max_size=12))
def test_split_walk_equals_a_walk_alone(
    setup: list[tuple[str, str, str, bytes]], changes: list[tuple[str, str, str, bytes]]
) -> None:
    helper = shared_helper()
    assert helper is not None
    with tempfile.TemporaryDirectory() as d:
        top = Path(d)
        for rel in ("p", "p/q", "r", "r/s"):
            (top / rel).mkdir()
            (top / rel / "f").write_bytes(rel.encode())
        for op in setup:
            _apply(top, op)
        before = Walker(top, use_helper=False).snapshot()
        for op in changes:
            _apply(top, op)
        shared, alone = both_ways(top, before, helper)
        assert view(shared) == view(alone)
        assert diff(before, shared) == diff(before, alone)


def test_a_helper_that_died_between_walks_is_replaced(helper: StatHelper) -> None:
    with tempfile.TemporaryDirectory() as d:
        top = Path(d)
        before = built(top)
        walker = Walker(top, helper_min_entries=0)
        walker.snapshot(before)  # the helper is running now
        pid = helper.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z":
            time.sleep(0.001)  # dead, not yet reaped: the next walk sees it gone
        (top / "b" / "after-kill").write_bytes(b"x")
        asked = helper.requests
        after = walker.snapshot(before)
        assert helper.requests == asked + 1
        assert helper.pid not in (None, pid)
        assert view(after) == view(Walker(top, use_helper=False).snapshot(before))
        assert "b/after-kill" in after


def test_a_helper_that_breaks_mid_walk_is_done_without(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that reads the request and exits: each walk does the helper's share
    itself, and after three failures the helper is no longer tried."""
    broken = StatHelper([sys.executable, "-c", "import sys; sys.stdin.buffer.read(4)"])
    monkeypatch.setattr(_fs_stat_helper, "_shared", broken)
    with tempfile.TemporaryDirectory() as d:
        top = Path(d)
        before = built(top)
        (top / "a" / "z").write_bytes(b"z")
        (top / "b" / "f1.txt").unlink()
        expected = view(Walker(top, use_helper=False).snapshot(before))
        walker = Walker(top, helper_min_entries=0)
        for failures in (1, 2, 3):
            assert view(walker.snapshot(before)) == expected
            assert broken.failures == failures
            assert broken.pid is None
        assert not broken.try_acquire()
        assert view(walker.snapshot(before)) == expected
        assert broken.failures == 3
        assert broken.requests == 0


def test_the_helper_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITMUS_SANDBOX_FS_HELPER", "0")
    assert shared_helper() is None


def test_a_forked_child_gets_its_own_helper(
    monkeypatch: pytest.MonkeyPatch, helper: StatHelper
) -> None:
    monkeypatch.setattr(helper, "owner", -1)  # as if created before a fork
    other = shared_helper()
    assert other is not None
    assert other is not helper
    other.stop()
    _fs_stat_helper._shared = helper  # the one the other tests use


def test_worker_lists_and_reports_paths_that_no_longer_lead_to_a_directory() -> None:
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as outside:
        top = Path(d)
        (top / "dir").mkdir()
        (top / "dir" / "f").write_bytes(b"12345")
        (top / "file").write_bytes(b"")
        (Path(outside) / "sub").mkdir()
        os.symlink(outside, top / "link")  # "link/sub" exists only through the link
        listings = dict(list_dirs(str(top), ["dir", "missing", "file", "link/sub", "link"]))
        rows = listings["dir"]
        assert isinstance(rows, list)
        assert len(rows) == 1
        name, st_tuple, mtime_ns, _ = rows[0]
        real = os.lstat(top / "dir" / "f")
        assert (name, st_tuple, mtime_ns) == ("f", tuple(real), real.st_mtime_ns)
        # Gone, a file, or reached only through a symlink: no directory at that path.
        assert [listings[k] for k in ("missing", "file", "link/sub", "link")] == [None] * 4


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_probe_on_a_large_tree_uses_the_helper_and_misses_nothing(
    tmp_path: Path, helper: StatHelper
) -> None:
    """A probe without watchdog walks the whole root after each call: on a tree past the
    threshold those walks are shared with the helper, and the call's effects are exact."""
    from litmus_sandbox.oracles.fs._probe import FsProbe

    for d in range(42):
        sub = tmp_path / f"d{d:02}"
        sub.mkdir()
        for f in range(100):
            (sub / f"f{f:02}").write_bytes(b"x")
    settle()
    probe = FsProbe(tmp_path, tripwires=(), use_watchdog=False)
    await probe.start()
    try:
        asked = helper.requests
        await probe.before_call("c1")
        (tmp_path / "d03" / "f07").write_bytes(b"changed")
        (tmp_path / "d40" / "new").write_bytes(b"new")
        (tmp_path / "d41" / "f99").unlink()
        (tmp_path / "d20" / "f20").chmod(0o600)
        effects = await probe.after_call("c1")
        assert helper.requests > asked
        assert {(e.path, e.op) for e in effects.fs} == {
            ("d03/f07", "modified"),
            ("d40/new", "created"),
            ("d41/f99", "deleted"),
            ("d20/f20", "metadata"),
        }
        assert (await probe.finish()).fs == ()
    finally:
        await probe.close()


def test_a_directory_turned_symlink_is_never_walked_through(helper: StatHelper) -> None:
    """Known subdirectories are opened one component at a time: after ``a`` becomes a link
    to an outside tree, nothing out there is listed or hashed (by either process)."""
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as outside:
        top = Path(d)
        build(top)
        far = Path(outside) / "x" / "deep"
        far.mkdir(parents=True)
        for i in range(30):
            (far / f"secret{i}").write_bytes(b"s" * 1000)
            (Path(outside) / "x" / f"top{i}").write_bytes(b"t")
        settle()
        before = Walker(top, use_helper=False).snapshot()
        shutil.rmtree(top / "a")
        os.symlink(outside, top / "a")  # a/x and a/x/deep now lead outside
        shared_walker = Walker(top, helper_min_entries=0)
        alone_walker = Walker(top, use_helper=False)
        asked = helper.requests
        shared, alone = shared_walker.snapshot(before), alone_walker.snapshot(before)
        assert helper.requests == asked + 1
        assert view(shared) == view(alone)
        # Only c/hard is hashed again (its link count fell with a/f1.txt); nothing outside.
        assert shared_walker.hashed == alone_walker.hashed == 1
        assert not any(p.startswith("a/") for p in shared)


def test_a_walk_interrupted_between_asking_and_hearing_leaves_no_stale_answer(
    helper: StatHelper, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        one, two = Path(d1), Path(d2)
        build(one)
        build(two)
        settle()
        before_one = Walker(one, use_helper=False).snapshot()
        before_two = Walker(two, use_helper=False).snapshot()
        real = Walker._list_dir

        def boom(self: Walker, *args: object, **kw: object) -> bool:
            raise KeyboardInterrupt

        monkeypatch.setattr(Walker, "_list_dir", boom)
        with pytest.raises(KeyboardInterrupt):
            Walker(one, helper_min_entries=0).snapshot(before_one)
        monkeypatch.setattr(Walker, "_list_dir", real)
        assert helper.try_acquire()  # released, and usable again
        helper.release()
        for _ in range(3):  # every later walk of another tree hears its own answer
            again = Walker(two, helper_min_entries=0).snapshot(before_two)
            assert view(again) == view(before_two)


def test_a_helper_that_hangs_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    hung = StatHelper(
        [sys.executable, "-c", "import sys, time; sys.stdin.buffer.read(4); time.sleep(60)"],
        timeout=0.5,
    )
    monkeypatch.setattr(_fs_stat_helper, "_shared", hung)
    with tempfile.TemporaryDirectory() as d:
        top = Path(d)
        before = built(top)
        (top / "b" / "new").write_bytes(b"n")
        t0 = time.monotonic()
        after = Walker(top, helper_min_entries=0).snapshot(before)
        assert time.monotonic() - t0 < 5
        assert view(after) == view(Walker(top, use_helper=False).snapshot(before))
        assert hung.failures == 1
        assert hung.pid is None  # stopped (killed after its grace)
