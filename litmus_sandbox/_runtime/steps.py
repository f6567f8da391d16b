"""The one builder of tool-call steps.

Every path that records a tool call - ``ep.call`` and ``ep.call_with`` whatever the
fidelity mode, a call an adapter runs inline (``OpenCall``), a call interrupted - builds its
step here, from the facts fixed when the call starts (episode, call id, tool, arguments,
start time). A step is built unnumbered (``index = -1``): the recorder numbers it when it
is recorded, in the order calls complete, and adds what the probes saw (a call run inline
is built with the index the recorder gives it as it finishes: one build, no copy).
"""

from __future__ import annotations

import time
from typing import Any

from litmus_sandbox._model.records import (
    Actual,
    Fidelity,
    ReplaySource,
    Shown,
    ToolCallStep,
    step_version,
)

#: What an interrupted call showed: nothing (an error, for the agent that awaits it).
_NOTHING_SHOWN = Shown(content=(), is_error=True)


class CallSteps:
    """The steps one tool call can be recorded as.

    Args:
        episode_id: the episode the call belongs to.
        call_id: the call's id (unique in the episode stream).
        tool: the tool's name.
        args: the call's arguments, as recorded.
        started: when the call started (default: now).
    """

    __slots__ = ("args", "call_id", "episode_id", "started", "tool")

    def __init__(
        self,
        episode_id: str,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        started: float | None = None,
    ) -> None:
        self.episode_id = episode_id
        self.call_id = call_id
        self.tool = tool
        self.args = args
        self.started = time.time() if started is None else started

    def step(
        self,
        fidelity: Fidelity,
        shown: Shown,
        actual: Actual | None = None,
        meta: dict[str, Any] | None = None,
        *,
        source: ReplaySource | None = None,
        index: int = -1,
    ) -> ToolCallStep:
        """The call's step, ending now: what the agent was ``shown``, and (when that differs
        from what happened) the ``actual`` outcome; unnumbered unless ``index`` is given."""
        return ToolCallStep(
            v=step_version(fidelity),
            episode_id=self.episode_id,
            index=index,
            call_id=self.call_id,
            tool=self.tool,
            args=self.args,
            fidelity=fidelity,
            shown=shown,
            actual=actual,
            source=source,
            started_at=self.started,
            ended_at=time.time(),
            meta=meta or {},
        )

    def interrupted(
        self, fidelity: Fidelity, stop: BaseException | None = None, *, index: int = -1
    ) -> ToolCallStep:
        """The step of a call stopped before it ended (nothing was shown): cancelled, or
        the process told to stop (``stop``: a tool calling ``sys.exit``, Ctrl-C)."""
        if stop is None:
            actual = Actual(outcome="interrupted")
        else:
            actual = Actual(
                outcome="interrupted", error_type=type(stop).__name__, error_message=str(stop)
            )
        return self.step(fidelity, _NOTHING_SHOWN, actual, index=index)
