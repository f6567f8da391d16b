"""Several ``score`` processes sharing one cache file: each step judged once (claims),
and a hung holder's claim expiring so that another scorer judges the step. Real
processes, the loopback judge counting requests."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from pathlib import Path

from judge_endpoint import running
from score_procs import (
    TimedJudge,
    claims,
    env,
    kill,
    score_cmd,
    start,
    step_keys,
    stored,
    wait_for,
    write_policy,
    write_suite,
)

from litmus_sandbox import VerdictCache, read_verdicts


def test_four_scorers_sharing_a_cache_ask_about_each_step_once(tmp_path: Path) -> None:
    episodes, cache = tmp_path / "eps.jsonl", tmp_path / "cache.sqlite"
    n = write_suite(episodes, 40, 4)
    judge = TimedJudge(0.02)
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url)
        procs = [start(episodes, policy, cache, tmp_path / f"v{i}.jsonl") for i in range(4)]
        results = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    ratio = len(judge.answered) / n
    print(f"4 scorers: {len(judge.answered)} requests for {n} unique steps ({ratio:.3f}x)")
    assert ratio <= 1.05
    first = read_verdicts(tmp_path / "v0.jsonl").verdicts
    assert len(first) == 40
    for i in range(1, 4):
        assert read_verdicts(tmp_path / f"v{i}.jsonl").verdicts == first
    assert (len(stored(cache)), claims(cache)) == (n, [])


def test_a_hung_holders_claim_expires_and_another_scorer_judges_the_step(
    tmp_path: Path,
) -> None:
    """The holder is stopped (SIGSTOP: alive, but it neither answers nor refreshes): the
    other scorer waits for its claim to expire, then judges the step itself."""
    episodes, cache = tmp_path / "eps.jsonl", tmp_path / "cache.sqlite"
    write_suite(episodes, 3, 2)
    judge = TimedJudge(hold=(0, 0))
    short = {"LITMUS_CACHE_CLAIM_TTL": "1.5"}
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url)
        held_key = next(k for k, step in step_keys(episodes, policy).items() if step == (0, 0))
        hung = start(episodes, policy, cache, tmp_path / "hung.jsonl", **short)
        try:
            wait_for(judge.holding.is_set, what="the held request")
            stop_outside_a_write(hung, cache)
            expiry = _claim_expiry(cache, held_key)
            other = subprocess.run(
                score_cmd(episodes, policy, cache, tmp_path / "other.jsonl"),
                env=env(**short),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            kill(hung)
            judge.release.set()
    assert other.returncode == 0, other.stderr
    asked_again = [at for at, step in judge.asked if step == (0, 0)][1:]
    assert len(asked_again) == 1
    assert asked_again[0] >= expiry - 0.05  # not before the claim expired (clock jitter)
    assert len(read_verdicts(tmp_path / "other.jsonl").verdicts) == 3


def stop_outside_a_write(proc: subprocess.Popen[str], cache: Path) -> None:
    """SIGSTOP ``proc`` at an instant it holds no write lock on ``cache`` (stopped inside
    a transaction, it would block every other writer: SQLite's locks are the process's)."""

    def lock_free(timeout: float) -> bool:
        db = sqlite3.connect(cache, timeout=timeout, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            db.close()

    while True:
        proc.send_signal(signal.SIGSTOP)
        if lock_free(0.05):
            return
        proc.send_signal(signal.SIGCONT)  # stopped inside a write: let it finish that one
        assert lock_free(10)


def _claim_expiry(cache: Path, key: tuple[str, str, str]) -> float:
    """The expiry of ``key``'s claim (the holder is stopped: it no longer changes)."""
    with VerdictCache(cache) as c:
        (expiry,) = [e for k, _, e in c.claims() if k == key]
    return expiry
