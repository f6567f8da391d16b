"""A concurrent scoring run: episodes submitted one by one, verdicts handed out in order.

Theory of operation
-------------------
``async with ScoringRun(config, cache, stats, on_verdict=...) as run`` opens the judge's
session (and the fallback's) once; ``await run.submit(episode)`` makes the episode's
:class:`~litmus_sandbox._runtime.scoring_job.EpisodeJob` and starts one task per pending
step, each holding a token of a ``CapacityLimiter`` of the judge's ``max_concurrency``
from before it starts until it settles. ``submit`` waits for a token, so a fast reader
never runs ahead of the judge by more than that many steps, while the steps of the next
episodes start as soon as a token is free. Judges without a session are asked inline, in
step order, as the sync driver asks them.

A step that another episode of the run is already asking about (the same step in the
same context, under the same judge) is not asked again: it waits for that answer, and
counts as served from the cache - exactly what scoring the episodes in turn would give.
(Without a cache every covered step is asked, as in turn.)

With a cache, the run shares it through :class:`~litmus_sandbox._runtime.shared_steps.
SharedSteps`: a step is *claimed* once its token is held, so scorers in other processes
sharing the cache do not ask about it at once; a step another scorer holds releases its
token and waits (watched) for that scorer's verdict, or for its claim to be released or
to expire. Each judgment of the primary judge is buffered as it arrives; a keeper task
wakes up then, and stores it with the others that arrive within ``WRITE_GAP`` (0.02 s)
in one transaction; at least every ``TICK_EVERY`` (0.1 s) it also refreshes the claims
in flight and looks again at the watched steps. A kill loses at most the steps in flight
and those answered in the last few tens of milliseconds.

Jobs wait in a window in submission order; whenever the job at its head is done it is
finished (verdict built) and handed to ``on_verdict`` - so verdicts come out in the order
the episodes went in, whatever order their steps were answered in: only the output waits
for order, never the cache. Leaving the block waits for every step submitted, stores the
last judgments and releases every claim left (also when leaving on an error: what was
judged is kept). A failure inside the run (the cache's, say) leaves it as that one error,
not as a group.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType

import anyio
import anyio.abc

from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import CacheError, LitmusError, leaf_errors
from litmus_sandbox._model.records import Episode, Verdict
from litmus_sandbox._runtime.scoring_job import Asked, EpisodeJob, ScoreStats, ask_inline
from litmus_sandbox._runtime.scoring_job import with_attempts as _with_attempts
from litmus_sandbox._runtime.shared_steps import TICK_EVERY, WRITE_GAP, SharedSteps, Tick
from litmus_sandbox._store.step_cache import CacheKey, StepCache
from litmus_sandbox.judges import Judge, JudgeCall, ScoringConfig, is_session_judge
from litmus_sandbox.judges._failure import failure_attempts

#: Told each finished episode's verdict (None: a step had no verdict) and its job.
OnVerdict = Callable[[Verdict | None, EpisodeJob], None]


class ScoringRun:
    """Score submitted episodes concurrently (see the module docstring).

    Args:
        config: the scoring configuration.
        cache: the step-verdict cache (None: judge every covered step).
        stats: where the run's costs and failures are added up.
        on_verdict: told each episode's outcome, in submission order.

    Raises:
        ConfigError: on entering, a judge's session cannot open (e.g. its key's
            environment variable is not set).
        CacheError: the cache failed (a full disk): what was judged before is stored
            where the cache still allows it.
    """

    def __init__(
        self,
        config: ScoringConfig,
        cache: StepCache | None,
        stats: ScoreStats,
        *,
        on_verdict: OnVerdict | None = None,
    ) -> None:
        self.config = config
        self.cache = cache
        self.stats = stats
        self._on_verdict = on_verdict
        self._window: deque[EpisodeJob] = deque()
        self._stack = AsyncExitStack()
        self._call: JudgeCall | None = None
        self._fallback_call: JudgeCall | None = None
        judges = [j for j in (config.judge, config.fallback) if is_session_judge(j)]
        self.max_concurrency = min((j.max_concurrency for j in judges), default=1)
        self._limiter = anyio.CapacityLimiter(self.max_concurrency)
        self._tg: anyio.abc.TaskGroup | None = None
        #: The cache's side of the run: claims, judgments not yet stored (None: no cache).
        self._shared = SharedSteps(cache) if cache is not None else None
        self._keeper: anyio.CancelScope | None = None
        #: Set when a judgment waits to be written (wakes the keeper).
        self._to_write: anyio.Event | None = None
        self._emptied: anyio.Event | None = None
        #: Steps being asked about (or answered, their judgment not yet stored), by key.
        self._asking: dict[CacheKey, _Asking] = {}

    async def __aenter__(self) -> ScoringRun:
        stack = self._stack
        try:
            if is_session_judge(judge := self.config.judge):
                self._call = await stack.enter_async_context(judge.session())
            if is_session_judge(fallback := self.config.fallback):
                self._fallback_call = await stack.enter_async_context(fallback.session())
            self._tg = await stack.enter_async_context(anyio.create_task_group())
        except BaseException:
            await stack.aclose()
            raise
        if self._shared is not None:
            self._keeper, self._to_write = anyio.CancelScope(), anyio.Event()
            self._tg.start_soon(self._keep, self._shared, self._keeper)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if exc is None:
            try:
                while self._window:  # every step submitted settles, here or elsewhere
                    self._emptied = anyio.Event()
                    await self._emptied.wait()
            except BaseException as caught:  # cancelled: a task of the run failed
                exc_type, exc, tb = type(caught), caught, caught.__traceback__
        if self._keeper is not None:
            self._keeper.cancel()
        try:
            suppressed = await self._stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            self._close_shared(failing=True)
            raise _one_error(group) from None
        except BaseException:
            self._close_shared(failing=True)
            raise
        self._close_shared(failing=exc is not None and not suppressed)
        if exc is None:
            self._hand_out()
        return suppressed

    async def submit(self, episode: Episode) -> None:
        """Start scoring ``episode``; returns once its steps are all asked or in flight."""
        assert self._tg is not None, "use ScoringRun as an async context manager"
        job = EpisodeJob(episode, self.config, self.cache)
        self._window.append(job)
        for i in job.pending:
            if self._call is None:
                await self._judge(job, i)  # in-process judge: inline, in step order
                continue
            key = job.keys[i]
            if (same := self._asking.get(key)) is not None:
                if same.outcome is None:
                    same.waiting.append((job, i))
                else:
                    job.settle_asked(i, *same.outcome, shared=True)
                continue
            if self._shared is not None:
                self._asking[key] = _Asking(job, i)
            token = object()
            await self._limiter.acquire_on_behalf_of(token)
            if self._shared is not None:
                try:
                    claim = self._shared.claim(key)
                except BaseException:
                    self._limiter.release_on_behalf_of(token)
                    raise
                if not claim.held:  # judged or held elsewhere: no judge call from here
                    self._limiter.release_on_behalf_of(token)
                    if claim.judgment is not None:
                        self._judged_elsewhere(key, claim.judgment)
                    continue
            self._tg.start_soon(self._judge_task, job, i, token)
        self._hand_out()

    async def _judge_task(self, job: EpisodeJob, i: int, token: object | None) -> None:
        if token is None:  # a step taken over from another scorer: wait for a token now
            token = object()
            await self._limiter.acquire_on_behalf_of(token)
        try:
            await self._judge(job, i)
        finally:
            self._limiter.release_on_behalf_of(token)

    async def _judge(self, job: EpisodeJob, i: int) -> None:
        config = self.config
        asked = await _ask(config.judge, self._call, job, i, 1 + config.retries)
        fallback = None
        if asked.error is not None and config.fallback is not None:
            fallback = await _ask(config.fallback, self._fallback_call, job, i, 1)
        self._settle(job, i, asked, fallback)

    def _settle(
        self, job: EpisodeJob, i: int, asked: Asked, fallback: Asked | None, *, shared: bool = False
    ) -> None:
        """Settle step ``i`` of ``job`` and of every episode waiting for the same answer;
        store a judgment of the primary judge (never a fallback's, never a failure)."""
        key = job.keys[i]
        job.settle_asked(i, asked, fallback, shared=shared)
        if (same := self._asking.get(key)) is not None and same.owner is job:
            same.outcome = (asked, fallback)
            for other, j in same.waiting:
                other.settle_asked(j, asked, fallback, shared=True)
            same.waiting.clear()
            if shared or asked.judgment is None:  # stored already, or never
                del self._asking[key]
        if self._shared is not None and not shared:
            if asked.judgment is not None:
                self._shared.judged(key, asked.judgment)
            else:
                self._shared.failed(key)
            if self._to_write is not None:
                self._to_write.set()
        self._hand_out()

    def _judged_elsewhere(self, key: CacheKey, judgment: StepJudgment) -> None:
        """Another scorer stored ``key``'s verdict: served as from the cache."""
        if (same := self._asking.get(key)) is not None:
            self._settle(
                same.owner, same.index, Asked(judgment, judgment.attempts), None, shared=True
            )

    async def _keep(self, shared: SharedSteps, scope: anyio.CancelScope) -> None:
        """The keeper: a tick as soon as a judgment waits to be written (with those of
        the next ``WRITE_GAP``), and at least every ``TICK_EVERY`` for the claims."""
        with scope:
            while True:
                with anyio.move_on_after(TICK_EVERY):
                    assert self._to_write is not None
                    await self._to_write.wait()
                self._to_write = anyio.Event()
                self._apply(shared.tick())
                await anyio.sleep(WRITE_GAP)

    def _apply(self, tick: Tick) -> None:
        for key in tick.written:  # stored: later episodes find it in the cache
            if (same := self._asking.get(key)) is not None and same.outcome is not None:
                del self._asking[key]
        for key, judgment in tick.judged_elsewhere:
            self._judged_elsewhere(key, judgment)
        assert self._tg is not None
        for key in tick.taken:  # its holder released it, died or let it expire
            if (same := self._asking.get(key)) is not None:
                self._tg.start_soon(self._judge_task, same.owner, same.index, None)

    def _close_shared(self, *, failing: bool) -> None:
        """Store the last judgments and release every claim left; when the run is already
        failing, a cache error here does not hide the first error."""
        if self._shared is None:
            return
        try:
            self._shared.close()
        except CacheError:
            if not failing:
                raise

    def _hand_out(self) -> None:
        """Finish the jobs at the head of the window that are done, in order."""
        while self._window and self._window[0].done:
            job = self._window.popleft()
            verdict = job.finish(None, self.stats)  # its judgments are stored as they come
            if self._on_verdict is not None:
                self._on_verdict(verdict, job)
        if not self._window and self._emptied is not None:
            self._emptied.set()


class _Asking:
    """A step being asked about for ``owner`` (its step ``index``), and the other
    episodes' steps waiting for the same answer."""

    def __init__(self, owner: EpisodeJob, index: int) -> None:
        self.owner = owner
        self.index = index
        self.waiting: list[tuple[EpisodeJob, int]] = []
        self.outcome: tuple[Asked, Asked | None] | None = None


def _one_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error inside a task group's ``group`` (cancellations aside): the one there is,
    or the first when all are ours (several tasks met the same full disk); else the group
    itself. A cache that failed is one line, not a group."""
    cancelled = anyio.get_cancelled_exc_class()
    errors = [e for e in leaf_errors(group) if not isinstance(e, cancelled)]
    if len(errors) == 1 or (errors and all(isinstance(e, LitmusError) for e in errors)):
        return errors[0]
    return group


async def _ask(judge: Judge, call: JudgeCall | None, job: EpisodeJob, i: int, tries: int) -> Asked:
    """Ask ``judge`` about step ``i`` up to ``tries`` times: through its session's
    ``call``, or inline when it has none."""
    if call is None:
        return ask_inline(job, i, judge, tries)
    step, context = job.episode.steps[i], job.episode.steps[:i]
    attempts = 0
    error: Exception | None = None
    for _ in range(tries):
        try:
            judgment = await call(step, context)
        except Exception as exc:  # any judge failure is retried, then reported
            attempts += failure_attempts(exc)
            error = exc
            continue
        attempts += judgment.attempts
        return Asked(_with_attempts(judgment, attempts), attempts)
    return Asked(None, attempts, error)
