"""Judges that do I/O: one session per scoring run, asked concurrently.

A :class:`~litmus_sandbox._core.scoring.Judge` answers one step at a time
(``judge_step``). A judge that talks to a service also offers a *session*: an async
context that holds its connections for one scoring run and yields the coroutine function
that judges a step. The scorer opens it once, asks it from up to ``max_concurrency``
tasks at a time, and closes it at the end of the run. ``judge_step`` stays available for
callers outside a run (it opens a session for that one step).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeGuard, runtime_checkable

from litmus_sandbox._core.scoring import Judge, StepJudgment
from litmus_sandbox._model.records import Step

#: Judges one step given the steps before it.
JudgeCall = Callable[[Step, Sequence[Step]], Awaitable[StepJudgment]]


@runtime_checkable
class SessionJudge(Judge, Protocol):
    """A judge asked concurrently, through a session, within its ``max_concurrency``."""

    @property
    def max_concurrency(self) -> int: ...

    def session(self) -> AbstractAsyncContextManager[JudgeCall]: ...


def is_session_judge(judge: Judge | None) -> TypeGuard[SessionJudge]:
    """Whether ``judge`` offers a session (and so is asked concurrently)."""
    return judge is not None and callable(getattr(judge, "session", None))
