"""The scorer: episodes in, verdicts out, through the step-verdict cache.

The I/O shell around the sans-io scoring core: it applies the truncation view, asks the
judge about each covered step (from the cache when that judge already judged that step
in that context), retries a failing judge, falls back when configured, and writes a
self-describing verdict stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from litmus_sandbox._core.scoring import Judge, StepJudgment, build_verdict, coverage, step_keys
from litmus_sandbox._model.errors import JudgeError
from litmus_sandbox._model.records import Episode, StepVerdict, ToolCallStep, Verdict
from litmus_sandbox._store.cache import CacheKey, VerdictCache
from litmus_sandbox._store.streams import ReadWarning, iter_episodes, write_verdicts
from litmus_sandbox.judges import ScoringConfig


@dataclass
class ScoreStats:
    """What a scoring pass cost."""

    episodes: int = 0
    steps_covered: int = 0
    judge_calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    fallbacks: int = 0
    incomplete: int = 0
    warnings: list[ReadWarning] = field(default_factory=list)


def covered_keys(episode: Episode, config: ScoringConfig) -> list[CacheKey]:
    """The cache keys a score of ``episode`` under ``config`` would look up."""
    n = coverage(episode.steps, config.policy, config.detector)
    fp = config.judge.fingerprint
    return [(fp, h, ctx) for h, ctx in step_keys(episode.steps[:n])]


def _ask(
    judge: Judge, episode: Episode, i: int, attempts: int
) -> tuple[StepJudgment | None, int, Exception | None]:
    last: Exception | None = None
    for attempt in range(attempts):
        try:
            return judge.judge_step(episode.steps[i], episode.steps[:i]), attempt, None
        except Exception as exc:  # any judge failure is retried, then reported
            last = exc
    return None, attempts - 1, last


def score_episode(
    episode: Episode,
    config: ScoringConfig,
    cache: VerdictCache | None = None,
    stats: ScoreStats | None = None,
) -> Verdict:
    """Score one episode under ``config``.

    Raises:
        JudgeError: the judge failed on a step after its retries, with no fallback (or the
            fallback failed too). Nothing is cached for that step.
    """
    stats = stats if stats is not None else ScoreStats()
    n = coverage(episode.steps, config.policy, config.detector)
    keys = step_keys(episode.steps[:n])
    fp = config.judge.fingerprint
    forbidden = frozenset(config.forbidden_findings)
    verdicts: list[StepVerdict] = []
    fresh: list[tuple[CacheKey, StepJudgment]] = []
    retries_used, used_fallback = 0, False
    try:
        for i, (content, ctx) in enumerate(keys):
            key = (fp, content, ctx)
            judgment = cache.get(key) if cache is not None else None
            if judgment is not None:
                stats.cache_hits += 1
            else:
                stats.judge_calls += 1
                judgment, retried, error = _ask(config.judge, episode, i, 1 + config.retries)
                retries_used += retried
                if judgment is not None:
                    fresh.append((key, judgment))
                elif config.fallback is not None:
                    judgment, _, fb_error = _ask(config.fallback, episode, i, 1)
                    used_fallback = True
                    stats.fallbacks += 1
                    if judgment is None:
                        raise JudgeError(
                            f"episode {episode.episode_id!r} step {i}: judge and fallback judge "
                            f"failed: {error!r}; {fb_error!r}"
                        ) from fb_error
                else:
                    raise JudgeError(
                        f"episode {episode.episode_id!r} step {i}: judge {config.judge.label!r} "
                        f"failed after {1 + config.retries} attempt(s): {type(error).__name__}: {error}"
                    ) from error
            step = episode.steps[i]
            contradictions: tuple[str, ...] = ()
            if judgment.safe and isinstance(step, ToolCallStep) and forbidden:
                contradictions = tuple(
                    sorted({f.code for f in step.findings if f.code in forbidden})
                )
            verdicts.append(
                StepVerdict(
                    index=step.index,
                    safe=judgment.safe,
                    content_sha256=content,
                    evidence=judgment.evidence,
                    rules=judgment.rules,
                    reason=judgment.reason,
                    contradictions=contradictions,
                )
            )
    finally:
        if cache is not None:
            cache.put_many(fresh)  # one transaction per episode; only successful judgments
    stats.retries += retries_used
    stats.episodes += 1
    stats.incomplete += not episode.complete
    stats.steps_covered += n
    return build_verdict(
        episode,
        policy=config.policy,
        detector=config.detector,
        judge_fingerprint=fp,
        judge_label=config.judge.label,
        step_verdicts=verdicts,
        judge_retries=retries_used,
        fallback_judge=used_fallback,
    )


def score_episodes(
    episodes: Iterable[Episode],
    config: ScoringConfig,
    cache: VerdictCache | None = None,
    stats: ScoreStats | None = None,
) -> list[Verdict]:
    """Score every episode, in order."""
    return [score_episode(ep, config, cache, stats) for ep in episodes]


def score_files(
    paths: Iterable[str | os.PathLike[str]],
    config: ScoringConfig,
    out: str | os.PathLike[str],
    *,
    cache: VerdictCache | None = None,
) -> ScoreStats:
    """Score the episodes in ``paths`` and write a verdict stream to ``out``.

    The output is written only once every episode scored, so a failure leaves no
    half-written verdict file behind.
    """
    stats = ScoreStats()
    verdicts = score_episodes(iter_episodes(paths, stats.warnings), config, cache, stats)
    write_verdicts(out, config.record(), verdicts)
    return stats
