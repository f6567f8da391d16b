"""One episode being scored: which steps the cache answers, which the judge must, the verdict.

Theory of operation
-------------------
An :class:`EpisodeJob` is made when its episode is read: the truncation view fixes the
covered steps, and the step-verdict cache answers every step that judge already judged
in that context. The steps left are *pending*; a driver (``scorer.py``: inline, or
concurrent tasks) asks the judge about each and settles it, either with a judgment
(:meth:`EpisodeJob.settle`) or with a :class:`StepFailure` (:meth:`EpisodeJob.fail`).
Once every pending step is settled, :meth:`EpisodeJob.finish` builds the verdict - or
none, when any step failed: no guess, the case gets no verdict. The fresh judgments are
stored in the cache by the driver: the sync one passes the cache to ``finish`` (one
transaction per episode), the concurrent run stores each as it arrives and passes none.
A failure is never stored, nor a fallback's judgment under the primary judge's key.

A step verdict's provenance is its judgment's: the attempts it took (kept in the cache,
so a re-score gives the same verdict), whether the fallback judge gave it, the model that
answered. The trajectory's ``judge_retries`` is the sum of its steps' retries.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import msgspec

from litmus_sandbox._core.scoring import Judge, StepJudgment, build_verdict, coverage, step_keys
from litmus_sandbox._model.records import Episode, StepVerdict, ToolCallStep, Verdict
from litmus_sandbox._store.step_cache import CacheKey, StepCache
from litmus_sandbox._store.streams import ReadWarning
from litmus_sandbox.judges import ScoringConfig
from litmus_sandbox.judges._failure import JudgeFailure, failure_attempts, failure_class


@dataclass(frozen=True)
class StepFailure:
    """A covered step the judge gave no verdict for, and why."""

    episode_id: str
    case_id: str
    index: int
    #: The failure class (``litmus_sandbox.judges.FAILURE_CLASSES``).
    failure: str
    message: str
    attempts: int


@dataclass
class ScoreStats:
    """What a scoring pass cost, and what it could not score."""

    episodes: int = 0
    steps_covered: int = 0
    judge_calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    fallbacks: int = 0
    incomplete: int = 0
    warnings: list[ReadWarning] = field(default_factory=list)
    #: Steps with no verdict (their episodes got none either).
    failures: list[StepFailure] = field(default_factory=list)
    #: Episodes left without a verdict because a step failed.
    failed_episodes: int = 0

    def failure_counts(self) -> dict[str, int]:
        """Failed steps per failure class, most frequent first."""
        return dict(Counter(f.failure for f in self.failures).most_common())


class EpisodeJob:
    """The scoring of one episode under one configuration (see the module docstring)."""

    def __init__(self, episode: Episode, config: ScoringConfig, cache: StepCache | None) -> None:
        self.episode = episode
        self.config = config
        n = coverage(episode.steps, config.policy, config.detector)
        fp = config.judge.fingerprint
        self.keys: list[CacheKey] = [(fp, h, ctx) for h, ctx in step_keys(episode.steps[:n])]
        self.judgments: list[StepJudgment | None] = (
            cache.get_many(self.keys) if cache is not None else [None] * len(self.keys)
        )
        self.from_fallback = [False] * n
        self.pending = [i for i, j in enumerate(self.judgments) if j is None]
        self.cache_hits = n - len(self.pending)
        self.failures: list[StepFailure] = []
        #: Pending steps another episode of the run judged (see :meth:`settle`).
        self.shared = 0
        self._fresh: list[tuple[CacheKey, StepJudgment]] = []
        self._open = len(self.pending)

    @property
    def done(self) -> bool:
        """Every pending step is settled."""
        return self._open == 0

    def settle(
        self, i: int, judgment: StepJudgment, *, fallback: bool = False, shared: bool = False
    ) -> None:
        """Step ``i`` was judged (by the fallback judge, when ``fallback``; for another
        episode of the same run, the same step in the same context, when ``shared``: that
        counts as served from the cache, as it is when the episodes are scored in turn)."""
        self.judgments[i] = judgment
        self.from_fallback[i] = fallback
        if shared:
            self.shared += 1
        elif not fallback:  # the cache is keyed by the judge's fingerprint, not the fallback's
            self._fresh.append((self.keys[i], judgment))
        self._open -= 1

    def settle_asked(
        self, i: int, asked: Asked, fallback: Asked | None, *, shared: bool = False
    ) -> None:
        """Settle step ``i`` from what the judge gave and, when it failed, what the
        fallback judge gave (``fallback`` None: there is none)."""
        if asked.judgment is not None:
            self.settle(i, asked.judgment, shared=shared)
            return
        error = asked.error
        assert error is not None  # no judgment without an error
        if fallback is None:
            message = describe_error(error)
            self.fail(i, failure_class(error), message, asked.attempts)
        elif fallback.judgment is not None:
            judgment = with_attempts(fallback.judgment, asked.attempts)
            self.settle(i, judgment, fallback=True, shared=shared)
        else:
            message = f"judge and fallback judge failed: {error!r}; {fallback.error!r}"
            self.fail(i, failure_class(error), message, asked.attempts)

    def fail(self, i: int, failure: str, message: str, attempts: int) -> None:
        """Step ``i`` has no verdict."""
        ep = self.episode
        self.failures.append(StepFailure(ep.episode_id, ep.case_id, i, failure, message, attempts))
        self._open -= 1

    def finish(self, cache: StepCache | None, stats: ScoreStats) -> Verdict | None:
        """Store the fresh judgments in ``cache`` (None: the driver stored them as they
        came); the verdict, or None when a step failed."""
        if cache is not None:
            cache.put_many(self._fresh)  # one transaction per episode; only judgments
        ep = self.episode
        stats.cache_hits += self.cache_hits + self.shared
        stats.judge_calls += len(self.pending) - self.shared
        stats.fallbacks += sum(self.from_fallback)
        stats.episodes += 1
        stats.incomplete += not ep.complete
        stats.steps_covered += len(self.keys)
        if self.failures:
            self.failures.sort(key=lambda f: f.index)
            stats.failures.extend(self.failures)
            stats.failed_episodes += 1
            return None
        verdicts = [self._step_verdict(i) for i in range(len(self.keys))]
        fresh = set(self.pending)
        stats.retries += sum(v.attempts - 1 for i, v in enumerate(verdicts) if i in fresh)
        return build_verdict(
            ep,
            policy=self.config.policy,
            detector=self.config.detector,
            judge_fingerprint=self.config.judge.fingerprint,
            judge_label=self.config.judge.label,
            step_verdicts=verdicts,
            judge_retries=sum(v.attempts - 1 for v in verdicts),
            fallback_judge=any(self.from_fallback),
        )

    def _step_verdict(self, i: int) -> StepVerdict:
        judgment = self.judgments[i]
        assert judgment is not None  # finish() builds verdicts only when none failed
        step = self.episode.steps[i]
        contradictions: tuple[str, ...] = ()
        forbidden = self.config.forbidden_findings
        if judgment.safe and isinstance(step, ToolCallStep) and forbidden:
            contradictions = tuple(sorted({f.code for f in step.findings if f.code in forbidden}))
        return StepVerdict(
            index=step.index,
            safe=judgment.safe,
            content_sha256=self.keys[i][1],
            evidence=judgment.evidence,
            rules=judgment.rules,
            reason=judgment.reason,
            contradictions=contradictions,
            attempts=judgment.attempts,
            retried=judgment.attempts > 1,
            fallback=self.from_fallback[i],
            model=judgment.model,
            system_fingerprint=judgment.system_fingerprint,
        )


@dataclass(frozen=True)
class Asked:
    """What asking a judge about one step gave: a judgment, or the last error; and how
    many times it was asked in all (its own re-sends included)."""

    judgment: StepJudgment | None
    attempts: int
    error: Exception | None = None


def ask_inline(job: EpisodeJob, i: int, judge: Judge, tries: int) -> Asked:
    """Ask an in-process judge about step ``i`` of ``job``, up to ``tries`` times."""
    step, context = job.episode.steps[i], job.episode.steps[:i]
    attempts = 0
    error: Exception | None = None
    for _ in range(tries):
        try:
            judgment = judge.judge_step(step, context)
        except Exception as exc:  # any judge failure is retried, then reported
            attempts += failure_attempts(exc)
            error = exc
            continue
        attempts += judgment.attempts
        return Asked(with_attempts(judgment, attempts), attempts)
    return Asked(None, attempts, error)


def describe_error(error: Exception) -> str:
    """A judge's error as one line (a :class:`JudgeFailure` says what it is itself)."""
    return str(error) if isinstance(error, JudgeFailure) else f"{type(error).__name__}: {error}"


def with_attempts(judgment: StepJudgment, attempts: int) -> StepJudgment:
    """``judgment`` recording ``attempts`` in all (the judge's own re-sends included)."""
    if judgment.attempts == attempts:
        return judgment
    return msgspec.structs.replace(judgment, attempts=attempts)
