"""Scoring episodes as the sandbox records them: record, score and gate in one flow.

Theory of operation
-------------------
With ``Sandbox(..., scoring=POLICY, verdicts=PATH)`` the sandbox writes its episode stream
through a :class:`TappedStream`, which also keeps every record of an open episode as the
file holds it. When an episode ends, the sandbox hands it over (:meth:`LiveScoring.ended`)
and it is scored in the background by one :class:`~litmus_sandbox._runtime.scoring_run.
ScoringRun` - under the judge's concurrency limit, through the step-verdict cache - while
the agent goes on. Each verdict is appended to PATH as soon as it is built (the policy
record first, unless the file already holds this policy's), so a crash leaves the
verdicts of the episodes already scored; the rest, scored later from the episode stream
under the same policy and cache, come out the same, free for the steps already judged.

Closing waits for the scores still pending (with a progress bar on a terminal). An
episode a step of which got no verdict gets none (no guess): :meth:`LiveScoring.failure`
is then the :class:`~litmus_sandbox._runtime.scorer.ScoringFailed` with the counts, which
the sandbox raises once it is closed.
"""

from __future__ import annotations

import os
import threading
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc
import msgspec

from litmus_sandbox._core.redaction import DEFAULT_REDACTION, Redaction
from litmus_sandbox._model.codec import as_written
from litmus_sandbox._model.records import (
    Episode,
    EpisodeEnd,
    EpisodeHeader,
    Step,
    Verdict,
)
from litmus_sandbox._runtime.progress_bar import JudgingBar, on_terminal
from litmus_sandbox._runtime.scorer import ScoringFailed, covered_keys
from litmus_sandbox._runtime.scoring_job import EpisodeJob, ScoreStats
from litmus_sandbox._runtime.scoring_run import ScoringRun
from litmus_sandbox._runtime.stream import EpisodeStream
from litmus_sandbox._store.step_cache import StepCache, local_files, open_cache
from litmus_sandbox._store.streams import JsonlWriter, read_verdicts
from litmus_sandbox.judges import ScoringConfig, load_policy


class TappedStream(EpisodeStream):
    """An episode stream that also keeps the records of each open episode (as written)."""

    def __init__(
        self,
        path: Path,
        *,
        fsync: bool = False,
        cap: int | None = None,
        redaction: Redaction = DEFAULT_REDACTION,
    ) -> None:
        super().__init__(path, fsync=fsync, cap=cap, redaction=redaction)
        self._open: dict[str, list[msgspec.Struct]] = {}
        self._lock = threading.Lock()  # written from worker threads too (fsync)

    def write_now(self, record: msgspec.Struct) -> msgspec.Struct:
        # As written: arguments by repr, or capped; stand-ins for text that is not valid
        # Unicode and for bytes (scored as a reader of the file scores them).
        record = as_written(super().write_now(record))
        episode_id = getattr(record, "episode_id", None)
        if isinstance(episode_id, str):
            with self._lock:
                self._open.setdefault(episode_id, []).append(record)
        return record

    def take(self, episode_id: str) -> Episode | None:
        """The ended episode ``episode_id`` as the stream holds it (None if never begun)."""
        with self._lock:
            records = self._open.pop(episode_id, [])
        header = next((r for r in records if isinstance(r, EpisodeHeader)), None)
        if header is None:
            return None
        steps: list[Step] = [r for r in records if isinstance(r, Step)]
        ends = [r for r in records if isinstance(r, EpisodeEnd)]
        return Episode(
            header=header,
            steps=tuple(sorted(steps, key=lambda s: s.index)),
            end=ends[-1] if ends else None,
            source=str(self.path),
        )


class LiveScoring:
    """Scores ended episodes in the background into a verdict stream (module docstring).

    Args:
        scoring: the scoring configuration, or a policy file to read it from.
        verdicts: the verdict stream to append to.
        cache: the step-verdict cache (or its path or URL, as ``--cache`` takes it:
            opened and closed here), or None.

    Raises:
        ConfigError: a policy that cannot be read; on entering, a judge whose session
            cannot open (its key's variable unset).
    """

    def __init__(
        self,
        scoring: ScoringConfig | str | os.PathLike[str],
        verdicts: str | os.PathLike[str],
        cache: StepCache | str | os.PathLike[str] | None = None,
    ) -> None:
        self.config = scoring if isinstance(scoring, ScoringConfig) else load_policy(scoring)
        self.path = Path(verdicts)
        self._cache_arg = cache
        self.cache: StepCache | None = None
        self.stats = ScoreStats()
        #: Verdicts appended to the stream so far.
        self.written = 0
        self._steps_submitted = 0
        self._stack = AsyncExitStack()
        self._writer: JsonlWriter | None = None
        self._run: ScoringRun | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._bar: JudgingBar | None = None

    def own_files(self) -> list[Path]:
        """The files this writes (the verdict stream, the cache's): no tool's effects."""
        files = [self.path]
        cache = self._cache_arg
        if isinstance(cache, str | os.PathLike):
            files += local_files(cache)
        elif cache is not None:
            files += cache.files()
        return files

    async def __aenter__(self) -> LiveScoring:
        stack = self._stack
        try:
            if isinstance(self._cache_arg, str | os.PathLike):
                self.cache = stack.enter_context(open_cache(self._cache_arg))
            elif self._cache_arg is not None:
                self.cache = self._cache_arg
            self._writer = stack.enter_context(JsonlWriter(self.path))
            if not self._holds_policy():
                self._writer.write(self.config.record())
            run = ScoringRun(self.config, self.cache, self.stats, on_verdict=self._append)
            self._run = await stack.enter_async_context(run)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
        except BaseException:
            await stack.aclose()
            raise
        return self

    def _holds_policy(self) -> bool:
        """Whether the verdict stream already heads verdicts with this policy's record."""
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return False
        ours = self.config.record()
        return any(
            (p.judge, p.refusal_detector, p.policy.get("scoring"))
            == (ours.judge, ours.refusal_detector, ours.policy.get("scoring"))
            for p in read_verdicts(self.path).policies
        )

    def ended(self, episode: Episode) -> None:
        """Score ``episode`` (just ended) in the background."""
        assert self._tg is not None, "use LiveScoring in async with"
        assert self._run is not None
        self._steps_submitted += len(covered_keys(episode, self.config))
        self._tg.start_soon(self._run.submit, episode)

    def _append(self, verdict: Verdict | None, job: EpisodeJob) -> None:
        if verdict is not None and self._writer is not None:
            self._writer.write(verdict)
            self.written += 1
        if self._bar is not None:
            self._bar.update(self.stats)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        s = self.stats
        pending = self._steps_submitted - (s.judge_calls + s.cache_hits)
        if exc_type is None and pending > 0 and on_terminal():
            with JudgingBar(pending, "scoring the last episodes", base=s) as bar:
                self._bar = bar
                await self._stack.__aexit__(None, None, None)
                self._bar = None
        else:
            await self._stack.__aexit__(exc_type, exc, tb)

    def failure(self) -> ScoringFailed | None:
        """The error to raise once closed: some steps got no verdict (None: all did)."""
        return ScoringFailed(self.stats) if self.stats.failures else None
