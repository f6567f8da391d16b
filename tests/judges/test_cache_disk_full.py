"""A full disk under the step-verdict cache: ``score`` stops with exit 2 and one line
naming the cache and what failed, no traceback, and writes no verdict stream. The disk is
real: the small tmpfs of ``tests/conftest.py`` (root only; elsewhere the test says why it
cannot run), filled."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest
from judge_endpoint import running
from score_procs import TimedJudge, env, score_cmd, write_policy, write_suite

from litmus_sandbox import VerdictCache


def fill(folder: Path) -> None:
    """Write to ``folder`` until its disk is full."""
    with contextlib.suppress(OSError), open(folder / "filler", "wb", buffering=0) as f:
        while True:
            f.write(b"\0" * 4096)


@pytest.mark.parametrize("when", ["before the run", "during the run"])
def test_a_full_disk_under_the_cache_is_one_line_and_exit_2(
    tmp_path: Path, small_fs: Path, when: str
) -> None:
    episodes = tmp_path / "eps.jsonl"
    write_suite(episodes, 2, 2)
    with running(TimedJudge()) as endpoint:
        policy = write_policy(tmp_path, endpoint.url)
        cache = small_fs / "cache.sqlite"
        with contextlib.ExitStack() as stack:
            if when == "during the run":  # the cache's files are open: the run opens it
                stack.enter_context(VerdictCache(cache))
            fill(small_fs)
            done = subprocess.run(
                score_cmd(episodes, policy, cache, tmp_path / "v.jsonl"),
                env=env(),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
    print(done.stderr)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"litmus-sandbox: error: {cache}: verdict cache: ")
    assert "Traceback" not in done.stderr
    if when == "during the run":
        assert "database or disk is full" in lines[0]
    assert not (tmp_path / "v.jsonl").exists()
