"""Scoring on a real local Ray cluster (a head and a worker node, ``tests/ray_cluster.py``)
against the loopback judge, through a real ``redis-server``: the verdicts local scoring
writes, byte for byte; steps judged across the cluster as progress; a worker killed
mid-shard, its shard retried and no answered step paid twice; ``gate
--candidate-episodes`` and ``rebaseline`` as locally.

The cluster starts once for the module (several seconds); each test empties the Redis
database and has its own folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import end, header, msg
from judge_endpoint import Reply, Request, running
from ray_cluster import RayCluster, client_pid, ray_cluster
from redis_server import RedisServer, redis_server
from score_procs import (
    KEY,
    TimedJudge,
    env,
    step_keys,
    step_of,
    stored,
    wait_for,
    write_policy,
    write_suite,
)

from litmus_sandbox import JsonlWriter, iter_episodes, load_policy
from litmus_sandbox._model.records import Episode
from litmus_sandbox._runtime.ray_engine import RayEngine, foreign_nodes, shards
from litmus_sandbox._runtime.scorer import ScoreStats, score_files

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    # Module scope: every Ray test is in this module (the test command runs a module on
    # one worker), so one cluster serves them all. Its workers have the judge's key.
    folder = tmp_path_factory.mktemp("ray")
    node_env = {**os.environ, **env(), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    node_env.update(LITMUS_JUDGE_KEY=KEY, HOME=str(folder), TMPDIR=str(folder))
    with ray_cluster(folder, node_env) as c:
        yield c


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as s:
        yield s


@pytest.fixture
def url(server: RedisServer) -> str:
    server.client().flushdb()
    return server.url


def cli(*args: object, expect: int | None = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "litmus_sandbox._cli.main", *map(str, args)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    if expect is not None:
        assert done.returncode == expect, done.stderr
    return done


def on_ray(cluster: RayCluster, cache: str, steps: int) -> list[str]:
    return [
        "--engine",
        "ray",
        "--ray-address",
        cluster.address,
        "--cache",
        cache,
        "--steps-per-task",
        str(steps),
    ]


def suite(path: Path) -> int:
    """12 episodes of 5 unique steps (some unsafe), one more repeating episode 0's steps
    under another case, and one incomplete: the unique steps."""
    n = write_suite(path, 12, 5)
    with JsonlWriter(path) as w:  # appends
        w.write(header("again", "case-again"))
        for k in range(5):
            text = f"step 0.{k}: " + ("an evil plan" if k % 7 == 3 else "fine work")
            w.write(msg(k, "user" if k == 0 else "assistant", text, eid="again"))
        w.write(end("again", 5))
        w.write(header("cut", "case-cut"))
        w.write(msg(0, "user", "step 99.0: fine work", eid="cut"))
    return n + 1


def test_score_on_ray_writes_what_local_scoring_writes(
    cluster: RayCluster, url: str, tmp_path: Path
) -> None:
    """Byte for byte (verdicts carry no time of scoring), in the same order, with the
    same summary, and the same failure: a step the judge refuses leaves its case without a
    verdict (exit 6). Each unique step is asked once across the shards; a second run asks
    only the step that failed."""
    episodes = tmp_path / "eps.jsonl"
    unique = suite(episodes)
    judge = FailingJudge(0.01, fail=(5, 2))
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url)
        local = cli(
            "score",
            episodes,
            "--policy",
            policy,
            "--cache",
            tmp_path / "l.sqlite",
            "-o",
            tmp_path / "local.jsonl",
            expect=6,
        )
        asked_locally = len(judge.asked)
        ray = cli(
            "score",
            episodes,
            "--policy",
            policy,
            *on_ray(cluster, url, 9),
            "-o",
            tmp_path / "ray.jsonl",
            expect=6,
        )
        asked_on_ray = len(judge.asked) - asked_locally
        again = cli(
            "score",
            episodes,
            "--policy",
            policy,
            *on_ray(cluster, url, 9),
            "-o",
            tmp_path / "again.jsonl",
            expect=6,
        )
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert asked_locally == asked_on_ray == unique
    assert len(judge.asked) == 2 * unique + 1, "the second run asked more than the failed step"
    assert ray.stdout.replace("ray.jsonl", "") == local.stdout.replace("local.jsonl", "")
    assert _ours(ray.stderr) == _ours(local.stderr)
    assert "'ep-5' step 2" in ray.stderr
    assert "14 episodes" in ray.stdout
    assert "1 incomplete" in ray.stdout
    assert "1 judge call," in again.stdout
    assert '"case-5"' not in (tmp_path / "ray.jsonl").read_text()


def _ours(stderr: str) -> list[str]:
    """The lines litmus-sandbox wrote (Ray may add its own)."""
    return [line for line in stderr.splitlines() if line.startswith("litmus-sandbox:")]


class FailingJudge(TimedJudge):
    """:class:`TimedJudge`, refusing (HTTP 400: no verdict, at once) the step ``fail``."""

    def __init__(self, latency: float, *, fail: tuple[int, int]) -> None:
        super().__init__(latency)
        self.fail = fail

    def __call__(self, request: Request) -> Reply:
        reply = super().__call__(request)
        with contextlib.suppress(ValueError):
            if step_of(request.step_text) == self.fail:
                return Reply(status=400, body={"error": "refused"})
        return reply


def test_progress_counts_the_steps_judged_across_the_cluster(
    cluster: RayCluster, url: str, tmp_path: Path
) -> None:
    """While the first shard waits for one answer, the steps its worker settled and
    those of the next shard (finished on the other worker, not yet taken in order)
    already show; the answer is let go only once they do."""
    episodes = tmp_path / "eps.jsonl"
    write_suite(episodes, 8, 5)  # two shards of 20 steps
    judge = TimedJudge(hold=(3, 4))  # the last step of the first shard
    seen: list[int] = []

    def progress(stats: ScoreStats) -> None:
        seen.append(stats.judge_calls + stats.cache_hits)
        if seen[-1] >= 35 and not judge.release.is_set():
            judge.release.set()  # 15 of the first shard, 20 of the second

    engine = RayEngine(cache=url, address=cluster.address, steps_per_task=20)
    with running(judge) as endpoint:
        config = load_policy(write_policy(tmp_path, endpoint.url))
        try:
            stats = score_files(
                [episodes], config, tmp_path / "v.jsonl", engine=engine, progress=progress
            )
        finally:
            judge.release.set()
            engine.close()
    assert max(seen[:-2]) >= 35, seen  # before the two shards were taken
    assert judge.holding.is_set()
    assert seen[-1] == stats.steps_covered == 40
    assert stats.judge_calls == 40


class HeldJudge(TimedJudge):
    """:class:`TimedJudge`, also telling the client port of the request it holds."""

    held_port = 0

    def __call__(self, request: Request) -> Reply:
        try:
            if step_of(request.step_text) == self.hold and not self.holding.is_set():
                self.held_port = request.peer_port
        except ValueError:
            pass  # a torn request: the parent counts it
        return super().__call__(request)


def test_a_worker_killed_mid_shard_has_its_shard_retried(
    cluster: RayCluster, url: str, tmp_path: Path
) -> None:
    """SIGKILL the worker process whose request is held, once the other steps of its
    shard are stored: Ray runs its task again, which is served those and asks only the
    step that was in flight; the other worker's shard is not disturbed."""
    episodes = tmp_path / "eps.jsonl"
    unique = write_suite(episodes, 8, 5)
    held = (3, 4)  # the last step of the first shard (episodes 0-3)
    judge = HeldJudge(0.01, hold=held)
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url, concurrency=2)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "litmus_sandbox._cli.main",
                "score",
                episodes,
                "--policy",
                policy,
                *on_ray(cluster, url, 20),
                "-o",
                tmp_path / "ray.jsonl",
            ],
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert judge.holding.wait(120), "the held step was never asked"
            keys = step_keys(episodes, policy)
            shard = {k for k, (e, i) in keys.items() if e < 4 and (e, i) != held}
            wait_for(lambda: shard <= stored(url), what="the shard's other steps stored")
            # The socket's process, once /proc lists it whole (a lookup mid-change can
            # miss it): waited for, not looked up once.
            wait_for(lambda: client_pid(judge.held_port) is not None, what="the held client's pid")
            pid = client_pid(judge.held_port)
            assert pid is not None
            assert b"ray::" in Path(f"/proc/{pid}/cmdline").read_bytes()
            in_flight = endpoint.in_flight
            os.kill(pid, signal.SIGKILL)
            judge.release.set()
            _, err = proc.communicate(timeout=180)
        finally:
            judge.release.set()
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err
        asked = len(judge.asked)
        cli(
            "score",
            episodes,
            "--policy",
            policy,
            "--cache",
            tmp_path / "l.sqlite",
            "-o",
            tmp_path / "local.jsonl",
        )
    steps = [s for _, s in judge.asked[:asked]]
    assert steps.count(held) == 2, "the shard was not retried"
    assert {s for s in steps if steps.count(s) > 1} == {held}, "an answered step was paid twice"
    assert unique < asked <= unique + in_flight
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    print(f"killed a worker: {asked} requests for {unique} unique steps, {in_flight} in flight")


def test_gate_and_rebaseline_on_ray_decide_as_locally(cluster: RayCluster, tmp_path: Path) -> None:
    """With the default cache, a SQLite file (every node runs on this machine): Ray's
    workers judge and fill it first, then the local commands are served from it."""
    base, cand = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    write_suite(base, 10, 4)
    write_suite(cand, 12, 3)
    ray = ["--engine", "ray", "--ray-address", cluster.address, "--steps-per-task", "8"]
    judge = TimedJudge()
    with running(judge) as endpoint:
        policy = write_policy(tmp_path, endpoint.url, concurrency=4)
        cli("score", cand, "--policy", policy, "--no-cache", "-o", tmp_path / "c.jsonl")
        asked = len(judge.asked)
        runs = {}
        for name, flags in (("ray", ray), ("local", [])):
            gate = [
                "gate",
                "--baseline",
                tmp_path / "c.jsonl",
                "--candidate-episodes",
                base,
                "--policy",
                policy,
                "--format",
                "json",
                "-o",
                tmp_path / f"{name}.json",
            ]
            runs[name] = cli(*gate, *flags, expect=None).returncode
            cli(
                "rebaseline",
                "--episodes",
                cand,
                "--policy",
                policy,
                "-o",
                tmp_path / f"rb-{name}.jsonl",
                *flags,
            )
            if name == "ray":
                # The 40 steps of the 4-step suite, and the 6 of the 3-step one it lacks.
                assert len(judge.asked) - asked == 46, "Ray's workers judged each step once"
        assert len(judge.asked) - asked == 46, "the local runs were served from the cache"
    assert runs["ray"] == runs["local"] == 1, "case-0 and case-7 regress (their 4th step)"
    assert (tmp_path / "ray.json").read_bytes() == (tmp_path / "local.json").read_bytes()
    assert (tmp_path / "rb-ray.jsonl").read_bytes() == (tmp_path / "rb-local.jsonl").read_bytes()


def test_ray_without_a_cache_the_workers_share_is_refused(
    cluster: RayCluster, tmp_path: Path
) -> None:
    episodes = tmp_path / "eps.jsonl"
    write_suite(episodes, 2, 2)
    policy = write_policy(tmp_path, "http://127.0.0.1:9/v1")
    base = ["score", episodes, "--policy", policy, "-o", tmp_path / "v.jsonl"]
    ray = ["--engine", "ray", "--ray-address", cluster.address]
    for flags, says in (
        ([*ray, "--no-cache"], "--engine ray needs a cache every worker reaches"),
        ([*ray, "--cache", ":memory:"], "an in-memory cache is no cache the workers share"),
        ([*ray, "--steps-per-task", "0"], "--steps-per-task must be 1 or more"),
        (["--ray-address", cluster.address], "need --engine ray"),
        ([*ray[:2], "--ray-address", "127.0.0.2:1"], "cannot reach the Ray cluster"),
    ):
        done = cli(*base, *flags, expect=2)
        assert done.stderr.count("\n") == 1, done.stderr
        assert says in done.stderr
    assert not (tmp_path / "v.jsonl").exists()


def test_a_sqlite_cache_is_refused_when_a_node_runs_elsewhere() -> None:
    nodes = [
        {"Alive": True, "NodeManagerHostname": "here"},
        {"Alive": True, "NodeManagerHostname": "gpu-7"},
        {"Alive": False, "NodeManagerHostname": "gone"},
    ]
    assert foreign_nodes(nodes, "here") == ["gpu-7"]
    assert foreign_nodes(nodes[:1], "here") == []


def _episodes(lengths: list[int], tmp_path: Path) -> list[Episode]:
    path = tmp_path / "eps.jsonl"
    with JsonlWriter(path) as w:
        for e, n in enumerate(lengths):
            w.write(header(f"e{e}", f"c{e}"))
            w.write_many([msg(k, "user", f"{e}.{k}", eid=f"e{e}") for k in range(n)])
            w.write(end(f"e{e}", n))
    return list(iter_episodes([path]))


def test_shards_hold_whole_episodes_in_order(tmp_path: Path) -> None:
    eps = _episodes([3, 4, 1, 0, 6, 2], tmp_path)
    cut = list(shards(eps, 5))
    assert [[e.episode_id for e in s] for s in cut] == [["e0", "e1"], ["e2", "e3", "e4"], ["e5"]]
    assert [e for s in cut for e in s] == eps
    assert list(shards([], 5)) == []
