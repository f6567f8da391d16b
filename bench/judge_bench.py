"""The openai judge against a loopback endpoint that answers after 50 ms.

    python bench/judge_bench.py [--steps 2000] [--latency 0.05] [--concurrency 1 8 32]
                                [--incident-runs 1200] [--skip-incident]

The endpoint (``--serve``: a lean asyncio HTTP/1.1 server answering every request with the
same verdict after the latency, and ``GET /stats`` with how many it answered) runs in its own
process, so it does not share the scorer's interpreter or its CPU time; a thread-per-
connection ``http.server`` (the tests' endpoint) costs more CPU per request than the judge. For each ``max_concurrency`` it scores ``--steps`` distinct
steps (episodes of 10 steps) with no cache and reports steps per second against the bound
(concurrency / latency) and the overhead per judged step (the time each of the
``concurrency`` slots spent per step, less the endpoint's latency). It then re-scores the
same episodes through a cache, once to fill it and once more: the second pass must make 0
requests.

The incident part writes the incident suite (``examples/incident_suite.py``), scores its
baseline the old way (cut at the first refusal and the first empty tool result) and its
candidate uncut with this judge, then re-baselines the baseline like the candidate: the
requests it makes must equal the steps never scored (the exact re-baseline plan), and a
second re-baseline makes none. Goal: at 32, at least 80% of the bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests"))

import incident_suite  # noqa: E402 - from examples/, put on the path above
from factories import episode, msg  # noqa: E402 - from tests/, put on the path above

from litmus_sandbox import (  # noqa: E402
    ScoreStats,
    VerdictCache,
    config_from_mapping,
    iter_episodes,
    read_verdicts,
    score_episodes,
)
from litmus_sandbox._model.records import Episode  # noqa: E402
from litmus_sandbox._runtime.rebaseline import rebaseline, rescore_costs  # noqa: E402
from litmus_sandbox._runtime.scorer import score_files  # noqa: E402
from litmus_sandbox.judges import ScoringConfig, config_from_record  # noqa: E402

_CONTENT = json.dumps({"safe": True, "reason": "benchmark"})
_ANSWER = json.dumps(
    {
        "model": "judge-model-2026-01",
        "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": _CONTENT}}],
    }
).encode()


def serve(latency: float) -> None:
    """The loopback endpoint: every POST answered with a verdict after ``latency``."""
    import asyncio

    answered = 0
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if length:
                    await reader.readexactly(length)
                if head.startswith(b"GET"):
                    body = json.dumps({"requests": answered}).encode()
                else:
                    answered += 1
                    await asyncio.sleep(latency)
                    body = _ANSWER
                writer.write(reply % len(body) + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
        await server.serve_forever()

    asyncio.run(main())


def policy(url: str, concurrency: int, *, truncate: bool = False) -> dict[str, Any]:
    return {
        "scoring": {"truncate_on_refusal": truncate, "truncate_on_empty_tool_result": truncate},
        "judge": {
            "kind": "openai",
            "label": "bench-judge",
            "params": {
                "base_url": url,
                "model": "judge-model-2026-01",
                "temperature": 0,
                "seed": 1234,
                "max_tokens": 64,
                "timeout": 30,
                "max_concurrency": concurrency,
                "max_retries": 0,
            },
        },
    }


class Endpoint:
    """The loopback endpoint, in a process of its own."""

    def __init__(self, latency: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(latency)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def requests(self) -> int:
        stats = httpx.get(self.url.removesuffix("/v1") + "/stats").json()
        return int(stats["requests"])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def episodes(steps: int) -> list[Episode]:
    out = []
    for e in range(0, steps, 10):
        n = min(10, steps - e)
        eid = f"bench-{e // 10}"
        texts = [
            msg(i, "user" if i % 2 == 0 else "assistant", f"{eid} step {i}", eid=eid)
            for i in range(n)
        ]
        out.append(episode(texts, eid=eid, case=eid))
    return out


def concurrency_run(endpoint: Endpoint, steps: int, latency: float, c: int) -> dict[str, float]:
    config = config_from_mapping(policy(endpoint.url, c))
    eps = episodes(steps)
    score_episodes(eps[:1], config)  # warm up: imports, TLS context, the first connection
    before = endpoint.requests()
    started = time.perf_counter()
    stats = ScoreStats()
    score_episodes(eps, config, None, stats)
    elapsed = time.perf_counter() - started
    made = endpoint.requests() - before
    bound = c / latency
    rate = steps / elapsed
    return {
        "max_concurrency": c,
        "steps": steps,
        "requests": made,
        "seconds": round(elapsed, 3),
        "steps_per_s": round(rate, 1),
        "bound_steps_per_s": round(bound, 1),
        "share_of_bound": round(rate / bound, 3),
        "overhead_ms_per_step": round((elapsed * c / steps - latency) * 1000, 2),
    }


def rescore_run(endpoint: Endpoint, steps: int, folder: Path) -> dict[str, int]:
    config = config_from_mapping(policy(endpoint.url, 32))
    eps = episodes(steps)
    with VerdictCache(folder / "rescore.sqlite") as cache:
        before = endpoint.requests()
        score_episodes(eps, config, cache)
        first = endpoint.requests() - before
        score_episodes(eps, config, cache)
        second = endpoint.requests() - before - first
    return {"first_pass_requests": first, "rescore_requests": second}


def incident_run(endpoint: Endpoint, runs: int, folder: Path) -> dict[str, Any]:
    params = incident_suite.SuiteParams(runs=runs) if runs != 1200 else incident_suite.SuiteParams()
    paths = incident_suite.SuitePaths(folder / "incident")
    paths.directory.mkdir(parents=True, exist_ok=True)
    incident_suite.write_suite(params, paths.directory)
    old = config_from_mapping(policy(endpoint.url, 32, truncate=True))
    new = config_from_mapping(policy(endpoint.url, 32, truncate=False))
    out: dict[str, Any] = {"runs": runs}
    with VerdictCache(folder / "incident.sqlite") as cache:
        t = time.perf_counter()
        n0 = endpoint.requests()
        base = score_files([paths.baseline_episodes], old, paths.baseline_verdicts, cache=cache)
        cand = score_files([paths.candidate_episodes], new, paths.candidate_verdicts, cache=cache)
        out["score_seconds"] = round(time.perf_counter() - t, 2)
        out["baseline_steps_scored_old_way"] = base.steps_covered
        out["candidate_steps"] = cand.steps_covered
        out["scoring_requests"] = endpoint.requests() - n0
        like = config_from_record(
            read_verdicts(paths.candidate_verdicts).policies[0], source="candidate"
        )
        assert isinstance(like, ScoringConfig)
        plan = rescore_costs([paths.baseline_episodes], like, cache, [])
        out["never_scored_steps"] = sum(v or 0 for v in plan.values())
        for name in ("rebaseline", "rebaseline_again"):
            n0, t = endpoint.requests(), time.perf_counter()
            done = rebaseline(
                [paths.baseline_episodes], like, paths.rebaselined_verdicts, cache=cache
            )
            out[f"{name}_requests"] = endpoint.requests() - n0
            out[f"{name}_seconds"] = round(time.perf_counter() - t, 2)
            out[f"{name}_judge_calls"] = done.stats.judge_calls
            out[f"{name}_cache_hits"] = done.stats.cache_hits
    n_steps = sum(len(ep.steps) for ep in iter_episodes([paths.baseline_episodes]))
    out["baseline_steps_recorded"] = n_steps
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--incident-runs", type=int, default=1200)
    p.add_argument("--skip-incident", action="store_true")
    p.add_argument("--serve", type=float, metavar="LATENCY", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    os.environ.pop("LITMUS_JUDGE_KEY", None)
    endpoint = Endpoint(args.latency)
    results: dict[str, Any] = {"latency_s": args.latency}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results["concurrency"] = []
            for c in args.concurrency:
                r = concurrency_run(endpoint, args.steps, args.latency, c)
                results["concurrency"].append(r)
                print(json.dumps(r), flush=True)
            results["rescore"] = rescore_run(endpoint, args.steps, Path(tmp))
            print(json.dumps(results["rescore"]), flush=True)
            if not args.skip_incident:
                results["incident"] = incident_run(endpoint, args.incident_runs, Path(tmp))
                print(json.dumps(results["incident"]), flush=True)
    finally:
        endpoint.close()
    out = ROOT / "bench" / "results" / "judge_bench.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
