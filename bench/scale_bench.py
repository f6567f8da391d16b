"""Scoring at scale: locally, on Ray with 1 worker and with 2, through one Redis cache.

    python bench/scale_bench.py [--steps 100000] [--latency 0.05] [--concurrency 8]
                                [--steps-per-task 1000] [--mixed-steps 20000]
                                [--skip-mixed] [--ways local ray1 ray2] [--out NAME]

The judge is the lean loopback endpoint of ``bench/judge_bench.py`` (an asyncio server in
a process of its own, answering every request after ``--latency`` seconds); the cache is
a ``redis-server`` started on loopback for the run (``tests/redis_server.py``, emptied
before each measurement); the cluster is a Ray head started with ``ray start`` on this
machine, then one worker node more (``tests/ray_cluster.py``; each node 1 CPU: one
scoring task, one judge session of ``--concurrency`` at a time).

``--steps`` unique steps (episodes of 10) are scored three ways: in this process
(``score`` as the CLI runs it), on Ray with the head alone (1 worker), and on Ray with
the head and a worker node (2 workers), each after a warm-up that starts the workers'
processes. For each: steps per second, judge requests per unique step, the bound
(workers x concurrency / latency), whether the verdicts are local scoring's byte for
byte, and the requests of a second run over the same episodes (must be 0: the cache).
Then **mixed**: 4 ``litmus-sandbox score`` processes and the 2 Ray workers started
together over the same ``--mixed-steps`` steps, on one Redis cache: requests per unique
step. Results go to ``bench/results/NAME`` (``scale_bench.json`` unless ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "judges"))

from factories import end, header, msg  # noqa: E402 - from tests/, put on the path above
from judge_bench import Endpoint  # noqa: E402 - from bench/, put on the path above
from ray_cluster import RayCluster  # noqa: E402 - from tests/, put on the path above
from redis_server import RedisServer  # noqa: E402
from score_procs import KEY, env, score_cmd, write_policy, write_suite  # noqa: E402

from litmus_sandbox import JsonlWriter, load_policy  # noqa: E402
from litmus_sandbox._runtime.ray_engine import RayEngine  # noqa: E402
from litmus_sandbox._runtime.scorer import ScoreStats, score_files  # noqa: E402
from litmus_sandbox._store.step_cache import open_cache  # noqa: E402
from litmus_sandbox.judges import ScoringConfig  # noqa: E402

Score = Callable[[Path, Path], ScoreStats]


class Bench:
    """The endpoint, the Redis server, the policy and the folder of one run."""

    def __init__(self, folder: Path, args: argparse.Namespace) -> None:
        self.folder = folder
        self.args = args
        self.endpoint = Endpoint(args.latency)
        self.redis = RedisServer(folder / "redis")
        self.redis.start()
        self.policy = write_policy(folder, self.endpoint.url, concurrency=args.concurrency)
        self.config: ScoringConfig = load_policy(self.policy)

    def close(self) -> None:
        self.redis.stop()
        self.endpoint.close()

    def fresh_cache(self) -> str:
        self.redis.client().flushdb()
        return self.redis.url

    def local(self, episodes: Path, out: Path) -> ScoreStats:
        with open_cache(self.redis.url) as cache:
            return score_files([episodes], self.config, out, cache=cache)

    def on_ray(self, engine: RayEngine) -> Score:
        def score(episodes: Path, out: Path) -> ScoreStats:
            return score_files([episodes], self.config, out, engine=engine)

        return score

    def measure(self, name: str, score: Score, episodes: Path, workers: int) -> dict[str, Any]:
        """Score ``episodes`` on an empty cache, then again; the figures."""
        steps = self.args.steps
        self.fresh_cache()
        before = self.endpoint.requests()
        started = time.perf_counter()
        stats = score(episodes, self.folder / f"{name}.jsonl")
        elapsed = time.perf_counter() - started
        made = self.endpoint.requests() - before
        again = score(episodes, self.folder / f"{name}-again.jsonl")
        bound = workers * self.args.concurrency / self.args.latency
        local = self.folder / "local.jsonl"
        return {
            "way": name,
            "workers": workers,
            "steps": steps,
            "seconds": round(elapsed, 2),
            "steps_per_s": round(steps / elapsed, 1),
            "bound_steps_per_s": round(bound, 1),
            "share_of_bound": round(steps / elapsed / bound, 3),
            "requests": made,
            "requests_per_unique_step": round(made / steps, 4),
            "judge_calls": stats.judge_calls,
            "load_average_1m": round(os.getloadavg()[0], 1),
            "second_run_requests": self.endpoint.requests() - before - made,
            "second_run_judge_calls": again.judge_calls,
            "identical_to_local": None
            if name == "local" or not local.exists()
            else (self.folder / f"{name}.jsonl").read_bytes() == local.read_bytes(),
        }

    def mixed(self, engine: RayEngine) -> dict[str, Any]:
        """4 ``score`` processes and the Ray workers together, on one cache."""
        n = self.args.mixed_steps
        episodes = self.folder / "mixed.jsonl"
        write_suite(episodes, n // 10, 10)
        cache = self.fresh_cache()
        before = self.endpoint.requests()
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                score_cmd(episodes, self.policy, cache, self.folder / f"mixed-{i}.jsonl"),
                env=env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        self.on_ray(engine)(episodes, self.folder / "mixed-ray.jsonl")
        for p in procs:
            _, err = p.communicate(timeout=3600)
            if p.returncode != 0:
                raise RuntimeError(f"a local scorer failed: {err}")
        made = self.endpoint.requests() - before
        outputs = [self.folder / f"mixed-{i}.jsonl" for i in range(4)]
        ray_out = (self.folder / "mixed-ray.jsonl").read_bytes()
        return {
            "way": "2 Ray workers + 4 local scorers, one Redis",
            "unique_steps": n,
            "seconds": round(time.perf_counter() - started, 2),
            "requests": made,
            "requests_per_unique_step": round(made / n, 4),
            "load_average_1m": round(os.getloadavg()[0], 1),
            "all_verdicts_identical": all(o.read_bytes() == ray_out for o in outputs),
        }


def warm_up(bench: Bench, engine: RayEngine, workers: int) -> None:
    """Start the workers' processes (and import everything) before anything is timed."""
    episodes = bench.folder / f"warm-{workers}.jsonl"
    with JsonlWriter(episodes) as w:  # other steps than the measured ones
        for e in range(workers * 4):
            eid = f"warm-{time.monotonic_ns()}-{e}"
            w.write(header(eid, eid))
            w.write_many([msg(k, "user", f"warm-up {eid}.{k}", eid=eid) for k in range(10)])
            w.write(end(eid, 10))
    bench.fresh_cache()
    engine.steps_per_task = 20
    bench.on_ray(engine)(episodes, bench.folder / "warm.jsonl")
    engine.steps_per_task = bench.args.steps_per_task


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--steps-per-task", type=int, default=1000)
    p.add_argument("--mixed-steps", type=int, default=20_000)
    p.add_argument("--skip-mixed", action="store_true")
    p.add_argument("--ways", nargs="+", default=["local", "ray1", "ray2"])
    p.add_argument("--out", default="scale_bench.json", help="file name in bench/results/")
    args = p.parse_args()
    os.environ["LITMUS_JUDGE_KEY"] = KEY
    results: dict[str, Any] = {"latency_s": args.latency, "max_concurrency": args.concurrency}
    results["runs"] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        episodes = folder / "episodes.jsonl"
        write_suite(episodes, args.steps // 10, 10)
        bench = Bench(folder, args)
        cluster: RayCluster | None = None
        engine: RayEngine | None = None
        try:
            if "local" in args.ways:
                r = bench.measure("local", bench.local, episodes, 1)
                results["runs"].append(r)
                print(json.dumps(r), flush=True)
            cluster = RayCluster(folder / "cluster", {**os.environ, **env()}, workers=0)
            cluster.start()
            engine = RayEngine(
                cache=bench.redis.url, address=cluster.address, steps_per_task=args.steps_per_task
            )
            for way, workers in (("ray1", 1), ("ray2", 2)):
                if workers == 2:
                    cluster.add_worker()
                if way not in args.ways:
                    continue
                warm_up(bench, engine, workers)
                r = bench.measure(way, bench.on_ray(engine), episodes, workers)
                results["runs"].append(r)
                print(json.dumps(r), flush=True)
            if not args.skip_mixed:
                warm_up(bench, engine, 2)
                results["mixed"] = bench.mixed(engine)
                print(json.dumps(results["mixed"]), flush=True)
        finally:
            if engine is not None:
                engine.close()
            if cluster is not None:
                cluster.stop()
            bench.close()
    rates = {r["way"]: r["steps_per_s"] for r in results["runs"]}
    if "ray1" in rates and "ray2" in rates:
        results["ray2_over_ray1"] = round(rates["ray2"] / rates["ray1"], 2)
        print(f"2 workers / 1 worker: {results['ray2_over_ray1']}x", flush=True)
    out = ROOT / "bench" / "results" / args.out
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
