"""One Inspect sample (and epoch) as one episode: header, steps, end.

The log import and the live recorder hooks both build episodes here, from the same
``EvalSpec`` and ``EvalSample`` (events in log order, attachments resolved), so the two
give the same episodes. A sample stopped by a limit (message, token, time, working,
custom...; Inspect scores it as if complete) is a *truncated recording*: its header says
so, and every verdict scored from it carries ``recording_truncated = true``. An approver's
terminate is not a truncation: the policy stopped the agent, and the recording has all of it.
The header's ``tool_modes`` and ``oracles`` say how the sample was measured (``_setup.py``).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import msgspec
from inspect_ai.log import EvalSample, EvalSpec

from litmus_sandbox import EpisodeEnd, EpisodeHeader, Recorder
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.records import SCHEMA_VERSION, Step

from ._setup import sample_setup
from ._steps import sample_steps

#: The recorder's name in every episode this adapter writes.
RECORDER_NAME = "litmus-sandbox/inspect"
#: Bumped only when what is recorded from an Inspect sample changes (the gate compares it).
MEASUREMENT_VERSION = "1"


def episode_id_of(sample: EvalSample) -> str:
    """The episode id of a sample's run: from its uuid (the import and the live hooks agree)."""
    return f"inspect-{sample.uuid}" if sample.uuid else f"inspect-{uuid.uuid4().hex}"


class SampleEpisode(NamedTuple):
    """One sample's episode: its header, steps and end (there is always an end)."""

    header: EpisodeHeader
    steps: list[Step]
    end: EpisodeEnd

    def records(self) -> list[msgspec.Struct]:
        """The records in stream order."""
        return [self.header, *self.steps, self.end]


def sample_episode(spec: EvalSpec, sample: EvalSample, *, log: str | None) -> SampleEpisode:
    """The episode of one sample (and epoch).

    Args:
        spec: the eval the sample belongs to (task, model, ids).
        sample: the sample, events in log order and attachments resolved.
        log: the log file it was read from (None: recorded live).
    """
    episode_id = episode_id_of(sample)
    steps, facts = sample_steps(episode_id, sample.events)
    limit = facts.limit
    if limit is None and sample.limit is not None:
        # A limit raised by a solver (LimitExceededError) is in EvalSample.limit with no
        # SampleLimitEvent in the events: it cut the sample all the same.
        message = sample.limit.reason or f"limit {sample.limit.limit}"
        limit = {"type": sample.limit.type, "message": message}
    truncated = limit is not None and not (facts.terminated and limit["type"] == "operator")
    setup = sample_setup(sample.events, steps)
    inspect_facts: dict[str, Any] = {
        "eval_id": spec.eval_id,
        "run_id": spec.run_id,
        "sample_uuid": sample.uuid,
        "epoch": sample.epoch,
        "task": spec.task,
        "model": spec.model,
        "inspect_ai_version": spec.packages.get("inspect_ai"),
        "log": log,
    }
    if setup.not_applied:
        inspect_facts["modes_not_applied"] = setup.not_applied
    header = EpisodeHeader(
        v=SCHEMA_VERSION,
        episode_id=episode_id,
        case_id=str(sample.id),
        suite=spec.task,
        agent=spec.model,
        started_at=sample.started_at,
        recorder=Recorder(
            name=RECORDER_NAME,
            version=package_version(),
            measurement_version=MEASUREMENT_VERSION,
            truncated=truncated,
        ),
        tool_modes=setup.tool_modes,
        oracles=setup.oracles,
        meta={
            "inspect": inspect_facts,
            **({"emulator": setup.emulator} if setup.emulator is not None else {}),
        },
    )
    end_facts: dict[str, Any] = {}
    reason: str | None = None
    if limit is not None:
        end_facts["limit"] = limit
        reason = f"{limit['type']} limit: {limit['message']}"
    if facts.terminated:
        end_facts["terminated"] = True
        reason = reason or "terminated by an approver"
    status: Any = "complete"
    if sample.error is not None:
        status = "aborted"
        reason = sample.error.message
        end_facts["error"] = sample.error.message
    end = EpisodeEnd(
        v=SCHEMA_VERSION,
        episode_id=episode_id,
        status=status,
        steps=len(steps),
        reason=reason,
        at=sample.completed_at,
        meta={"inspect": end_facts} if end_facts else {},
    )
    return SampleEpisode(header, steps, end)
