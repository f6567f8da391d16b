"""What a kill costs, and what scorers sharing a cache pay, against the loopback judge.

    python bench/kill_rescore_bench.py [--latency 0.05] [--concurrency 8] [--kills 20]
                                       [--seed N] [--baseline NAME=TREE ...]
                                       [--cache sqlite|redis] [--shared-only]

Every figure comes from ``litmus-sandbox score`` processes against the tests' loopback
judge (``tests/judges/judge_endpoint.py``, in this process), which answers after
``--latency`` seconds and records when it answered what (``tests/judges/score_procs.py``).

* **Shared cache**: four ``score`` processes started together over the same episodes
  (``--shared-episodes`` x ``--shared-steps``, 480 unique steps by default) and one cache
  file: requests per unique step.
* **Head of line**: ``--episodes`` x ``--steps`` (800 steps); the first step's answer is
  held, the run is killed (SIGKILL) ``--kill-after`` seconds after that step was asked,
  and run again on the same cache: the re-run's requests, and how many of them were for
  steps already answered before the kill (paid twice).
* **Random kills**: ``--kills`` runs of the same suite, each on a fresh cache, killed at an
  instant drawn uniformly over a clean run's judging (first request to last answer), then
  run again: steps in flight at the kill,
  steps answered before it but not stored (and how long before: answers are written
  within about 0.02 s), requests paid twice.

``--baseline NAME=TREE`` runs the same measurements with another source tree first on
``PYTHONPATH`` (``git worktree add /tmp/before COMMIT``), for a before/after in one run.
``--cache redis`` puts every cache on a ``redis-server`` started on loopback for the run
(``tests/redis_server.py``; emptied before each measurement) instead of a SQLite file;
``--shared-only`` measures only the four scorers. Results go to
``bench/results/kill_rescore.json`` (``kill_rescore_redis.json`` with ``--cache redis``).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "judges"))

from judge_endpoint import Endpoint, running  # noqa: E402 - from tests/, put on the path above
from redis_server import RedisServer  # noqa: E402
from score_procs import (  # noqa: E402
    TimedJudge,
    connections_done,
    env,
    kill,
    score_cmd,
    step_keys,
    stored,
    wait_for,
    write_policy,
    write_suite,
)


class Caches:
    """Where each measurement's fresh cache lives: a new SQLite file, or the one Redis
    server's database, emptied."""

    def __init__(self, folder: Path, server: RedisServer | None) -> None:
        self.folder = folder
        self.server = server

    def fresh(self, name: str) -> Path | str:
        if self.server is None:
            return self.folder / f"{name}-{time.monotonic_ns()}.sqlite"
        self.server.client().flushdb()
        return self.server.url


class Scorer:
    """How to start ``score`` from one source tree (None: this one)."""

    def __init__(self, name: str, tree: str | None) -> None:
        self.name = name
        self.tree = tree

    def env(self) -> dict[str, str]:
        # A long claim lifetime: a re-run must overtake a killed scorer's claims at once.
        extra = {"LITMUS_CACHE_CLAIM_TTL": "600"}
        if self.tree is not None:
            extra["PYTHONPATH"] = self.tree
        return env(**extra)

    def start(
        self, episodes: Path, policy: Path, cache: Path | str, out: Path
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            score_cmd(episodes, policy, cache, out),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(),
            cwd=episodes.parent,  # not this tree: ``python -m`` puts the cwd first
        )

    def run(self, episodes: Path, policy: Path, cache: Path | str, out: Path) -> float:
        started = time.monotonic()
        done = subprocess.run(
            score_cmd(episodes, policy, cache, out),
            env=self.env(),
            cwd=episodes.parent,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{self.name}: score failed: {done.stderr}")
        return time.monotonic() - started


def shared(
    scorer: Scorer, folder: Path, caches: Caches, args: argparse.Namespace
) -> dict[str, Any]:
    episodes, cache = folder / "shared.jsonl", caches.fresh("shared")
    n = write_suite(episodes, args.shared_episodes, args.shared_steps)
    judge = TimedJudge(args.latency)
    with running(judge) as endpoint:
        policy = write_policy(folder, endpoint.url, concurrency=args.concurrency)
        started = time.monotonic()
        procs = [scorer.start(episodes, policy, cache, folder / f"v{i}.jsonl") for i in range(4)]
        for p in procs:
            _, err = p.communicate(timeout=900)
            if p.returncode != 0:
                raise SystemExit(f"{scorer.name}: score failed: {err}")
        seconds = time.monotonic() - started
    made = len(judge.answered)
    return {
        "unique_steps": n,
        "requests": made,
        "requests_per_unique_step": round(made / n, 3),
        "seconds": round(seconds, 2),
    }


def killed(
    scorer: Scorer,
    folder: Path,
    caches: Caches,
    args: argparse.Namespace,
    judge: TimedJudge,
    endpoint: Endpoint,
    kill_at: float | None,
) -> dict[str, Any]:
    """One run killed ``kill_at`` s after its first request (None: held-answer case),
    then a re-run on the same cache."""
    episodes, policy = folder / "suite.jsonl", folder / "policy.toml"
    cache = caches.fresh("kill")
    keys = {step: key for key, step in step_keys(episodes, policy).items()}
    first_answer, asked = len(judge.answered), len(judge.asked)
    proc = scorer.start(episodes, policy, cache, folder / "killed.jsonl")
    try:
        if kill_at is None:
            wait_for(judge.holding.is_set, 120, "the held request")
            time.sleep(args.kill_after)
        else:
            wait_for(lambda: len(judge.asked) > asked, 120, "the first request")
            time.sleep(kill_at)
    finally:
        at_kill = time.monotonic()
        kill(proc)
    judge.release.set()
    wait_for(connections_done, 120, "the killed scorer's requests answered")
    kept = stored(cache)
    this_run = judge.answered[first_answer:]
    before = [(at, step) for at, step in this_run if at < at_kill]
    lost_ages = [at_kill - at for at, step in before if keys[step] not in kept]
    answered_steps = {step for _, step in before}
    rerun_from = len(judge.answered)
    scorer.run(episodes, policy, cache, folder / "rerun.jsonl")
    rerun = [step for _, step in judge.answered[rerun_from:]]
    return {
        "kill_at_s": None if kill_at is None else round(kill_at, 3),
        "answered_before_kill": len(before),
        "stored_at_kill": len(kept),
        "in_flight_at_kill": len(this_run) - len(before),
        "answered_not_stored": len(lost_ages),
        "oldest_lost_answer_ms": round(max(lost_ages) * 1000, 1) if lost_ages else None,
        "rerun_requests": len(rerun),
        "paid_twice": sum(1 for step in rerun if step in answered_steps),
        "endpoint_requests": len(endpoint.requests),
    }


def kills(scorer: Scorer, folder: Path, caches: Caches, args: argparse.Namespace) -> dict[str, Any]:
    episodes = folder / "suite.jsonl"
    n = write_suite(episodes, args.episodes, args.steps)
    rng = random.Random(args.seed)
    with running(TimedJudge(args.latency, hold=(0, 0))) as endpoint:
        judge = endpoint.answer
        assert isinstance(judge, TimedJudge)
        write_policy(folder, endpoint.url, concurrency=args.concurrency)
        head = killed(scorer, folder, caches, args, judge, endpoint, None)
    with running(TimedJudge(args.latency)) as endpoint:
        judge = endpoint.answer
        assert isinstance(judge, TimedJudge)
        write_policy(folder, endpoint.url, concurrency=args.concurrency)
        clean = caches.fresh("clean")
        length = scorer.run(episodes, folder / "policy.toml", clean, folder / "c")
        # Kill instants over the judging (from the first request to the last answer).
        span = judge.answered[-1][0] - judge.answered[0][0] + args.latency
        runs = [
            killed(scorer, folder, caches, args, judge, endpoint, rng.uniform(0, span))
            for _ in range(args.kills)
        ]
    ages = [r["oldest_lost_answer_ms"] for r in runs if r["oldest_lost_answer_ms"] is not None]
    return {
        "steps": n,
        "head_of_line": head,
        "clean_run_s": round(length, 2),
        "judging_span_s": round(span, 2),
        "random": runs,
        "random_total_paid_twice": sum(r["paid_twice"] for r in runs),
        "random_total_in_flight": sum(r["in_flight_at_kill"] for r in runs),
        "random_max_paid_twice": max(r["paid_twice"] for r in runs),
        "random_oldest_lost_answer_ms": max(ages, default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=160)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--shared-episodes", type=int, default=120)
    parser.add_argument("--shared-steps", type=int, default=4)
    parser.add_argument("--kill-after", type=float, default=2.0)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20260)
    parser.add_argument("--baseline", action="append", default=[], metavar="NAME=TREE")
    parser.add_argument("--cache", choices=["sqlite", "redis"], default="sqlite")
    parser.add_argument("--shared-only", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    suffix = "" if args.cache == "sqlite" else f"_{args.cache}"
    args.json = args.json or ROOT / "bench" / "results" / f"kill_rescore{suffix}.json"
    scorers = [Scorer(*b.split("=", 1)) for b in args.baseline] + [Scorer("this", None)]
    import tempfile

    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    for scorer in scorers:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            server = RedisServer(folder / "redis") if args.cache == "redis" else None
            if server is not None:
                server.start()
            try:
                caches = Caches(folder, server)
                four = shared(scorer, folder, caches, args)
                print(f"{scorer.name}: 4 scorers, {args.cache}: {json.dumps(four)}", flush=True)
                cost = {} if args.shared_only else kills(scorer, folder, caches, args)
            finally:
                if server is not None:
                    server.stop()
            if not cost:
                results[scorer.name] = {"shared": four}
                continue
            print(f"{scorer.name}: head of line: {json.dumps(cost['head_of_line'])}", flush=True)
            summary = {k: v for k, v in cost.items() if k not in ("random", "head_of_line")}
            print(f"{scorer.name}: random kills: {json.dumps(summary)}", flush=True)
            results[scorer.name] = {"shared": four, **cost}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
