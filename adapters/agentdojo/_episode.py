"""One AgentDojo run as one episode: the pipeline's messages joined with the runtime's calls.

Theory of operation
-------------------
The pipeline's messages say what the agent said and was shown; the runtime
(``_runtime.py``) says which calls reached the tools, under what mode, and what they
changed. The steps are the messages in order, each assistant tool call at its place:

==========================================  =========================================
the call                                    its step
==========================================  =========================================
reached the runtime (the next dispatched    ``tool_call``: fidelity, effects, times from
call of that function, in order)            the runtime; ``shown`` from its tool message
answered without reaching it (empty or      ``tool_call``, ``denied``, with
unknown name: ``ToolsExecutor`` does that)  ``meta.agentdojo.not_dispatched = true``
never answered (``max_iters`` ran out)      no step: the recording is *truncated*
dispatched but listed by no message         a step at its place in the runtime's order,
(a nested call, a pipeline's own call)      ``meta.agentdojo.unlisted = true``
==========================================  =========================================

Nothing here runs AgentDojo: messages and calls in, records out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str

from litmus_sandbox._core.findings import call_findings
from litmus_sandbox._model.records import (
    SCHEMA_VERSION,
    Effects,
    MessageStep,
    Role,
    Shown,
    Step,
    ToolCallStep,
    step_version,
)

from ._runtime import Dispatched

_ROLES: dict[str, Role] = {"system": "system", "user": "user", "assistant": "assistant"}


class Steps(NamedTuple):
    """An episode's steps and the calls the pipeline left unanswered."""

    steps: list[Step]
    #: Calls the model made that no tool message answers (``{id, function, args}``).
    unanswered: list[dict[str, Any]]


def text_of(content: Any) -> str:
    """A message's content (a string, or AgentDojo's content blocks) as text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("content")) for b in content if b.get("content") is not None)


def _format(result: Any) -> str:
    try:
        return tool_result_to_str(result)
    except (TypeError, ValueError):
        return repr(result)


def _json(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return msgspec.to_builtins(value, enc_hook=repr, str_keys=True)


class _Builder:
    def __init__(self, episode_id: str, dispatched: Sequence[Dispatched], tools: set[str]) -> None:
        self.episode_id = episode_id
        self.dispatched = dispatched
        self.tools = tools
        self.next = 0
        self.steps: list[Step] = []
        self.call_ids: set[str] = set()

    def message(self, role: Role, text: str) -> None:
        self.steps.append(
            MessageStep(
                v=SCHEMA_VERSION,
                episode_id=self.episode_id,
                index=len(self.steps),
                role=role,
                text=text,
            )
        )

    def _call_id(self, given: str | None) -> str:
        call_id = given if given and given not in self.call_ids else None
        if call_id is None:
            call_id = f"{self.episode_id}:{len(self.steps)}"
        self.call_ids.add(call_id)
        return call_id

    def _call(
        self,
        call_id: str | None,
        record: Dispatched | None,
        function: str,
        args: dict[str, Any],
        shown: Shown,
        meta: dict[str, Any],
    ) -> None:
        fidelity = record.fidelity if record is not None else "denied"
        facts: dict[str, Any] = {"agentdojo": meta} if meta else {}
        if record is not None and record.emulator is not None:
            facts["emulator"] = record.emulator  # who answered, what it was asked
        step = ToolCallStep(
            v=step_version(fidelity),
            episode_id=self.episode_id,
            index=len(self.steps),
            call_id=self._call_id(call_id),
            tool=function,
            args=record.args if record is not None else args,
            fidelity=fidelity,
            shown=shown,
            actual=record.actual if record is not None else None,
            effects=record.effects if record is not None else Effects(),
            started_at=record.started_at if record is not None else None,
            ended_at=record.ended_at if record is not None else None,
            meta=facts,
        )
        findings = call_findings(step)
        if findings:
            step = msgspec.structs.replace(step, findings=findings)
        self.steps.append(step)

    def unlisted(self, until: int) -> None:
        """The dispatched calls before ``until`` that no message lists, as steps."""
        while self.next < until:
            record = self.dispatched[self.next]
            self.next += 1
            error = record.error
            text = error if error else _format(record.result)
            shown = Shown(content=({"type": "text", "text": text},), is_error=bool(error))
            self._call(None, record, record.function, record.args, shown, {"unlisted": True})

    def listed(self, call: Any, answer: dict[str, Any]) -> None:
        """A call an assistant message lists, answered by tool message ``answer``."""
        function = str(call.function)
        error = answer.get("error")
        text = error if error else text_of(answer.get("content"))
        shown = Shown(
            content=({"type": "text", "text": text},) if text else (), is_error=bool(error)
        )
        found = None
        if function and function in self.tools:
            for i in range(self.next, len(self.dispatched)):
                if self.dispatched[i].function == function:
                    found = i
                    break
        if found is None:
            self._call(call.id, None, function, _json(call.args), shown, {"not_dispatched": True})
            return
        self.unlisted(found)
        self.next = found + 1
        record = self.dispatched[found]
        # The call answered an error its pipeline shows unflagged (the ground-truth
        # pipelines drop it: the agent read the error's text as a result).
        unflagged = {"error_not_flagged": True} if record.error and not error else {}
        self._call(call.id, record, function, {}, shown, unflagged)


def episode_steps(
    episode_id: str,
    prompt: str,
    messages: Sequence[Any],
    dispatched: Sequence[Dispatched],
    tools: set[str],
) -> Steps:
    """The steps of one run: ``messages`` as the pipeline returned them, ``dispatched`` as
    the runtime saw them, ``tools`` the suite's tool names. A run whose messages hold no
    user message starts with ``prompt`` (the ground-truth pipelines return only their own)."""
    b = _Builder(episode_id, dispatched, tools)
    answers: dict[int, dict[str, Any]] = {}
    by_id: dict[str, dict[str, Any]] = {}
    for m in messages:
        if m.get("role") == "tool":
            call = m.get("tool_call")
            if call is not None:
                answers[id(call)] = m
            if m.get("tool_call_id"):
                by_id[str(m["tool_call_id"])] = m
    if not any(m.get("role") == "user" for m in messages):
        b.message("user", prompt)
    unanswered: list[dict[str, Any]] = []
    for m in messages:
        role = _ROLES.get(str(m.get("role")))
        if role is None:
            continue
        calls = (m.get("tool_calls") or []) if role == "assistant" else []
        text = text_of(m.get("content"))
        if text or not calls:
            b.message(role, text)
        for call in calls:
            answer = answers.get(id(call)) or (by_id.get(str(call.id)) if call.id else None)
            if answer is None:
                unanswered.append(
                    {"id": call.id, "function": call.function, "args": _json(call.args)}
                )
                continue
            b.listed(call, answer)
    b.unlisted(len(dispatched))
    return Steps(b.steps, unanswered)
