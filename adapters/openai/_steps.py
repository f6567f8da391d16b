"""A conversation of turns (``_shapes.py``) as one episode's steps, header and end.

Each :class:`~._shapes.Said` is a message step and each :class:`~._shapes.Called` a
tool-call step, in the order the model listed them; a call's result is the
:class:`~._shapes.Answered` with the same id wherever it comes (joined by id, never by
position). A call no result answers makes the recording *truncated* (the transcript
stops before the tool answered); a result no call asked for is kept in the end record.
Imported calls are ``real``: a transcript cannot say otherwise. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.records import (
    SCHEMA_VERSION,
    EpisodeEnd,
    EpisodeHeader,
    MessageStep,
    Recorder,
    Shown,
    Step,
    ToolCallStep,
)

from ._shapes import Answered, Called, Said, ShapeError, Turn

#: The recorder's name in every episode this adapter writes (chat and Responses alike:
#: the same conversation in either shape is the same measurement).
RECORDER_NAME = "litmus-sandbox/openai"
#: Bumped only when what is recorded from a transcript changes (the gate compares it).
MEASUREMENT_VERSION = "1"


class Conversation(NamedTuple):
    """The steps of a conversation and what the join of calls and results left over."""

    steps: list[Step]
    #: Calls no result answers, in order.
    unanswered: list[str]
    #: Results whose id no call has, in order.
    unmatched: list[str]


def conversation_steps(episode_id: str, turns: Sequence[Turn]) -> Conversation:
    """The steps of ``turns``.

    Raises:
        ShapeError: two calls share an id, or one call has two results.
    """
    results: dict[str, tuple[dict[str, Any], ...]] = {}
    calls: set[str] = set()
    unmatched: list[str] = []
    for turn in turns:
        if isinstance(turn, Called):
            if turn.call_id in calls:
                raise ShapeError(f"two tool calls have the id {turn.call_id!r}")
            calls.add(turn.call_id)
    for turn in turns:
        if isinstance(turn, Answered):
            if turn.call_id in results:
                raise ShapeError(f"two results answer the tool call {turn.call_id!r}")
            results[turn.call_id] = turn.content
            if turn.call_id not in calls:
                unmatched.append(turn.call_id)
    steps: list[Step] = []
    unanswered: list[str] = []
    for turn in turns:
        if isinstance(turn, Said):
            steps.append(
                MessageStep(
                    v=SCHEMA_VERSION,
                    episode_id=episode_id,
                    index=len(steps),
                    role=turn.role,
                    text=turn.text,
                    refusal=turn.refusal,
                    meta=turn.meta,
                )
            )
        elif isinstance(turn, Called):
            meta = turn.meta
            content = results.get(turn.call_id)
            if content is None:
                unanswered.append(turn.call_id)
                facts = {**meta.get("openai", {}), "no_result": True}
                meta = {**meta, "openai": facts}
            steps.append(
                ToolCallStep(
                    v=SCHEMA_VERSION,
                    episode_id=episode_id,
                    index=len(steps),
                    call_id=turn.call_id,
                    tool=turn.tool,
                    args=turn.args,
                    fidelity="real",
                    shown=Shown(content=content or ()),
                    meta=meta,
                )
            )
    return Conversation(steps, unanswered, unmatched)


class TranscriptEpisode(NamedTuple):
    """One transcript's episode: its header, steps and end."""

    header: EpisodeHeader
    steps: list[Step]
    end: EpisodeEnd

    def records(self) -> list[msgspec.Struct]:
        """The records in stream order."""
        return [self.header, *self.steps, self.end]


def transcript_episode(
    episode_id: str,
    case_id: str,
    turns: Sequence[Turn],
    *,
    api: str,
    agent: str | None = None,
    suite: str | None = None,
    source: dict[str, Any] | None = None,
    skipped: dict[str, int] | None = None,
) -> TranscriptEpisode:
    """The episode of one transcript (``api``: ``chat`` or ``responses``).

    Raises:
        ShapeError: as :func:`conversation_steps`.
    """
    conv = conversation_steps(episode_id, turns)
    header = EpisodeHeader(
        v=SCHEMA_VERSION,
        episode_id=episode_id,
        case_id=case_id,
        suite=suite,
        agent=agent,
        recorder=Recorder(
            name=RECORDER_NAME,
            version=package_version(),
            measurement_version=MEASUREMENT_VERSION,
            truncated=bool(conv.unanswered),
        ),
        meta={"openai": {"api": api, **(source or {})}},
    )
    facts: dict[str, Any] = {}
    reason = None
    if conv.unanswered:
        facts["unanswered_calls"] = conv.unanswered
        n = len(conv.unanswered)
        reason = f"{n} tool call{'' if n == 1 else 's'} with no result: the transcript stops first"
    if conv.unmatched:
        facts["unmatched_results"] = conv.unmatched
    if skipped:
        facts["skipped_items"] = dict(sorted(skipped.items()))
    end = EpisodeEnd(
        v=SCHEMA_VERSION,
        episode_id=episode_id,
        status="complete",
        steps=len(conv.steps),
        reason=reason,
        meta={"openai": facts} if facts else {},
    )
    return TranscriptEpisode(header, conv.steps, end)
