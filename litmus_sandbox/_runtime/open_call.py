"""A real tool call that its caller runs and finishes, recorded without a task of its own.

Adapters relaying calls to a tool server (the MCP stdio proxy) start a call when they
send the request and finish it when the answer comes back, in the code that moves the
bytes: no task, event or cancel scope per call, which is most of a relay's added
latency. The step is the one ``EpisodeRecorder.call_with`` records for the same outcome
(the same builders make it), numbered when it finishes and written before ``finish``
returns, so the caller passes the answer on only once it is recorded.

Get one from ``EpisodeRecorder.begin_call``, which says when a call qualifies.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from litmus_sandbox._model.records import SCHEMA_VERSION, ToolCallStep
from litmus_sandbox._runtime.tool_calls import (
    CallOutcome,
    raised_outcome,
    real_parts,
    timeout_outcome,
)

if TYPE_CHECKING:
    from litmus_sandbox._runtime.sandbox import EpisodeRecorder

Finalize = Callable[[ToolCallStep], ToolCallStep]


class OpenCall:
    """One real call in flight. Finish it exactly once, with one of the methods below.

    Each returns the step as written; ``finalize``, if given, sees the step just before
    it is written and may return it annotated (as with ``call_with``).
    """

    def __init__(
        self,
        recorder: EpisodeRecorder,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        limit: float | None,
    ) -> None:
        self._recorder = recorder
        self.call_id = call_id
        self.tool = tool
        self.args = args
        #: Seconds the call may take (the tool's timeout, else the sandbox's; None: no limit).
        self.limit = limit
        self.started = time.time()
        self._finished = False

    def done(self, value: Any, finalize: Finalize | None = None) -> ToolCallStep:
        """The call returned ``value`` (a :class:`Shown`, or any value to convert)."""
        return self._finish(CallOutcome(kind="returned", value=value), finalize)

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
        rec = self._recorder
        step = rec._interrupted(self.call_id, self.tool, self.args, "real", self.started)
        return self._write(step, finalize)

    def _finish(self, outcome: CallOutcome, finalize: Finalize | None) -> ToolCallStep:
        self._claim()
        rec = self._recorder
        shown, actual, meta = real_parts(outcome, rec.sandbox.max_result_bytes, self.limit)
        step = ToolCallStep(
            v=SCHEMA_VERSION,
            episode_id=rec.episode_id,
            index=rec._index(),
            call_id=self.call_id,
            tool=self.tool,
            args=self.args,
            fidelity="real",
            shown=shown,
            actual=actual,
            started_at=self.started,
            ended_at=time.time(),
            meta=meta,
        )
        return self._write(step, finalize)

    def _claim(self) -> None:
        if self._finished:
            raise RuntimeError(f"call {self.call_id} is already finished")
        self._finished = True

    def _write(self, step: ToolCallStep, finalize: Finalize | None) -> ToolCallStep:
        step = self._recorder._close_windows(self.call_id, step)  # closed whatever comes
        self._recorder._require_open()
        if finalize is not None:
            step = finalize(step)
        self._recorder.sandbox._write_now(step)
        return step
