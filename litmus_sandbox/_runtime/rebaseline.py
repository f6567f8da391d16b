"""Re-baselining: score baseline recordings again like the candidate, and what it costs.

Theory of operation
-------------------
A case the gate routes to NEEDS_REBASELINE with remedy ``rescore_baseline`` was measured
differently on the two sides (another judge, other truncation flags ...), but its
baseline recording is complete: scoring it again under the candidate's scoring
configuration makes the two comparable, with no re-run.

* The configuration comes from the candidate's verdict stream (its one policy record,
  rebuilt by :func:`~litmus_sandbox.judges.config_from_record`), or from a policy file
  whose judge, refusal detector and truncation flags must then match that record
  (:func:`rebaseline_config`).
* :func:`rebaseline` re-scores every complete, untruncated baseline recording through
  the step-verdict cache and writes a new baseline verdict stream; recordings that were
  truncated or are incomplete cannot be re-scored and are listed for a re-run.
* :func:`rescore_costs` is the gate's re-baseline plan made exact: per case, the judge
  calls such a re-score would make, given what the cache already holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from litmus_sandbox._model.errors import ConfigError, LitmusError
from litmus_sandbox._model.records import Episode, PolicyRecord, Verdict
from litmus_sandbox._runtime.scorer import (
    Engine,
    Progress,
    ScoreStats,
    ScoringFailed,
    covered_keys,
    local_engine,
    scored,
)
from litmus_sandbox._store.step_cache import StepCache
from litmus_sandbox._store.streams import (
    ReadWarning,
    VerdictStream,
    iter_episodes,
    read_verdicts,
    write_verdicts,
)
from litmus_sandbox.judges import ScoringConfig, config_from_record, load_policy

Paths = Iterable[str | os.PathLike[str]]


def single_policy(streams: Sequence[VerdictStream]) -> PolicyRecord | None:
    """The one scoring policy a set of verdict streams was produced with, or None."""
    records = {
        (r.judge, r.refusal_detector, repr(r.policy.get("scoring"))): r
        for s in streams
        for r in s.policies
    }
    if len(records) == 1:
        return next(iter(records.values()))
    return None


def fingerprint_problems(config: ScoringConfig, record: PolicyRecord) -> list[str]:
    """How ``config`` would score differently from the verdicts ``record`` heads (empty
    when it scores the same: same judge, refusal detector and truncation flags)."""
    problems = []
    if config.judge.fingerprint != record.judge:
        problems.append(f"judge {config.judge.fingerprint} vs candidate's {record.judge}")
    if config.detector.fingerprint != record.refusal_detector:
        problems.append(
            f"refusal detector {config.detector.fingerprint} vs candidate's {record.refusal_detector}"
        )
    scoring = record.policy.get("scoring", {})
    problems.extend(
        f"{flag} {getattr(config.policy, flag)} vs candidate's {scoring.get(flag)}"
        for flag in ("truncate_on_refusal", "truncate_on_empty_tool_result")
        if getattr(config.policy, flag) != scoring.get(flag)
    )
    return problems


def rebaseline_config(
    *, like: str | None = None, policy: str | None = None
) -> tuple[ScoringConfig, PolicyRecord | None]:
    """The configuration to re-score with, and the candidate's policy record (None
    without ``like``: nothing to check ``policy`` against).

    Args:
        like: the candidate's verdict stream; its policy record is rebuilt.
        policy: a policy file to score with instead; with ``like`` it must match.

    Raises:
        LitmusError: neither is given; ``like`` has no single policy record; ``policy``
            does not match it; the record cannot be rebuilt (ConfigError).
    """
    if like is None and policy is None:
        raise ConfigError("rebaseline needs the candidate's verdicts or a policy file")
    record = None
    if like is not None:
        candidate = read_verdicts(like)
        record = single_policy([candidate])
        if record is None:
            raise LitmusError(
                f"{like}: "
                + (
                    "has no policy record (legacy verdicts?); pass --policy"
                    if not candidate.policies
                    else "mixes several scoring policies"
                )
            )
    if policy is not None:
        config = load_policy(policy)
        if record is not None and (problems := fingerprint_problems(config, record)):
            raise LitmusError(
                f"{policy}: does not match the candidate's scoring: {'; '.join(problems)}"
            )
        return config, record
    assert like is not None  # neither given was refused above
    assert record is not None  # like without a single record was refused above
    return config_from_record(record, source=like), record


@dataclass
class Rebaselined:
    """What :func:`rebaseline` did: the verdicts written, and the cases it could not
    re-score (case id, why), which need a re-run of the baseline."""

    stats: ScoreStats
    verdicts: list[Verdict] = field(default_factory=list)
    rerun: list[tuple[str, str]] = field(default_factory=list)


def rebaseline(
    episodes: Paths,
    config: ScoringConfig,
    out: str | os.PathLike[str],
    *,
    cache: StepCache | None = None,
    progress: Progress | None = None,
    engine: Engine | None = None,
) -> Rebaselined:
    """Re-score the complete baseline recordings in ``episodes`` under ``config`` and write
    them to ``out`` as a new baseline verdict stream (headed by ``config``'s record);
    ``engine`` scores them elsewhere (through its own cache, not ``cache``).

    Raises:
        RecordDecodeError: an unreadable episode stream (nothing is written).
        ScoringFailed: the judge gave no verdict for some steps; the other episodes were
            written, and ``result`` holds the :class:`Rebaselined`.
    """
    result = Rebaselined(stats=ScoreStats())

    def complete() -> Iterator[Episode]:
        for ep in iter_episodes(episodes, result.stats.warnings):
            if ep.header.recorder.truncated:
                result.rerun.append((ep.case_id, "the recording itself was truncated"))
            elif not ep.complete:
                result.rerun.append((ep.case_id, "the recording is incomplete"))
            else:
                yield ep

    score = engine if engine is not None else local_engine(cache)
    result.verdicts = scored(score(complete(), config, result.stats, progress))
    write_verdicts(out, config.record(), result.verdicts)
    if result.stats.failures:
        raise ScoringFailed(result.stats, result)
    return result


def plan_config(candidate: Sequence[VerdictStream]) -> tuple[ScoringConfig | None, str | None]:
    """The candidate's scoring configuration, for an exact re-baseline plan, or None and
    why the plan's counts stay upper bounds (None, None: no single policy record)."""
    record = single_policy(candidate)
    if record is None:
        return None, None
    try:
        return config_from_record(record, source="candidate verdicts"), None
    except LitmusError as exc:
        return None, f"re-baseline plan counts are upper bounds: {exc}"


def rescore_costs(
    baseline_episodes: Paths,
    config: ScoringConfig | None,
    cache: StepCache | None,
    warnings: list[ReadWarning],
) -> dict[str, int | None]:
    """Judge calls a re-score of each complete baseline recording would make, per case
    (None for every case when there is no ``config`` to count with).

    Steps ``cache`` already holds for that judge, in that context, cost nothing; without a
    cache every distinct covered step is a call.
    """
    episodes = [
        ep
        for ep in iter_episodes(baseline_episodes, warnings)
        if ep.complete and not ep.header.recorder.truncated
    ]
    costs: dict[str, int | None] = {}
    for ep in episodes:
        if config is None:
            costs[ep.case_id] = None
            continue
        keys = covered_keys(ep, config)
        n = cache.missing(keys) if cache is not None else len(set(keys))
        costs[ep.case_id] = n + (costs.get(ep.case_id) or 0)
    return costs
