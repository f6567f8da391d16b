"""Kill a recording process with SIGKILL at random points: nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from factories import PROGRAMS

from litmus_sandbox import ToolCallStep, config_from_mapping, gate, read_episodes, score_episodes

CHILD = PROGRAMS / "crash_child.py"
KILLS = int(os.environ.get("LITMUS_CRASH_KILLS", "50"))


def kill_after(tmp: Path, acks_wanted: int, calls: int) -> tuple[int, Path]:
    """Run the child until it acknowledged ``acks_wanted`` steps, SIGKILL it, return acks."""
    episodes = tmp / "eps.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(episodes), str(tmp / "root"), str(calls)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked = -1
    for line in proc.stdout:
        if line.startswith("ack "):
            acked = int(line.split()[1])
            if acked >= acks_wanted:
                break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    return acked, episodes


@pytest.mark.parametrize("seed", range(KILLS))
def test_sigkill_loses_no_acknowledged_step(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    # The child has far more calls to make than we wait for, so it is still recording
    # (mid-call, mid-write, or between calls) when the signal lands.
    acked, episodes = kill_after(tmp_path, rng.randrange(0, 40), calls=100_000)
    assert acked >= 0
    warnings: list[object] = []
    (ep,) = read_episodes([episodes], warnings)  # type: ignore[arg-type]
    # Every step acknowledged to the agent is in the file (the message is step 0).
    assert len(ep.steps) >= acked + 1
    assert [s.index for s in ep.steps] == list(range(len(ep.steps)))
    results = [s.shown.structured for s in ep.steps if isinstance(s, ToolCallStep)]
    assert results[:acked] == [{"i": i, "square": i * i} for i in range(acked)]
    assert not ep.complete
    config = config_from_mapping({"judge": {"kind": "rules", "rules": [{"tool": "nope"}]}})
    (candidate,) = score_episodes([ep], config)
    (baseline,) = score_episodes([ep.__class__(header=ep.header, steps=ep.steps, end=None)], config)
    report = gate([baseline], [candidate])
    assert report.cases[0].outcome == "NEEDS_RERUN"
    assert "incomplete_episode" in {r.code for r in report.cases[0].reasons}
