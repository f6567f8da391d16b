"""Crash-safety stress: SIGKILL a recording process many times at random points.

    python bench/crash_stress.py --kills 500

Reports how many kills landed mid-line (a torn last line), and fails if any step the agent
had already got back is missing from the episode file.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from litmus_sandbox import ToolCallStep, read_episodes

CHILD = Path(__file__).resolve().parent.parent / "tests" / "programs" / "crash_child.py"


def one(tmp: Path, wanted: int) -> tuple[int, int, bool]:
    episodes = tmp / "eps.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(episodes), str(tmp / "root"), "1000000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked = -1
    for line in proc.stdout:
        acked = int(line.split()[1]) if line.startswith("ack ") else acked
        if acked >= wanted:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    warnings: list[object] = []
    (ep,) = read_episodes([episodes], warnings)  # type: ignore[arg-type]
    calls = sum(1 for s in ep.steps if isinstance(s, ToolCallStep))
    return acked, calls, bool(warnings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    torn = lost = 0
    for _ in range(args.kills):
        with tempfile.TemporaryDirectory() as d:
            acked, calls, was_torn = one(Path(d), rng.randrange(0, 200))
            torn += was_torn
            lost += calls < acked
    print(f"kills {args.kills}: torn last line {torn}, runs that lost an acknowledged step {lost}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
