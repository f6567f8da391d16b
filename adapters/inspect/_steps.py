"""A sample's steps, from its events (not from ``sample.messages``).

Theory of operation
-------------------
Inspect's ``sample.messages`` is what the agent kept, not what happened: react's continue
prompt can exist only in a later ``ModelEvent.input``, ``react(retry_refusals=N)`` drops a
refused generation, react strips its submit call. The events keep everything, so the
steps are read from them, in two passes over the sample's events in log order:

1. *index*: the span tree (so an event's span can be told inside the scorers span, or
   inside a tool's span), the approvals by tool-call id, and, for each ``ToolEvent``, its
   span: the ``span_begin(type="tool", name=fn, parent=ToolEvent.span_id)`` logged right
   before it. ``InfoEvent(source="litmus-sandbox")`` and ``SandboxEvent`` records inside
   that span (or a span under it) belong to the call;
2. *walk*: each agent ``ModelEvent`` (any not under the scorers span) gives the user and
   system messages of its input not seen before (where they entered the conversation),
   then its output as an assistant step; each ``ToolEvent`` gives a tool-call step.

===========================  ===================================================
event                        step
===========================  ===================================================
ModelEvent (agent)           new user/system input messages, then the assistant
                             output (``meta.inspect.retried`` when the next
                             generation regenerated from the same input)
ToolEvent                    a tool call, ``call_id = ToolEvent.id``; ``denied``
                             after an approval ``reject``/``terminate``
InfoEvent(litmus-sandbox)    overrides the call's fidelity and ``actual``; adds
                             the effects a litmus sandbox observed
SandboxEvent in the span     listed in the call's ``meta.inspect.sandbox``
SampleLimitEvent             a truncated recording (an approver's terminate aside)
===========================  ===================================================

Nothing here does I/O: events in, records out.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import msgspec
from inspect_ai.event import (
    ApprovalEvent,
    Event,
    InfoEvent,
    ModelEvent,
    SampleLimitEvent,
    SandboxEvent,
    SpanBeginEvent,
    SpanEndEvent,
    ToolEvent,
)
from inspect_ai.model import ChatMessage, ContentText

from litmus_sandbox import Actual, Effects, FsEffect, MessageStep, Shown, ToolCallStep
from litmus_sandbox._model.records import FIDELITIES, SCHEMA_VERSION, Step, step_version

#: ``InfoEvent.source`` of what litmus-sandbox tells about a call (``litmus_tool``, the
#: ``litmus`` sandbox provider).
INFO_SOURCE = "litmus-sandbox"


def as_json(value: Any) -> Any:
    """``value`` (records included) as plain JSON data, for an ``InfoEvent``."""
    return msgspec.json.decode(msgspec.json.encode(value))


#: Approval decisions after which the tool never ran: the step is ``denied``.
_REFUSED = frozenset({"reject", "terminate"})


class SampleFacts(NamedTuple):
    """What the events say about the sample as a whole."""

    #: The limit that stopped the sample (``type``, ``message``), None when none did.
    limit: dict[str, Any] | None
    #: Whether an approver terminated the sample (not a truncation: a policy decision).
    terminated: bool


def _ts(when: datetime | None) -> float | None:
    return when.timestamp() if when is not None else None


def _blocks(result: Any) -> tuple[dict[str, Any], ...]:
    """A ``ToolEvent.result`` as content blocks (text stays text; other content as Inspect
    dumps it)."""
    if result is None or result == "":
        return ()
    items = result if isinstance(result, list) else [result]
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, str | int | float | bool):
            out.append({"type": "text", "text": str(item)})
        elif hasattr(item, "model_dump"):
            out.append(item.model_dump(exclude_none=True))
        else:
            out.append({"type": "text", "text": str(item)})
    return tuple(out)


def _text(message: ChatMessage) -> str:
    return message.text


def _refusal(event: ModelEvent) -> bool | None:
    """True when Inspect says the generation was refused; None leaves it to the detector."""
    output = event.output
    if not output.choices:
        return None
    choice = output.choices[0]
    if choice.stop_reason == "content_filter":
        return True
    details = choice.stop_details
    if details is not None and details.type == "refusal":
        return True
    content = choice.message.content
    if not isinstance(content, str) and any(
        isinstance(c, ContentText) and c.refusal for c in content
    ):
        return True
    return None


class _Index:
    """Pass 1: the span tree, the tool spans, the approvals."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.parent: dict[str, str | None] = {}
        self.kind: dict[str, str | None] = {}
        #: ToolEvent position -> the id of its own span.
        self.tool_span: dict[int, str] = {}
        self.approvals: dict[str, ApprovalEvent] = {}
        self.limit: SampleLimitEvent | None = None
        previous: Event | None = None
        for i, event in enumerate(events):
            if isinstance(event, SpanBeginEvent):
                self.parent[event.id] = event.parent_id
                self.kind[event.id] = event.type
            elif isinstance(event, ToolEvent):
                if (
                    isinstance(previous, SpanBeginEvent)
                    and previous.type == "tool"
                    and previous.name == event.function
                    and previous.parent_id == event.span_id
                ):
                    self.tool_span[i] = previous.id
            elif isinstance(event, ApprovalEvent):
                self.approvals[event.call.id] = event
            elif isinstance(event, SampleLimitEvent):
                self.limit = event
            previous = event
        self._under_scorers: dict[str | None, bool] = {}

    def under(self, span_id: str | None, target: str) -> bool:
        """Whether span ``span_id`` is ``target`` or lies under it."""
        seen = 0
        while span_id is not None and seen < 10_000:
            if span_id == target:
                return True
            span_id = self.parent.get(span_id)
            seen += 1
        return False

    def scoring(self, span_id: str | None) -> bool:
        """Whether span ``span_id`` lies under a ``scorers`` span (a model-graded scorer)."""
        if span_id in self._under_scorers:
            return self._under_scorers[span_id]
        cur, found, hops = span_id, False, 0
        while cur is not None and hops < 10_000:
            if self.kind.get(cur) == "scorers":
                found = True
                break
            cur = self.parent.get(cur)
            hops += 1
        self._under_scorers[span_id] = found
        return found


class _Walk:
    """Pass 2: the steps, numbered in the order their events were logged."""

    def __init__(self, episode_id: str, events: Sequence[Event], index: _Index) -> None:
        self.episode_id = episode_id
        self.events = events
        self.index = index
        self.steps: list[Step] = []
        self.seen: set[str] = set()

    def _message(
        self, role: Any, text: str, at: float | None, refusal: bool | None, meta: dict[str, Any]
    ) -> None:
        self.steps.append(
            MessageStep(
                v=SCHEMA_VERSION,
                episode_id=self.episode_id,
                index=len(self.steps),
                role=role,
                text=text,
                refusal=refusal,
                at=at,
                meta=meta,
            )
        )

    def model(self, event: ModelEvent, retried: bool) -> None:
        at = _ts(event.timestamp)
        for message in event.input:
            key = message.id or f"{message.role}:{_text(message)}"
            if key in self.seen:
                continue
            self.seen.add(key)
            if message.role in ("user", "system"):
                self._message(message.role, _text(message), at, None, {})
        output = event.output
        facts: dict[str, Any] = {}
        text = ""
        if output.choices:
            choice = output.choices[0]
            msg = choice.message
            self.seen.add(msg.id or f"assistant:{msg.text}")
            text = msg.text
            facts["stop_reason"] = choice.stop_reason
            if msg.tool_calls:
                facts["tool_calls"] = [c.id for c in msg.tool_calls]
        if event.error is not None:
            facts["error"] = event.error
        if retried:
            facts["retried"] = True
        self._message("assistant", text, at, _refusal(event), {"inspect": facts})

    def tool(self, position: int, event: ToolEvent) -> None:
        facts: dict[str, Any] = {}
        fidelity: Any = "real"
        error = event.error
        if error is not None:
            shown = Shown(content=({"type": "text", "text": error.message},), is_error=True)
            facts["error"] = {"type": error.type, "message": error.message}
        else:
            shown = Shown(content=_blocks(event.result))
        approval = self.index.approvals.get(event.id)
        if approval is not None:
            facts["approval"] = {
                "approver": approval.approver,
                "decision": approval.decision,
                "explanation": approval.explanation,
            }
            if approval.decision in _REFUSED:
                fidelity = "denied"
        actual: Actual | None = None
        emulator: dict[str, Any] | None = None
        fs: list[FsEffect] = []
        sandbox: list[dict[str, Any]] = []
        span = self.index.tool_span.get(position)
        if span is not None:
            for inner in self._span_events(position, span):
                if isinstance(inner, SandboxEvent):
                    sandbox.append(_sandbox_fact(inner))
                elif isinstance(inner, InfoEvent) and inner.source == INFO_SOURCE:
                    said = inner.data.get("litmus") if isinstance(inner.data, dict) else None
                    if not isinstance(said, dict):
                        continue
                    if said.get("fidelity") in FIDELITIES:
                        fidelity = said["fidelity"]
                        actual = _actual(said.get("actual"))
                    if isinstance(told := said.get("emulator"), dict):
                        emulator = dict(told)  # who answered an emulated call
                    fs.extend(_fs_effects(said.get("effects")))
        if sandbox:
            facts["sandbox"] = sandbox
        meta: dict[str, Any] = {"inspect": facts} if facts else {}
        if emulator is not None:
            meta["emulator"] = emulator
        self.steps.append(
            ToolCallStep(
                v=step_version(fidelity),
                episode_id=self.episode_id,
                index=len(self.steps),
                call_id=event.id,
                tool=event.function,
                args=dict(event.arguments),
                fidelity=fidelity,
                shown=shown,
                actual=actual,
                effects=Effects(fs=tuple(fs)),
                started_at=_ts(event.timestamp),
                ended_at=_ts(event.completed),
                meta=meta,
            )
        )

    def _span_events(self, position: int, span: str) -> list[Event]:
        """The events logged inside the call's span (or a span under it)."""
        out: list[Event] = []
        for inner in self.events[position + 1 :]:
            if isinstance(inner, SpanEndEvent) and inner.id == span:
                break
            if self.index.under(inner.span_id, span):
                out.append(inner)
        return out


def _sandbox_fact(event: SandboxEvent) -> dict[str, Any]:
    fact: dict[str, Any] = {"action": event.action}
    if event.cmd is not None:
        fact["cmd"] = event.cmd
    if event.file is not None:
        fact["file"] = event.file
    if event.result is not None:
        fact["result"] = event.result
    return fact


def _actual(data: Any) -> Actual | None:
    if not isinstance(data, dict):
        return None
    try:
        return msgspec.convert(data, Actual)
    except msgspec.ValidationError:
        return None


def _fs_effects(data: Any) -> list[FsEffect]:
    if not isinstance(data, dict) or not isinstance(data.get("fs"), list):
        return []
    try:
        return msgspec.convert(data["fs"], list[FsEffect])
    except msgspec.ValidationError:
        return []


def _input_key(event: ModelEvent) -> tuple[str, ...]:
    return tuple(m.id or f"{m.role}:{m.text}" for m in event.input)


def _output_key(event: ModelEvent) -> str | None:
    if not event.output.choices:
        return None
    msg = event.output.choices[0].message
    return msg.id or f"assistant:{msg.text}"


def sample_steps(episode_id: str, events: Sequence[Event]) -> tuple[list[Step], SampleFacts]:
    """The steps of one sample (its ``events`` in log order, attachments resolved), and
    what the events say about how it ended."""
    index = _Index(events)
    agent_models = [
        (i, e)
        for i, e in enumerate(events)
        if isinstance(e, ModelEvent) and not index.scoring(e.span_id)
    ]
    retried: set[int] = set()
    for (here, this), (_, later) in itertools.pairwise(agent_models):
        # Regenerated from the same conversation, and its output never entered it.
        if _input_key(later) == _input_key(this) and _output_key(this) not in _input_key(later):
            retried.add(here)
    walk = _Walk(episode_id, events, index)
    models = {i for i, _ in agent_models}
    for i, event in enumerate(events):
        if i in models and isinstance(event, ModelEvent):
            walk.model(event, i in retried)
        elif isinstance(event, ToolEvent) and not index.scoring(event.span_id):
            walk.tool(i, event)
    terminated = any(a.decision == "terminate" for a in index.approvals.values())
    limit = index.limit
    facts = SampleFacts(
        limit={"type": limit.type, "message": limit.message} if limit is not None else None,
        terminated=terminated,
    )
    return walk.steps, facts
