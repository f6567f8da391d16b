"""A full disk while recording: the error reaches the caller, what was written stays
readable, and the episode ends aborted counting only the steps on disk.

The disk fills for real: the recording runs in a child process whose file-size limit
(``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored) makes the kernel refuse writes past a size, as a
full filesystem would (``EFBIG`` instead of ``ENOSPC``).
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

from litmus_sandbox import ReadWarning, ToolCallStep, read_episodes

CHILD = r"""
import json, os, resource, signal, sys
import anyio
from litmus_sandbox import Sandbox

episodes, root, refill = sys.argv[1], sys.argv[2], sys.argv[3] == "refill"
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)


async def main() -> None:
    failures = []
    sb = Sandbox(root=root, episodes=episodes, tools={"echo": lambda text: text}, probes=())
    async with sb:
        async with sb.episode("c1", episode_id="e1") as ep:
            ep.message("user", "go")
            # Room for a few more records, then the disk is full.
            resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(episodes) + 1500, hard))
            for i in range(30):
                try:
                    await ep.call("echo", text=f"{i:02d}" + "x" * 200)
                except OSError as exc:
                    failures.append(exc.errno)
            if refill:  # space comes back before the episode ends
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            else:  # not a byte more
                resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(episodes), hard))
    print(json.dumps(failures))


try:
    anyio.run(main)
except OSError as exc:  # the end record itself could not be written
    print(json.dumps({"end_failed": exc.errno}))
"""


def _record(tmp_path: Path, mode: str) -> str:
    episodes = tmp_path / "eps.jsonl"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(episodes), str(tmp_path / "root"), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_full_disk_aborts_the_episode_and_counts_only_steps_on_disk(tmp_path: Path) -> None:
    failures = json.loads(_record(tmp_path, "refill"))
    assert len(failures) >= 20  # most calls could not be recorded, and each caller was told
    warnings: list[ReadWarning] = []
    (episode,) = read_episodes([tmp_path / "eps.jsonl"], warnings)
    assert warnings == []  # no torn record: a failed write left nothing behind
    assert episode.end is not None
    assert episode.end.status == "aborted"
    assert episode.end.steps == len(episode.steps)
    assert f"{len(failures)} steps not recorded" in (episode.end.reason or "")
    assert "File too large (EFBIG)" in (episode.end.reason or "")
    calls = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    assert len(calls) == 30 - len(failures)
    assert not episode.complete


def test_a_disk_that_stays_full_leaves_a_readable_incomplete_episode(tmp_path: Path) -> None:
    report = json.loads(_record(tmp_path, "stay-full"))
    assert report == {"end_failed": errno.EFBIG}  # the end record was refused, and said so
    warnings: list[ReadWarning] = []
    (episode,) = read_episodes([tmp_path / "eps.jsonl"], warnings)
    assert warnings == []
    assert episode.end is None  # incomplete: the gate will ask for a re-run
    assert [s.index for s in episode.steps][:1] == [0]  # the message before the disk filled
    assert not episode.complete
