"""Cost of the filesystem oracle on a 10,000-file sandbox, and a full walk against git.

    python bench/fs_snapshot_bench.py [--calls 200] [--rounds 30] [--backend asyncio|trio]

1. **Per call.** A tree of 100 directories x 100 small files is the sandbox root of an
   :class:`FsProbe` (watchdog narrowing on). Each "call" is ``before_call`` + a tool that
   changes 10 files (one created, one deleted, eight rewritten; not timed) +
   ``after_call``; the figure is the median (and p90) of before_call + after_call over
   ``--calls`` calls, with no tripwires and with the default ones (home, temp dir).
   Goal: 2 ms median or better. Every change must be reported (checked).
2. **Full walk vs git.** The same tree is committed to git (the git directory kept
   outside the tree, so that neither side walks the other's data). Then, warm and
   interleaved, ``git status --porcelain`` as a subprocess against our full verification
   walk in-process (``snapshot(root, previous=...)``: lstat everything, hash only changed
   or racy entries). Goal: within 1.5x of git; the ratio is reported, and also against
   ``git -c core.preloadIndex=false status`` (git lstat-s with several threads by
   default). A walk of a tree this large shares its ``lstat`` work with the stat helper
   process when there are two CPUs or more; the same walk done alone
   (``use_helper=False``) is timed in the same rounds and reported beside it.

Figures are printed and written to ``bench/results/fs_snapshot.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import watchdog.version

from litmus_sandbox.oracles.fs._probe import FsProbe, snapshot
from litmus_sandbox.oracles.fs._snapshot import Walker
from litmus_sandbox.oracles.fs._stat_helper import shared_helper

DIRS, FILES = 100, 100


def build_tree(root: Path) -> None:
    for d in range(DIRS):
        sub = root / f"d{d:03}"
        sub.mkdir()
        for f in range(FILES):
            (sub / f"f{f:03}.txt").write_bytes(f"file {d} {f}\n".encode())


def _tool(root: Path, rng: random.Random, k: int, created: list[Path], run: str) -> set[str]:
    """What a tool call does: 10 changes spread over the tree. Returns the paths changed."""
    changed: set[str] = set()
    new = root / f"d{rng.randrange(DIRS):03}" / f"new{k}.txt"
    new.write_bytes(b"new\n")
    created.append(new)
    changed.add(new.relative_to(root).as_posix())
    if len(created) > 1:
        gone = created.pop(0)
        gone.unlink()
        changed.add(gone.relative_to(root).as_posix())
    while len(changed) < 10:
        p = root / f"d{rng.randrange(DIRS):03}" / f"f{rng.randrange(FILES):03}.txt"
        p.write_bytes(f"{run} call {k}\n".encode())  # new content: a real modification
        changed.add(p.relative_to(root).as_posix())
    return changed


async def per_call(root: Path, calls: int, tripwires: list[str] | None) -> dict[str, float]:
    probe = FsProbe(root, tripwires=tripwires)
    rng = random.Random(7)
    created: list[Path] = []
    times: list[float] = []
    t0 = time.perf_counter()
    await probe.start()
    start_ms = (time.perf_counter() - t0) * 1e3
    try:
        for k in range(calls + 10):
            t1 = time.perf_counter()
            await probe.before_call(str(k))
            t2 = time.perf_counter()
            changed = _tool(root, rng, k, created, run=repr(tripwires))
            t3 = time.perf_counter()
            effects = await probe.after_call(str(k))
            t4 = time.perf_counter()
            seen = {e.path for e in effects.fs if not e.path.startswith("/")}
            if not changed <= seen:
                raise SystemExit(f"call {k}: missed {sorted(changed - seen)}")
            if k >= 10:  # the first calls warm caches and threads
                times.append((t2 - t1) + (t4 - t3))
        t5 = time.perf_counter()
        leftover = await probe.finish()
        finish_ms = (time.perf_counter() - t5) * 1e3
    finally:
        await probe.close()
    for path in created:
        path.unlink()
    times.sort()
    return {
        "median_ms": statistics.median(times) * 1e3,
        "p90_ms": times[int(len(times) * 0.9)] * 1e3,
        "start_ms": start_ms,
        "finish_ms": finish_ms,
        "finish_unattributed": float(len(leftover.fs)),
        "full_scans": float(probe.stats["full_scans"]),
    }


def full_vs_git(root: Path, git_dir: Path, rounds: int) -> dict[str, float]:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)

    git("init", "-q", f"--separate-git-dir={git_dir}")
    git("add", "-A")
    git("-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-qm", "t")
    time.sleep(1.1)  # let both sides' racy windows pass (git's is one second)
    status = ["git", "status", "--porcelain"]
    # git lstat-s the index with several threads (core.preloadIndex); this walk uses one.
    single = ["git", "-c", "core.preloadIndex=false", "status", "--porcelain"]
    prev = snapshot(root)
    for _ in range(3):  # warm: page cache, git index refresh
        subprocess.run(status, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
        prev = snapshot(root, previous=prev)
    ours: list[float] = []
    alone: list[float] = []
    theirs: list[float] = []
    theirs_single: list[float] = []
    walk_alone = Walker(root, use_helper=False)
    helper = shared_helper()
    asked = helper.requests if helper is not None else 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = subprocess.run(status, cwd=root, env=env, check=True, capture_output=True)
        t1 = time.perf_counter()
        prev = snapshot(root, previous=prev)
        t2 = time.perf_counter()
        subprocess.run(single, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
        t3 = time.perf_counter()
        prev = walk_alone.snapshot(prev)
        alone.append(time.perf_counter() - t3)
        if out.stdout.strip():
            raise SystemExit(f"the tree is not clean for git: {out.stdout[:200]!r}")
        theirs.append(t1 - t0)
        ours.append(t2 - t1)
        theirs_single.append(t3 - t2)
    o, g = statistics.median(ours), statistics.median(theirs)
    g1, a = statistics.median(theirs_single), statistics.median(alone)
    shared = helper is not None and helper.requests >= asked + rounds
    return {
        "full_walk_ms": o * 1e3,
        "full_walk_used_helper": float(shared),
        "full_walk_alone_ms": a * 1e3,
        "ratio_alone": a / g,
        "git_status_ms": g * 1e3,
        "ratio": o / g,
        "git_status_one_thread_ms": g1 * 1e3,
        "ratio_one_thread": o / g1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    if shutil.which("git") is None:
        raise SystemExit("git is needed for the comparison")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="litmus-fs-bench-") as d:
        root = Path(d) / "root"
        root.mkdir()
        build_tree(root)
        time.sleep(0.05)  # past the racy window: the baseline is what a settled tree costs
        t0 = time.perf_counter()
        snapshot(root)
        baseline_ms = (time.perf_counter() - t0) * 1e3
        alone = anyio.run(per_call, root, args.calls, [], backend=args.backend)
        with_tw = anyio.run(per_call, root, args.calls, None, backend=args.backend)
        versus = full_vs_git(root, Path(d) / "git", args.rounds)
    result: dict[str, Any] = {
        "files": DIRS * FILES,
        "calls": args.calls,
        "changes_per_call": 10,
        "backend": args.backend,
        "per_call_median_ms": alone["median_ms"],
        "per_call_p90_ms": alone["p90_ms"],
        "per_call_goal_ms": 2.0,
        "per_call_with_default_tripwires_median_ms": with_tw["median_ms"],
        "per_call_with_default_tripwires_p90_ms": with_tw["p90_ms"],
        "probe_start_ms": alone["start_ms"],
        "probe_finish_ms": alone["finish_ms"],
        "full_walks_incl_finish": alone["full_scans"],
        "baseline_snapshot_ms": baseline_ms,
        "full_walk_ms": versus["full_walk_ms"],
        "git_status_ms": versus["git_status_ms"],
        "full_walk_vs_git_ratio": versus["ratio"],
        "full_walk_used_stat_helper": bool(versus["full_walk_used_helper"]),
        "full_walk_alone_ms": versus["full_walk_alone_ms"],
        "full_walk_alone_vs_git_ratio": versus["ratio_alone"],
        "git_status_one_thread_ms": versus["git_status_one_thread_ms"],
        "full_walk_vs_git_one_thread_ratio": versus["ratio_one_thread"],
        "ratio_goal": 1.5,
        "rounds": args.rounds,
        "machine": {
            "python": platform.python_version(),
            "watchdog": watchdog.version.VERSION_STRING,
            "cpus": os.cpu_count(),
            "load_average_at_start": load_before,
            "system": platform.platform(),
        },
    }
    out = Path(__file__).parent / "results" / "fs_snapshot.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"[{args.backend}] {DIRS * FILES:,} files, 10 changes per call: "
        f"{alone['median_ms']:.2f} ms median per call (p90 {alone['p90_ms']:.2f} ms; goal 2 ms) "
        f"over {args.calls} calls; {with_tw['median_ms']:.2f} ms with the default tripwires"
    )
    print(
        f"baseline snapshot (hash everything) {baseline_ms:.0f} ms; probe start "
        f"{alone['start_ms']:.0f} ms, finish (full verification) {alone['finish_ms']:.0f} ms"
    )
    print(
        f"full walk {versus['full_walk_ms']:.1f} ms vs git status --porcelain "
        f"{versus['git_status_ms']:.1f} ms (medians of {args.rounds}, warm, interleaved): "
        f"ratio {versus['ratio']:.2f} (goal <= 1.5); against git with one lstat thread "
        f"(core.preloadIndex=false) {versus['git_status_one_thread_ms']:.1f} ms: ratio "
        f"{versus['ratio_one_thread']:.2f}; load average {load_before:.2f}"
    )
    print(
        f"the full walk {'shared' if versus['full_walk_used_helper'] else 'did NOT share'} "
        f"its lstat work with the stat helper process; walking alone (use_helper=False) "
        f"{versus['full_walk_alone_ms']:.1f} ms: ratio {versus['ratio_alone']:.2f}"
    )


if __name__ == "__main__":
    main()
