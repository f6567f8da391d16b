"""A concurrent scoring run inside an event loop, on asyncio and on trio: verdicts in the
episodes' order, the concurrency bound, Retry-After honoured by the backend's sleep, a
step shared by several episodes asked once, steps stored as they are judged, two runs
sharing a cache file, and a cache failure as one error."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest
from factories import episode, msg
from judge_endpoint import Reply, Request, running, verdict
from test_openai_judge import CANARY, STEPS, config, gaps

from litmus_sandbox import ScoreStats, VerdictCache
from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import CacheError
from litmus_sandbox._model.records import Verdict
from litmus_sandbox._runtime.scoring_job import EpisodeJob
from litmus_sandbox._runtime.scoring_run import ScoringRun
from litmus_sandbox._store.cache import CacheKey

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITMUS_JUDGE_KEY", CANARY)


async def test_verdicts_come_out_in_order_within_the_concurrency_bound() -> None:
    eps = [
        episode([msg(0, "user", f"task {i}"), msg(1, "assistant", "ok")], eid=f"e{i}", case=f"c{i}")
        for i in range(10)
    ]
    out: list[Verdict | None] = []

    def take(v: Verdict | None, job: EpisodeJob) -> None:
        out.append(v)

    stats = ScoreStats()
    with running(delay=0.05) as endpoint:
        cfg = config(endpoint.url, max_concurrency=3)
        async with ScoringRun(cfg, None, stats, on_verdict=take) as run:
            for ep in eps:
                await run.submit(ep)
    assert [v.case_id if v else None for v in out] == [f"c{i}" for i in range(10)]
    assert endpoint.most_in_flight == 3
    assert (stats.judge_calls, stats.episodes) == (20, 10)


async def test_retry_after_is_honoured_on_this_backend() -> None:
    def answer(request: Request) -> Reply:
        if len(endpoint.requests) == 1:
            return Reply(status=429, headers={"retry-after-ms": "200"})
        return verdict(True)

    out: list[Verdict | None] = []
    with running(answer) as endpoint:
        async with ScoringRun(
            config(endpoint.url), None, ScoreStats(), on_verdict=lambda v, j: out.append(v)
        ) as run:
            await run.submit(episode(STEPS[:1]))
    assert out[0] is not None
    assert out[0].steps[0].attempts == 2
    assert gaps(endpoint.requests)[0] >= 0.2


async def test_a_step_several_episodes_share_is_asked_once() -> None:
    """The same step in the same context, in episodes scored together: one request, the
    others served as from the cache (as scoring in turn would)."""
    eps = [episode(STEPS, eid=f"e{i}", case=f"c{i}") for i in range(5)]
    stats = ScoreStats()
    out: list[Verdict | None] = []
    with running(delay=0.05) as endpoint:
        async with ScoringRun(
            config(endpoint.url), VerdictCache(), stats, on_verdict=lambda v, j: out.append(v)
        ) as run:
            for ep in eps:
                await run.submit(ep)
    assert len(endpoint.requests) == len(STEPS)
    assert (stats.judge_calls, stats.cache_hits) == (len(STEPS), 4 * len(STEPS))
    first = out[0]
    assert first is not None
    assert all(v is not None and v.steps == first.steps for v in out)


async def test_two_runs_sharing_a_cache_file_ask_each_step_once(tmp_path: Path) -> None:
    """Two scorers (two cache objects, as two processes would have) over the same
    episodes: each step is claimed by one and waited for by the other."""
    eps = [
        episode([msg(0, "user", f"task {i}"), msg(1, "assistant", f"answer {i}")], eid=f"e{i}")
        for i in range(12)
    ]
    outs: list[list[Verdict | None]] = [[], []]
    with running(delay=0.03) as endpoint:
        cfg = config(endpoint.url, max_concurrency=4)

        async def scorer(n: int) -> None:
            with VerdictCache(tmp_path / "c.sqlite") as cache:
                async with ScoringRun(
                    cfg, cache, ScoreStats(), on_verdict=lambda v, j: outs[n].append(v)
                ) as run:
                    for ep in eps:
                        await run.submit(ep)

        async with anyio.create_task_group() as tg:
            tg.start_soon(scorer, 0)
            tg.start_soon(scorer, 1)
    assert len(endpoint.requests) == 24
    assert outs[0] == outs[1]
    assert all(v is not None for v in outs[0])
    with VerdictCache(tmp_path / "c.sqlite") as cache:
        assert (len(cache), cache.claims()) == (24, [])


async def test_judged_steps_are_stored_while_the_first_episode_still_waits(
    tmp_path: Path,
) -> None:
    """Head of line: the first step's answer is held; every other step is in the cache
    within about 0.1 s of its answer, and verdicts still come out in order."""
    hold = threading.Event()

    def answer(request: Request) -> Reply:
        if "task 0" in request.step_text:
            hold.wait(30)
        return verdict(True)

    eps = [
        episode(
            [msg(0, "user", f"task {i}"), msg(1, "assistant", f"ok {i}")], eid=f"e{i}", case=f"c{i}"
        )
        for i in range(8)
    ]
    out: list[Verdict | None] = []
    with running(answer) as endpoint, VerdictCache(tmp_path / "c.sqlite") as cache:
        async with ScoringRun(
            config(endpoint.url, max_concurrency=4),
            cache,
            ScoreStats(),
            on_verdict=lambda v, j: out.append(v),
        ) as run:
            for ep in eps:
                await run.submit(ep)
            with anyio.fail_after(20):
                # ASYNC110: the condition is the cache file's rows; no event for it.
                while len(cache) < 15:  # noqa: ASYNC110 - all but the held one
                    await anyio.sleep(0.02)
            assert out == []  # the output waits for order; the cache does not
            hold.set()
    assert [v.case_id if v else None for v in out] == [f"c{i}" for i in range(8)]
    assert len(endpoint.requests) == 16


async def test_a_cache_that_fails_in_a_run_is_that_one_error(tmp_path: Path) -> None:
    class FullDisk(VerdictCache):
        def put_many(self, items: Iterable[tuple[CacheKey, StepJudgment]]) -> None:
            raise CacheError(f"{self.path}: verdict cache: storing failed: disk is full")

    with (
        running() as endpoint,
        FullDisk(tmp_path / "c.sqlite") as cache,
        pytest.raises(CacheError, match="storing failed"),
    ):
        async with ScoringRun(config(endpoint.url), cache, ScoreStats()) as run:
            await run.submit(episode(STEPS))
