"""What the audit hook of the filesystem oracle adds to an in-process tool call.

    python bench/audit_hook_bench.py [--calls 20000] [--rounds 6]

Each "call" is what the probe adds around a tool (a fresh :class:`Evidence`, collected in
the call's context and released after) plus the tool itself, for three tools: one that
does nothing, one that reads a file, one that writes a file in the sandbox root (a path
a snapshot covers, in a folder it lists: no system call in the hook) and one that writes
outside it (its folder resolved, and the state before kept: an ``lstat`` and a small
hash, the first time the call touches it). A hook
cannot be removed, so the same loop runs in a process without it and in one with it, in
alternating rounds; the figure is the median of the rounds' per-call times, and the
difference is what the hook costs. Goal: 10 microseconds or less per in-process call.
Both wall-clock time and the child's CPU time are kept: on a shared machine, CPU time is
what other processes disturb least (a child preempted still counts wall time).

Figures are printed and written to ``bench/results/audit_hook.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_CHILD = r"""
import json, os, sys, time
hooked, calls, folder = sys.argv[1] == "1", int(sys.argv[2]), sys.argv[3]
root, outside = os.path.join(folder, "root"), os.path.join(folder, "outside")
from litmus_sandbox.oracles import _audit as audit
from litmus_sandbox.oracles.fs._attribution import Reach
reach = Reach([(root, "", frozenset(), None)], ())
if hooked:
    audit.install()

def nothing(i):
    return None

def read(i):
    with open(os.path.join(root, "r.txt"), "rb") as f:
        return f.read()

# Written in place (no O_TRUNC: ext4 flushes a file truncated and rewritten on close,
# which would time the disk rather than the hook).
def write_in_root(i):
    fd = os.open(os.path.join(root, f"w{i % 100}.txt"), os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"x" * 100)
    os.close(fd)

def write_outside(i):
    fd = os.open(os.path.join(outside, f"w{i % 100}.txt"), os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"x" * 100)
    os.close(fd)

out = {}
for tool in (nothing, read, write_in_root, write_outside):
    c0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(calls):
        if hooked:
            # As the probe makes it: the root's snapshot lists the root (a real folder).
            ev = audit.Evidence(str(i), covered=reach.covered, known_dir=root.__eq__)
            token = audit.collect(ev)
            tool(i)
            audit.release(ev, token)
        else:
            tool(i)
    wall = (time.perf_counter() - t0) / calls * 1e6
    out[tool.__name__] = (wall, (time.process_time() - c0) / calls * 1e6)
print(json.dumps(out))
"""


def run(hooked: bool, calls: int, folder: str) -> dict[str, tuple[float, float]]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, "1" if hooked else "0", str(calls), folder],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, tuple[float, float]] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="litmus-audit-bench-") as d:
        for sub in ("root", "outside"):
            (Path(d) / sub).mkdir()
        (Path(d) / "root" / "r.txt").write_bytes(b"r" * 1000)
        plain: list[dict[str, tuple[float, float]]] = []
        hooked: list[dict[str, tuple[float, float]]] = []
        for _ in range(args.rounds):
            plain.append(run(False, args.calls, d))
            hooked.append(run(True, args.calls, d))
    load_after = os.getloadavg()
    result: dict[str, Any] = {
        "calls": args.calls,
        "rounds": args.rounds,
        "goal_us": 10.0,
        "load_averages_at_start": list(load_before),
        "load_averages_at_end": list(load_after),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    print(f"load average {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end")
    for tool in plain[0]:
        p, h = (statistics.median(r[tool][0] for r in runs) for runs in (plain, hooked))
        pc, hc = (statistics.median(r[tool][1] for r in runs) for runs in (plain, hooked))
        result[tool] = {
            "without_us": p,
            "with_us": h,
            "added_us": h - p,
            "cpu_without_us": pc,
            "cpu_with_us": hc,
            "cpu_added_us": hc - pc,
        }
        print(
            f"{tool:>14}: {p:8.2f} us without the hook, {h:8.2f} us with: +{h - p:.2f} us "
            f"(CPU time: {pc:.2f} -> {hc:.2f}, +{hc - pc:.2f} us)"
        )
    out = Path(__file__).parent / "results" / "audit_hook.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
