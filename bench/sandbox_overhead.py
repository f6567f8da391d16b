"""Per-call overhead of a recorded ``real`` call versus calling the tool directly.

    python bench/sandbox_overhead.py [--batches 200] [--batch 100] [--backend asyncio|trio]

A trivial async tool is called directly and through ``ep.call`` (recording to a file, no
oracles), in interleaved batches so that machine noise hits both alike. Reports the median
per-call time of each, the median microseconds added, calls per second, and the ratio.
Goal: under 25 microseconds added per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from litmus_sandbox import Sandbox


async def add(a: int, b: int) -> int:
    return a + b


async def measure(batches: int, batch: int, out: Path) -> dict[str, float]:
    direct: list[float] = []
    recorded: list[float] = []
    # No oracles (the issue measures the recorder alone): no probes, egress unwatched.
    sandbox = Sandbox(
        root=out / "root", episodes=out / "eps.jsonl", tools={"add": add}, probes=(), egress=False
    )
    async with sandbox, sandbox.episode("bench") as ep:
        for _ in range(batch * 5):  # warm up
            await ep.call("add", a=1, b=2)
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(batch):
                await add(a=1, b=2)
            t1 = time.perf_counter()
            for _ in range(batch):
                await ep.call("add", a=1, b=2)
            t2 = time.perf_counter()
            direct.append((t1 - t0) / batch)
            recorded.append((t2 - t1) / batch)
    d, r = statistics.median(direct), statistics.median(recorded)
    return {
        "direct_us": d * 1e6,
        "recorded_us": r * 1e6,
        "added_us": (r - d) * 1e6,
        "recorded_calls_per_s": 1 / r,
        "ratio": r / d,
        "bytes_per_call": (out / "eps.jsonl").stat().st_size / (batches * batch + batch * 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        result = anyio.run(measure, args.batches, args.batch, Path(d), backend=args.backend)
    result_file = Path(__file__).parent / "results" / f"sandbox_overhead_{args.backend}.json"
    result_file.parent.mkdir(exist_ok=True)
    result_file.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"[{args.backend}] direct {result['direct_us']:.2f} us/call, recorded "
        f"{result['recorded_us']:.1f} us/call: {result['added_us']:.1f} us added per call "
        f"(median of {args.batches} batches of {args.batch}), "
        f"{result['recorded_calls_per_s']:,.0f} recorded calls/s, "
        f"{result['bytes_per_call']:.0f} bytes recorded per call"
    )


if __name__ == "__main__":
    main()
