"""Sync tools run on daemon threads: one that never returns does not hold the process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from litmus_sandbox import ToolCallStep, read_episodes

_STUCK = """
import anyio, sys, time
from litmus_sandbox import Sandbox
def stuck():
    time.sleep(3600)
async def main():
    sb = Sandbox(root=sys.argv[1] + "/root", episodes=sys.argv[1] + "/eps.jsonl",
                 tools={"stuck": stuck}, timeout=0.5, probes=(), egress=False)
    async with sb, sb.episode("stuck") as ep:
        await ep.call("stuck")
anyio.run(main, backend=sys.argv[2])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_sync_tool_that_never_returns_does_not_hold_the_process(
    tmp_path: Path, backend: str
) -> None:
    """It runs on a daemon thread: once the episode ends, the sandbox closes and the
    process exits, the tool still sleeping (on asyncio, anyio's worker threads would
    have held it until the tool returned: an hour)."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", _STUCK, str(tmp_path), backend], check=True, timeout=60)
    assert time.monotonic() - t0 < 15
    (episode,) = read_episodes(tmp_path / "eps.jsonl")
    (step,) = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    assert step.actual is not None
    assert step.actual.outcome == "timeout"
