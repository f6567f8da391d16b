"""``score`` killed (SIGKILL) at any instant, then run again on the same cache: the judge
is asked again only about the steps in flight at the kill and those answered in the
last moment before it (answers are written within about 0.02 s); never about a step that
waited only for an earlier episode. Real processes, the loopback judge counting requests."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

from judge_endpoint import running
from score_procs import (
    TimedJudge,
    connections_done,
    env,
    kill,
    score_cmd,
    start,
    step_keys,
    step_of,
    stored,
    wait_for,
    write_policy,
    write_suite,
)

from litmus_sandbox import read_verdicts

#: A long claim lifetime: a re-run must overtake a killed scorer's claims at once (its
#: process is gone), not wait for them to expire.
LONG_TTL = {"LITMUS_CACHE_CLAIM_TTL": "600"}
#: The longest a judged step may wait for the cache: the 0.02 s between two writes, and
#: room for a loaded machine.
WINDOW = 0.4


def run_to_end(episodes: Path, policy: Path, cache: Path, out: Path) -> None:
    done = subprocess.run(
        score_cmd(episodes, policy, cache, out),
        env=env(**LONG_TTL),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_a_kill_behind_a_held_answer_resends_only_the_held_step(tmp_path: Path) -> None:
    """Head of line: the first step's answer is held while all the others are answered;
    they are in the cache though the first episode never finished, so the kill costs
    one request."""
    episodes, cache = tmp_path / "eps.jsonl", tmp_path / "cache.sqlite"
    n = write_suite(episodes, 40, 5)
    judge = TimedJudge(0.005, hold=(0, 0))
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url)
        keys = step_keys(episodes, policy)
        proc = start(episodes, policy, cache, tmp_path / "first.jsonl", **LONG_TTL)
        try:
            wait_for(lambda: len(stored(cache)) == n - 1, what="every step but the held one")
            assert endpoint.in_flight == 1
        finally:
            kill(proc)
        judge.release.set()
        wait_for(connections_done, what="the held answer")
        first = len(endpoint.requests)
        never_stored = {keys[k] for k in keys.keys() - stored(cache)}
        run_to_end(episodes, policy, cache, tmp_path / "again.jsonl")
        resent = [step_of(r.step_text) for r in endpoint.requests[first:]]
    assert first == n
    assert never_stored == {(0, 0)}
    assert resent == [(0, 0)]
    assert len(read_verdicts(tmp_path / "again.jsonl").verdicts) == 40


def test_random_kills_resend_at_most_the_steps_in_flight(tmp_path: Path) -> None:
    """A few kills at random instants: every step answered more than ``WINDOW`` before a
    kill is in the cache, so the requests over all the runs are the unique steps plus
    those in flight or just answered at each kill; the verdicts are a clean run's."""
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    episodes, cache = tmp_path / "eps.jsonl", tmp_path / "cache.sqlite"
    n = write_suite(episodes, 30, 6)
    judge = TimedJudge(0.02)
    resent_bound = 0
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url)
        keys = step_keys(episodes, policy)
        step_key = {step: key for key, step in keys.items()}
        for _ in range(4):
            asked, answered, kept = len(endpoint.requests), len(judge.answered), stored(cache)
            left = n - len(kept)
            if left < 3:  # a loaded machine let an earlier run get this far: no room to kill
                break
            until = asked + rng.randint(1, left * 2 // 3)
            proc = start(episodes, policy, cache, tmp_path / "killed.jsonl", **LONG_TTL)
            try:
                wait_for(lambda: len(endpoint.requests) >= until, what="requests")  # noqa: B023
                time.sleep(rng.uniform(0, 0.1))  # the instant: anywhere between two writes
            finally:
                at_kill = time.monotonic()
                kill(proc)
            wait_for(connections_done, what="the killed scorer's requests answered")
            now_kept = stored(cache)
            this_run = judge.answered[answered:]
            lost = [
                (round(at_kill - at, 3), step)
                for at, step in this_run
                if at < at_kill and step_key[step] not in now_kept
            ]
            in_flight = sum(1 for at, _ in this_run if at >= at_kill)
            print(f"kill after {len(this_run)} requests: {in_flight} in flight, lost {lost}")
            assert all(age <= WINDOW for age, _ in lost), lost
            assert len(this_run) - len(now_kept - kept) == in_flight + len(lost)
            resent_bound += in_flight + len(lost)
        run_to_end(episodes, policy, cache, tmp_path / "final.jsonl")
        total = len(judge.answered)  # whole requests (a killed scorer may tear its last)
        print(f"{total} requests for {n} unique steps (at most {n + resent_bound})")
        assert total <= n + resent_bound
        run_to_end(episodes, policy, tmp_path / "clean.sqlite", tmp_path / "clean.jsonl")
    final = read_verdicts(tmp_path / "final.jsonl").verdicts
    assert final == read_verdicts(tmp_path / "clean.jsonl").verdicts
    assert len(final) == 30
