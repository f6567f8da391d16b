"""``score`` processes sharing one Redis cache (a real ``redis-server`` on loopback): the
verdicts SQLite gives, each unique step asked about once across concurrent scorers, a
killed scorer's claims expiring on the server and its answered steps never paid twice,
a server restart serving nothing wrong, a server that is down told in one line. The
loopback judge counts the requests."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from judge_endpoint import running
from redis_server import RedisServer, free_port, redis_server
from score_procs import (
    TimedJudge,
    claims,
    connections_done,
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

from litmus_sandbox import read_verdicts

#: The longest a judged step may wait for the cache (0.02 s between writes, plus room
#: for a loaded machine).
WINDOW = 0.4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as s:
        yield s


@pytest.fixture
def url(server: RedisServer) -> str:
    server.client().flushdb()
    return server.url


def score(episodes: Path, policy: Path, cache: Path | str, out: Path, **extra: str) -> str:
    done = subprocess.run(
        score_cmd(episodes, policy, cache, out),
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_four_scorers_on_one_redis_ask_about_each_step_once(url: str, tmp_path: Path) -> None:
    """And their verdicts are the ones a SQLite cache gives."""
    episodes = tmp_path / "eps.jsonl"
    n = write_suite(episodes, 40, 4)
    judge = TimedJudge(0.02)
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url)
        procs = [start(episodes, policy, url, tmp_path / f"v{i}.jsonl") for i in range(4)]
        results = [p.communicate(timeout=120) for p in procs]
        for p, (_, err) in zip(procs, results, strict=True):
            assert p.returncode == 0, err
        shared = len(judge.answered)
        score(episodes, policy, tmp_path / "local.sqlite", tmp_path / "sqlite.jsonl")
    ratio = shared / n
    print(f"4 scorers on Redis: {shared} requests for {n} unique steps ({ratio:.3f}x)")
    assert ratio <= 1.01
    local = read_verdicts(tmp_path / "sqlite.jsonl").verdicts
    assert len(local) == 40
    for i in range(4):
        assert read_verdicts(tmp_path / f"v{i}.jsonl").verdicts == local
    assert (len(stored(url)), claims(url)) == (n, [])


def test_a_killed_scorers_claims_expire_and_its_answers_are_not_paid_again(
    url: str, tmp_path: Path
) -> None:
    """SIGKILL mid-run: its claims lapse on the server by themselves; the re-run asks
    only about steps never answered, or answered in the last instant before the kill."""
    episodes = tmp_path / "eps.jsonl"
    n = write_suite(episodes, 30, 5)
    judge = TimedJudge(0.02)
    ttl = {"LITMUS_CACHE_CLAIM_TTL": "2"}
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url)
        step_key = {step: key for key, step in step_keys(episodes, policy).items()}
        proc = start(episodes, policy, url, tmp_path / "killed.jsonl", **ttl)
        try:
            wait_for(lambda: len(judge.answered) >= n // 3, what="a third answered")
        finally:
            at_kill = time.monotonic()
            kill(proc)
        wait_for(connections_done, what="the killed scorer's requests answered")
        assert claims(url)  # the holder died holding claims...
        wait_for(lambda: not claims(url), timeout=10, what="its claims to expire")  # ...they lapse
        kept = stored(url)
        before = list(judge.answered)
        lost = [s for at, s in before if at < at_kill - WINDOW and step_key[s] not in kept]
        assert lost == []
        in_flight = sum(1 for at, _ in before if at >= at_kill)
        late = sum(
            1 for at, s in before if at_kill - WINDOW <= at < at_kill and step_key[s] not in kept
        )
        score(episodes, policy, url, tmp_path / "again.jsonl", **ttl)
        again = [s for _, s in judge.answered[len(before) :]]
    paid_twice = [s for s in again if any(s == b for _, b in before)]
    print(f"killed after {len(before)} answers: {in_flight} in flight, re-sent {len(paid_twice)}")
    assert len(paid_twice) <= in_flight + late
    assert len(again) == n - len(kept)
    assert len(read_verdicts(tmp_path / "again.jsonl").verdicts) == 30


def test_a_restarted_server_serves_nothing_wrong(tmp_path: Path) -> None:
    """Scored, then the server is killed (no clean shutdown) and started again from its
    append-only file: a re-score asks nothing and gives the same verdicts."""
    episodes = tmp_path / "eps.jsonl"
    n = write_suite(episodes, 10, 3)
    judge = TimedJudge()
    server = RedisServer(tmp_path / "redis", persist=True)
    server.start()
    try:
        with running(judge) as endpoint:
            policy = write_policy(tmp_path, endpoint.url)
            score(episodes, policy, server.url, tmp_path / "first.jsonl")
            server.crash()
            server.start()
            out = score(episodes, policy, server.url, tmp_path / "second.jsonl")
    finally:
        server.stop()
    assert len(judge.answered) == n
    assert f"0 judge calls, {n} served from cache" in out
    first = read_verdicts(tmp_path / "first.jsonl").verdicts
    assert read_verdicts(tmp_path / "second.jsonl").verdicts == first


def test_a_server_that_is_down_is_one_line_and_exit_2(tmp_path: Path) -> None:
    episodes = tmp_path / "eps.jsonl"
    write_suite(episodes, 2, 2)
    policy = write_policy(tmp_path, "http://127.0.0.1:9/v1")
    cache = f"redis://127.0.0.1:{free_port()}/0"
    done = subprocess.run(
        score_cmd(episodes, policy, cache, tmp_path / "v.jsonl"),
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"litmus-sandbox: error: {cache}: verdict cache: connecting")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "v.jsonl").exists()
