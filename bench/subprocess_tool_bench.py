"""What a subprocess tool (``ep.run``) costs: its latency, and the memory a loud one takes.

    python bench/subprocess_tool_bench.py [--calls 60] [--loud-mib 300]

1. **Latency.** ``ep.run(["true"])`` in a sandbox with no oracles (the supervisor alone:
   its own PID namespace where it can have one, its process tree, its reports) and with
   the filesystem oracle (the supervisor then also watches with fanotify); the median and
   p90 milliseconds per call, beside starting ``true`` directly (``anyio.run_process``).
2. **Memory.** A tool printing ``--loud-mib`` MiB to stdout, in a fresh process that
   records it: that process's peak resident memory (VmHWM) and the output's size and
   hash as the step records them.

Figures are printed and written to ``bench/results/subprocess_tool.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from litmus_sandbox import Sandbox
from litmus_sandbox.oracles.fs import FsProbe

_LOUD = """
import anyio, json, sys
from litmus_sandbox import Sandbox
async def main():
    sb = Sandbox(root=sys.argv[1] + "/root", episodes=sys.argv[1] + "/eps.jsonl",
                 probes=(), egress=False, max_result_bytes=1000)
    async with sb, sb.episode("loud") as ep:
        r = await ep.run([sys.executable, "-c", sys.argv[2]])
    with open("/proc/self/status") as f:
        peak = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    print(json.dumps({"peak_bytes": peak, "structured": r.value}))
anyio.run(main)
"""


async def latency(folder: Path, calls: int) -> dict[str, float]:
    out: dict[str, float] = {}
    direct: list[float] = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await anyio.run_process(["true"], check=False)
        direct.append(time.perf_counter() - t0)
    out["direct_median_ms"] = statistics.median(direct) * 1e3
    for name, probes in (("no_oracles", ()), ("fs_oracle", None)):
        root = folder / name
        sb = Sandbox(
            root=root,
            episodes=folder / f"{name}.jsonl",
            probes=probes if probes is not None else [FsProbe(root)],
            egress=False,
        )
        times: list[float] = []
        async with sb, sb.episode("bench") as ep:
            for _ in range(calls + 5):
                t0 = time.perf_counter()
                await ep.run(["true"])
                times.append(time.perf_counter() - t0)
        times = sorted(times[5:])
        out[f"{name}_median_ms"] = statistics.median(times) * 1e3
        out[f"{name}_p90_ms"] = times[int(len(times) * 0.9)] * 1e3
    return out


def loud(folder: Path, mib: int) -> dict[str, Any]:
    script = f"import sys\nb = b'x' * (1 << 20)\nfor _ in range({mib}): sys.stdout.buffer.write(b)"
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _LOUD, str(folder), script],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    result["seconds"] = time.perf_counter() - t0
    result["output_mib"] = mib
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--loud-mib", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="litmus-run-bench-") as d:
        figures = anyio.run(latency, Path(d), args.calls)
        memory = loud(Path(d), args.loud_mib)
    result = {"calls": args.calls, **figures, "loud": memory}
    print(
        f"true directly {figures['direct_median_ms']:.1f} ms; through ep.run "
        f"{figures['no_oracles_median_ms']:.1f} ms (p90 {figures['no_oracles_p90_ms']:.1f}), "
        f"with the fs oracle {figures['fs_oracle_median_ms']:.1f} ms "
        f"(p90 {figures['fs_oracle_p90_ms']:.1f})"
    )
    print(
        f"{args.loud_mib} MiB printed: peak {memory['peak_bytes'] / 2**20:.0f} MiB resident, "
        f"stdout_bytes {memory['structured']['stdout_bytes']:,}, {memory['seconds']:.1f} s"
    )
    out = Path(__file__).parent / "results" / "subprocess_tool.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
