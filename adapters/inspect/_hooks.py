"""The hooks ``litmus_sandbox/recorder``: episodes of a live eval, without editing its task.

Enabled when ``$LITMUS_SANDBOX_EPISODES`` names a file; each sample (and epoch) is written
there as one episode when it ends, the same episode ``litmus-sandbox import inspect`` makes
from the finished log (ids and timestamps aside; ``meta.inspect.log`` is None).

Theory of operation
-------------------
The episode is built from the ``EvalSample`` given to ``on_sample_end``, with its
attachments resolved (it still holds ``attachment://`` references), through the same code
as the import: the steps are the same by construction. Events as ``on_sample_event``
delivers them would not do: every ``ModelEvent`` arrives twice, and a ``ToolEvent`` only
after its span has ended, out of the log's order. Nothing is written before the sample
ends, because the header says whether a limit truncated the recording and a written
record is never rewritten. ``on_task_start`` keeps each eval's spec (task, model, ids)
until ``on_task_end``; the stream is opened once per path and closed at ``on_run_end``.
``INSPECT_REQUIRED_HOOKS=litmus_sandbox/recorder`` makes a run without these hooks fail.
"""

from __future__ import annotations

import os

from inspect_ai.hooks import Hooks, RunEnd, SampleEnd, TaskEnd, TaskStart, hooks
from inspect_ai.log import EvalSpec
from inspect_ai.log._condense import resolve_sample_attachments

from litmus_sandbox import JsonlWriter
from litmus_sandbox._core.redaction import DEFAULT_REDACTION, redact_records

from ._episodes import sample_episode
from ._names import local_name

#: The environment variable naming the episode stream the recorder writes.
EPISODES_ENV = "LITMUS_SANDBOX_EPISODES"


@hooks(name=local_name("recorder"), description="Records each sample as a litmus-sandbox episode")
class LitmusRecorder(Hooks):
    """Writes one episode per sample and epoch to ``$LITMUS_SANDBOX_EPISODES``."""

    def __init__(self) -> None:
        self._specs: dict[str, EvalSpec] = {}
        self._writers: dict[str, JsonlWriter] = {}

    def enabled(self) -> bool:
        return bool(os.environ.get(EPISODES_ENV))

    def _writer(self) -> JsonlWriter:
        path = os.path.abspath(os.environ[EPISODES_ENV])
        writer = self._writers.get(path)
        if writer is None:
            writer = self._writers[path] = JsonlWriter(path)
        return writer

    async def on_task_start(self, data: TaskStart) -> None:
        self._specs[data.eval_id] = data.spec

    async def on_task_end(self, data: TaskEnd) -> None:
        self._specs.pop(data.eval_id, None)

    async def on_sample_end(self, data: SampleEnd) -> None:
        spec = self._specs.get(data.eval_id)
        if spec is None:
            raise RuntimeError(f"{data.sample_id}: sample of a task that never started")
        sample = resolve_sample_attachments(data.sample, "full")
        records = sample_episode(spec, sample, log=None).records()
        self._writer().write_many(redact_records(records, DEFAULT_REDACTION))

    async def on_run_end(self, data: RunEnd) -> None:
        writers, self._writers = self._writers, {}
        for writer in writers.values():
            writer.close()
