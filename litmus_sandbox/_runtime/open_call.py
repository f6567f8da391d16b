"""A real tool call that its caller runs and finishes, recorded without a task of its own.

Adapters relaying calls to a tool server (the MCP stdio proxy) start a call when they
send the request and finish it when the answer comes back, in the code that moves the
bytes: no task, event or cancel scope per call, which is most of a relay's added
latency. The step is the one ``EpisodeRecorder.call_with`` records for the same outcome
(the same builders make it), numbered when it finishes and written before ``finish``
returns, so the caller passes the answer on only once it is recorded. The step is built
once, numbered as it is built; a relay that knows its annotations up front passes them
(``done(shown, meta=...)``) rather than a ``finalize`` that would copy the step again.

Get one from ``EpisodeRecorder.begin_call``, which says when a call qualifies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from litmus_sandbox._model.records import Shown, ToolCallStep
from litmus_sandbox._runtime.steps import CallSteps
from litmus_sandbox._runtime.tool_calls import (
    CallOutcome,
    cap_shown,
    raised_outcome,
    real_parts,
    timeout_outcome,
)

Finalize = Callable[[ToolCallStep], ToolCallStep]


class InlineRecorder(Protocol):
    """Where an :class:`OpenCall` records its step (the episode's recorder)."""

    def take_index(self) -> int:
        """The finishing call's step index (steps are numbered as they complete)."""
        ...

    def record_inline(self, step: ToolCallStep, finalize: Finalize | None) -> ToolCallStep:
        """Record the numbered step: what the probes saw added, ``finalize`` applied,
        written; returns it as written."""
        ...


class OpenCall:
    """One real call in flight. Finish it exactly once, with one of the methods below.

    Each returns the step as written; ``finalize``, if given, sees the step just before
    it is written and may return it annotated (as with ``call_with``).

    Args:
        call: the call's step builder (its id, tool, arguments and start).
        limit: seconds the call may take (None: no limit).
        cap: ``max_result_bytes``: a larger result is recorded capped.
        recorder: records the finished step (the episode's recorder).
    """

    __slots__ = (
        "_call",
        "_cap",
        "_finished",
        "_recorder",
        "args",
        "call_id",
        "limit",
        "started",
        "tool",
    )

    def __init__(
        self, call: CallSteps, limit: float | None, cap: int, recorder: InlineRecorder
    ) -> None:
        self._call = call
        self._cap = cap
        self._recorder = recorder
        self.call_id = call.call_id
        self.tool = call.tool
        self.args: dict[str, Any] = call.args
        #: Seconds the call may take (the tool's timeout, else the sandbox's; None: no limit).
        self.limit = limit
        self.started = call.started
        self._finished = False

    def done(
        self,
        value: Any,
        finalize: Finalize | None = None,
        *,
        meta: dict[str, Any] | None = None,
    ) -> ToolCallStep:
        """The call returned ``value`` (a :class:`Shown`, or any value to convert).

        ``meta``: annotations known before the step is built (a relay's, for an answer
        it passes on as it is), after those the recorder adds (``capped`` …): the step is
        built once, with them, where a ``finalize`` would copy it to add them. A fresh
        dict: it becomes the step's own.
        """
        if type(value) is Shown:  # a relay's answer, shown as it is (``real_parts``)
            self._claim()
            shown, capped = cap_shown(value, self._cap)
            if capped is not None:
                meta = {"capped": capped} if meta is None else {"capped": capped, **meta}
            step = self._call.step("real", shown, None, meta, index=self._recorder.take_index())
            return self._recorder.record_inline(step, finalize)
        return self._finish(CallOutcome(kind="returned", value=value), finalize, meta)

    def failed(self, exc: BaseException, finalize: Finalize | None = None) -> ToolCallStep:
        """The call raised ``exc``: recorded, and shown as an error naming it."""
        return self._finish(raised_outcome(exc), finalize)

    def timed_out(self, finalize: Finalize | None = None) -> ToolCallStep:
        """The call got no result within :attr:`limit`.

        Raises:
            ValueError: the call has no limit.
        """
        if self.limit is None:
            raise ValueError(f"call {self.call_id} has no time limit to exceed")
        return self._finish(timeout_outcome(self.limit), finalize)

    def interrupted(self, finalize: Finalize | None = None) -> ToolCallStep:
        """The call was cancelled before it ended (the agent was shown nothing)."""
        self._claim()
        step = self._call.interrupted("real", index=self._recorder.take_index())
        return self._recorder.record_inline(step, finalize)

    def _finish(
        self, outcome: CallOutcome, finalize: Finalize | None, known: dict[str, Any] | None = None
    ) -> ToolCallStep:
        self._claim()
        shown, actual, meta = real_parts(outcome, self._cap, self.limit)
        if known:
            meta = {**meta, **known}
        step = self._call.step("real", shown, actual, meta, index=self._recorder.take_index())
        return self._recorder.record_inline(step, finalize)

    def _claim(self) -> None:
        if self._finished:
            raise RuntimeError(f"call {self.call_id} is already finished")
        self._finished = True
