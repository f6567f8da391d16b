"""Cost of the filesystem oracle on a 10,000-file sandbox, and a full walk against git.

    python bench/fs_snapshot_bench.py [--calls 200] [--rounds 30] [--backend asyncio|trio]
                                      [--per-call-rounds 3] [--baseline [NAME=]TREE ...]

1. **Per call.** A tree of 100 directories x 100 small files is the sandbox root of an
   :class:`FsProbe` (watchdog narrowing on, the audit hook installed and collecting each
   call's evidence). Each "call" is ``before_call`` + a tool that changes 10 files (one
   created, one deleted, eight rewritten; timed apart, as ``tool``: the audit hook runs
   in it) + ``after_call``; the figure is the median (and p90) of before_call +
   after_call over ``--calls`` calls, with no tripwires and with the default ones.
   Goal: 2 ms median or better. Every change must be reported (checked). Each
   measurement runs in a child process of its own; with ``--baseline [NAME=]TREE`` the
   probe of another source tree (a checkout of an earlier commit, imported through
   ``PYTHONPATH``) is measured on the same tree in the same rounds, in alternating
   order, ``--per-call-rounds`` times, and the ratio of the medians is reported. Each
   figure also has its CPU time (the process's, every thread: worker, watchdog), which
   load on a shared machine disturbs less than wall-clock time.
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
import sys
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
    tool_times: list[float] = []
    cpu_times: list[float] = []  # the process's, all threads (worker, watchdog, ...)
    # What this run writes is new to the tree whatever ran on it before (a real change).
    token = f"{os.getpid()} {time.time_ns()} {tripwires!r}"
    t0 = time.perf_counter()
    await probe.start()
    start_ms = (time.perf_counter() - t0) * 1e3
    try:
        for k in range(calls + 10):
            c1, t1 = time.process_time(), time.perf_counter()
            await probe.before_call(str(k))
            c2, t2 = time.process_time(), time.perf_counter()
            changed = _tool(root, rng, k, created, run=token)
            c3, t3 = time.process_time(), time.perf_counter()
            effects = await probe.after_call(str(k))
            c4, t4 = time.process_time(), time.perf_counter()
            seen = {e.path for e in effects.fs if not e.path.startswith("/")}
            if not changed <= seen:
                raise SystemExit(f"call {k}: missed {sorted(changed - seen)}")
            if k >= 10:  # the first calls warm caches and threads
                times.append((t2 - t1) + (t4 - t3))
                tool_times.append(t3 - t2)
                cpu_times.append((c2 - c1) + (c4 - c3))
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
        "tool_median_ms": statistics.median(tool_times) * 1e3,
        "cpu_median_ms": statistics.median(cpu_times) * 1e3,
        "start_ms": start_ms,
        "finish_ms": finish_ms,
        "finish_unattributed": float(len(leftover.fs)),
        "full_scans": float(probe.stats["full_scans"]),
    }


def _child_per_call(root: str, calls: int, tripwires: str, backend: str) -> None:
    """The child role: one :func:`per_call` run of the probe ``PYTHONPATH`` imports."""
    import litmus_sandbox

    wires: list[str] | None = [] if tripwires == "none" else None
    got: dict[str, Any] = anyio.run(per_call, Path(root), calls, wires, backend=backend)
    got["package"] = os.path.dirname(litmus_sandbox.__file__)
    print(json.dumps(got))


def per_call_child(
    tree: str, root: Path, calls: int, tripwires: str, backend: str
) -> dict[str, Any]:
    """:func:`per_call` in a child process importing ``litmus_sandbox`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    cmd = [sys.executable, os.path.abspath(__file__), "--role", "per-call"]
    cmd += [str(root), str(calls), tripwires, "--backend", backend]
    done = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True)
    got: dict[str, Any] = json.loads(done.stdout)
    want = os.path.join(os.path.abspath(tree), "litmus_sandbox")
    if os.path.realpath(got["package"]) != os.path.realpath(want):
        raise SystemExit(f"{tree}: the child imported {got['package']}, not {want}")
    return got


def per_call_rounds(
    root: Path, trees: dict[str, str], calls: int, rounds: int, backend: str
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every tree's :func:`per_call`, with no tripwires and the default ones, ``rounds``
    times, in alternating order (so that neither side always runs first)."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {"none": [], "default": []} for name in trees
    }
    order = list(trees)
    for r in range(rounds):
        for tripwires in ("none", "default"):
            for name in order if r % 2 == 0 else order[::-1]:
                got = per_call_child(trees[name], root, calls, tripwires, backend)
                runs[name][tripwires].append(got)
    return runs


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def med(tripwires: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs[tripwires]))

    return {
        "median_ms": med("none", "median_ms"),
        "p90_ms": med("none", "p90_ms"),
        "tool_median_ms": med("none", "tool_median_ms"),
        "cpu_median_ms": med("none", "cpu_median_ms"),
        "rounds_median_ms": [r["median_ms"] for r in runs["none"]],
        "with_default_tripwires_median_ms": med("default", "median_ms"),
        "with_default_tripwires_p90_ms": med("default", "p90_ms"),
        "with_default_tripwires_tool_median_ms": med("default", "tool_median_ms"),
        "with_default_tripwires_cpu_median_ms": med("default", "cpu_median_ms"),
        "with_default_tripwires_rounds_median_ms": [r["median_ms"] for r in runs["default"]],
        "start_ms": med("none", "start_ms"),
        "finish_ms": med("none", "finish_ms"),
        "full_scans": med("none", "full_scans"),
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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--per-call-rounds", type=int, default=3)
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="[NAME=]TREE",
        help="also measure the probe of this source tree, in the same rounds (repeatable)",
    )
    parser.add_argument("--role", choices=["per-call"], help=argparse.SUPPRESS)
    parser.add_argument("role_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "per-call":
        root_arg, calls_arg, tripwires_arg = args.role_args
        _child_per_call(root_arg, int(calls_arg), tripwires_arg, args.backend)
        return
    if shutil.which("git") is None:
        raise SystemExit("git is needed for the comparison")
    trees: dict[str, str] = {}
    for i, given in enumerate(args.baseline):
        name, _, tree = given.rpartition("=")
        trees[name or f"baseline{i or ''}"] = tree
    trees["litmus"] = str(Path(__file__).resolve().parent.parent)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="litmus-fs-bench-") as d:
        root = Path(d) / "root"
        root.mkdir()
        build_tree(root)
        time.sleep(0.05)  # past the racy window: the baseline is what a settled tree costs
        t0 = time.perf_counter()
        snapshot(root)
        baseline_ms = (time.perf_counter() - t0) * 1e3
        runs = per_call_rounds(root, trees, args.calls, args.per_call_rounds, args.backend)
        versus = full_vs_git(root, Path(d) / "git", args.rounds)
    load_after = os.getloadavg()
    per = {name: _summary(got) for name, got in runs.items()}
    alone = per["litmus"]
    ratios = {
        name: {
            "no_tripwires": alone["median_ms"] / got["median_ms"],
            "default_tripwires": (
                alone["with_default_tripwires_median_ms"] / got["with_default_tripwires_median_ms"]
            ),
            "tool": alone["tool_median_ms"] / got["tool_median_ms"],
            "cpu": alone["cpu_median_ms"] / got["cpu_median_ms"],
            "cpu_default_tripwires": (
                alone["with_default_tripwires_cpu_median_ms"]
                / got["with_default_tripwires_cpu_median_ms"]
            ),
        }
        for name, got in per.items()
        if name != "litmus"
    }
    result: dict[str, Any] = {
        "files": DIRS * FILES,
        "calls": args.calls,
        "changes_per_call": 10,
        "backend": args.backend,
        "per_call_median_ms": alone["median_ms"],
        "per_call_p90_ms": alone["p90_ms"],
        "per_call_goal_ms": 2.0,
        "per_call_with_default_tripwires_median_ms": alone["with_default_tripwires_median_ms"],
        "per_call_with_default_tripwires_p90_ms": alone["with_default_tripwires_p90_ms"],
        "per_call_rounds": args.per_call_rounds,
        "per_call": per,
        "baseline": args.baseline,
        "per_call_ratio_vs_baseline": ratios,
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
            "load_average_at_start": load_before[0],
            "load_averages_at_start": list(load_before),
            "load_averages_at_end": list(load_after),
            "system": platform.platform(),
        },
    }
    out = Path(__file__).parent / "results" / "fs_snapshot.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"[{args.backend}] {DIRS * FILES:,} files, 10 changes per call, {args.calls} calls, "
        f"medians of {args.per_call_rounds} interleaved rounds (goal 2 ms); load average "
        f"{load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end"
    )
    for name, got in per.items():
        each = ", ".join(f"{m:.2f}" for m in got["rounds_median_ms"])
        each_tw = ", ".join(f"{m:.2f}" for m in got["with_default_tripwires_rounds_median_ms"])
        print(
            f"  {name:10s} {got['median_ms']:.2f} ms per call (p90 {got['p90_ms']:.2f}; "
            f"{each}), CPU {got['cpu_median_ms']:.2f} ms; tool {got['tool_median_ms']:.2f} ms; "
            f"with the default tripwires {got['with_default_tripwires_median_ms']:.2f} ms "
            f"({each_tw}), CPU {got['with_default_tripwires_cpu_median_ms']:.2f} ms, tool "
            f"{got['with_default_tripwires_tool_median_ms']:.2f} ms"
        )
    for name, ratio in ratios.items():
        print(
            f"  litmus / {name}: {ratio['no_tripwires']:.2f}x per call, "
            f"{ratio['default_tripwires']:.2f}x with the default tripwires; CPU "
            f"{ratio['cpu']:.2f}x, {ratio['cpu_default_tripwires']:.2f}x; "
            f"{ratio['tool']:.2f}x the tool's own time"
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
        f"{versus['ratio_one_thread']:.2f}"
    )
    print(
        f"the full walk {'shared' if versus['full_walk_used_helper'] else 'did NOT share'} "
        f"its lstat work with the stat helper process; walking alone (use_helper=False) "
        f"{versus['full_walk_alone_ms']:.1f} ms: ratio {versus['ratio_alone']:.2f}"
    )


if __name__ == "__main__":
    main()
