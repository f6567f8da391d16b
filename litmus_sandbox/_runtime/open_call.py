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

from collections.abc import Callable
from typing import Any

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
#: Records a finished call's step: numbers it, adds what the probes saw, lets
#: ``finalize`` annotate it, writes it; returns it as written (``record_inline``).
RecordStep = Callable[[ToolCallStep, Finalize | None], ToolCallStep]


class OpenCall:
    """One real call in flight. Finish it exactly once, with one of the methods below.

    Each returns the step as written; ``finalize``, if given, sees the step just before
    it is written and may return it annotated (as with ``call_with``).

    Args:
        call: the call's step builder (its id, tool, arguments and start).
        limit: seconds the call may take (None: no limit).
        cap: ``max_result_bytes``: a larger result is recorded capped.
        record: records the finished step (the episode recorder's ``record_inline``).
    """

    def __init__(self, call: CallSteps, limit: float | None, cap: int, record: RecordStep) -> None:
        self._call = call
        self._cap = cap
        self._record = record
        self.call_id = call.call_id
        self.tool = call.tool
        self.args: dict[str, Any] = call.args
        #: Seconds the call may take (the tool's timeout, else the sandbox's; None: no limit).
        self.limit = limit
        self.started = call.started
        self._finished = False

    def done(self, value: Any, finalize: Finalize | None = None) -> ToolCallStep:
        """The call returned ``value`` (a :class:`Shown`, or any value to convert)."""
        if type(value) is Shown:  # a relay's answer, shown as it is (``real_parts``)
            self._claim()
            shown, capped = cap_shown(value, self._cap)
            meta = {"capped": capped} if capped is not None else {}
            return self._record(self._call.step("real", shown, None, meta), finalize)
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
        return self._record(self._call.interrupted("real"), finalize)

    def _finish(self, outcome: CallOutcome, finalize: Finalize | None) -> ToolCallStep:
        self._claim()
        shown, actual, meta = real_parts(outcome, self._cap, self.limit)
        return self._record(self._call.step("real", shown, actual, meta), finalize)

    def _claim(self) -> None:
        if self._finished:
            raise RuntimeError(f"call {self.call_id} is already finished")
        self._finished = True
