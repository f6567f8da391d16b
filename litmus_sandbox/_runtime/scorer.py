"""The scorer: episodes in, verdicts out, through the step-verdict cache.

Theory of operation
-------------------
The I/O shell around the sans-io scoring core. Each episode becomes an
:class:`~litmus_sandbox._runtime.scoring_job.EpisodeJob` (truncation view, cache look-ups);
its pending steps are asked of the judge, re-asked ``retries`` times when it fails, then
of the fallback judge when one is configured; what the judge judged is cached (by the
concurrent driver as each answer arrives, by the inline one as each episode ends) and the
job builds the verdict, or none when a step got no verdict (no guess).

Two drivers ask the judge:

* judges that answer in-process (``rules``, ``python``) are asked inline, step after step
  in order, with no event loop (:func:`score_episode` stays a plain function call);
* judges with a session (``openai``) are asked from concurrent tasks, at most
  ``max_concurrency`` at a time (an anyio ``CapacityLimiter``), steps of later episodes
  starting while earlier ones wait (:class:`ScoringRun`, ``scoring_run.py``). Verdicts come
  out in the episodes' order either way; the sync functions here run it with ``anyio.run``.

Both run in this process: :func:`local_engine`. Another :class:`Engine` scores the same
episodes elsewhere and hands back the same verdicts in the same order
(``ray_engine.RayEngine``: shards of episodes as Ray tasks, each scored as here).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import anyio

from litmus_sandbox._model.errors import JudgeError
from litmus_sandbox._model.records import Episode, Verdict
from litmus_sandbox._runtime.scoring_job import EpisodeJob, ScoreStats, StepFailure, ask_inline
from litmus_sandbox._store.step_cache import CacheKey, StepCache
from litmus_sandbox._store.streams import iter_episodes, write_verdicts
from litmus_sandbox.judges import Judge, ScoringConfig, is_session_judge

__all__ = [
    "Engine",
    "Progress",
    "ScoreStats",
    "ScoringFailed",
    "StepFailure",
    "covered_keys",
    "local_engine",
    "needs_event_loop",
    "score_all",
    "score_episode",
    "score_episodes",
    "score_files",
    "scored",
]

#: Told after each episode is settled (the CLI's progress bar).
Progress = Callable[[ScoreStats], None]


class Engine(Protocol):
    """Where episodes are scored: every episode's verdict in the episodes' order (None
    for an episode a step of which got no verdict), with the costs and the failures added
    to ``stats`` and ``progress`` told as steps are settled."""

    def __call__(
        self,
        episodes: Iterable[Episode],
        config: ScoringConfig,
        stats: ScoreStats,
        progress: Progress | None,
    ) -> list[Verdict | None]: ...


def local_engine(cache: StepCache | None) -> Engine:
    """Scoring in this process (:func:`score_all`), through ``cache``."""

    def score(
        episodes: Iterable[Episode],
        config: ScoringConfig,
        stats: ScoreStats,
        progress: Progress | None,
    ) -> list[Verdict | None]:
        return score_all(episodes, config, cache, stats, progress)[0]

    return score


class ScoringFailed(JudgeError):
    """The judge gave no verdict for some steps; the other episodes were scored.

    Attributes:
        stats: the pass, with ``failures`` (one per step) and ``failure_counts()``.
        result: what the call would have returned (e.g. a re-baseline's result).
    """

    def __init__(self, stats: ScoreStats, result: object = None) -> None:
        counts = ", ".join(f"{n} {cls}" for cls, n in stats.failure_counts().items())
        super().__init__(
            f"the judge gave no verdict for {len(stats.failures)} step(s) of "
            f"{stats.failed_episodes} episode(s) ({counts}); those cases have no verdict"
        )
        self.stats = stats
        self.result = result


def covered_keys(episode: Episode, config: ScoringConfig) -> list[CacheKey]:
    """The cache keys a score of ``episode`` under ``config`` would look up."""
    return EpisodeJob(episode, config, None).keys


def needs_event_loop(config: ScoringConfig) -> bool:
    """Whether ``config``'s judge (or fallback) is asked through a session."""
    return is_session_judge(config.judge) or is_session_judge(config.fallback)


def step_error(job: EpisodeJob, f: StepFailure, judge: Judge) -> str:
    """The one-line error of a failed step, as :func:`score_episode` raises it."""
    return (
        f"episode {job.episode.episode_id!r} step {f.index}: judge {judge.label!r} "
        f"failed after {f.attempts} attempt(s): {f.message}"
    )


def _score_inline(
    episode: Episode, config: ScoringConfig, cache: StepCache | None, stats: ScoreStats
) -> tuple[Verdict | None, EpisodeJob]:
    job = EpisodeJob(episode, config, cache)
    for i in job.pending:
        asked = ask_inline(job, i, config.judge, 1 + config.retries)
        fallback = None
        if asked.error is not None and config.fallback is not None:
            fallback = ask_inline(job, i, config.fallback, 1)
        job.settle_asked(i, asked, fallback)
    return job.finish(cache, stats), job


def score_episode(
    episode: Episode,
    config: ScoringConfig,
    cache: StepCache | None = None,
    stats: ScoreStats | None = None,
) -> Verdict:
    """Score one episode under ``config``.

    Raises:
        JudgeError: the judge failed on a step after its retries, with no fallback (or the
            fallback failed too). Nothing is cached for that step.
    """
    return score_episodes([episode], config, cache, stats)[0]


def score_episodes(
    episodes: Iterable[Episode],
    config: ScoringConfig,
    cache: StepCache | None = None,
    stats: ScoreStats | None = None,
    *,
    progress: Progress | None = None,
) -> list[Verdict]:
    """Score every episode, verdicts in the episodes' order (concurrently for a judge
    with a session; not from inside a running event loop then).

    Raises:
        JudgeError: a step got no verdict (the first such step is named; every episode
            was still scored and every judgment made was cached).
    """
    stats = stats if stats is not None else ScoreStats()
    verdicts, failed = score_all(episodes, config, cache, stats, progress)
    if failed:
        raise JudgeError(step_error(failed[0], failed[0].failures[0], config.judge))
    return scored(verdicts)


def score_all(
    episodes: Iterable[Episode],
    config: ScoringConfig,
    cache: StepCache | None,
    stats: ScoreStats,
    progress: Progress | None,
) -> tuple[list[Verdict | None], list[EpisodeJob]]:
    """Every episode's verdict (None when a step failed), and the jobs that failed: the
    driver for all the functions here."""
    out: list[Verdict | None] = []
    failed: list[EpisodeJob] = []

    def collect(verdict: Verdict | None, job: EpisodeJob) -> None:
        out.append(verdict)
        if job.failures:
            failed.append(job)
        if progress is not None:
            progress(stats)

    if needs_event_loop(config):
        from litmus_sandbox._runtime.scoring_run import ScoringRun

        async def run() -> None:
            async with ScoringRun(config, cache, stats, on_verdict=collect) as scoring:
                for episode in episodes:
                    await scoring.submit(episode)

        anyio.run(run)
    else:
        for episode in episodes:
            collect(*_score_inline(episode, config, cache, stats))
    return out, failed


def score_files(
    paths: Iterable[str | os.PathLike[str]],
    config: ScoringConfig,
    out: str | os.PathLike[str],
    *,
    cache: StepCache | None = None,
    progress: Progress | None = None,
    engine: Engine | None = None,
) -> ScoreStats:
    """Score the episodes in ``paths`` and write a verdict stream to ``out``.

    The output is written only once every episode was scored, so it is never half
    written. An episode with a step the judge gave no verdict for gets no verdict: the
    others are written, then :class:`ScoringFailed` says what failed. ``engine`` scores
    them elsewhere (through its own cache; ``cache`` is then not used).

    Raises:
        ScoringFailed: some steps got no verdict (a :class:`JudgeError`).
        RecordDecodeError: an unreadable episode stream (nothing is written).
    """
    stats = ScoreStats()
    score = engine if engine is not None else local_engine(cache)
    verdicts = score(iter_episodes(paths, stats.warnings), config, stats, progress)
    write_verdicts(out, config.record(), scored(verdicts))
    if stats.failures:
        raise ScoringFailed(stats)
    return stats


def scored(verdicts: Sequence[Verdict | None]) -> list[Verdict]:
    """The verdicts of the episodes that got one."""
    return [v for v in verdicts if v is not None]
