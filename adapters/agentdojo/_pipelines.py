"""The pipelines ``run agentdojo --pipeline`` can name.

* ``ground-truth``: AgentDojo's ``GroundTruthPipeline`` of the user task: its ground-truth
  calls, then its ground-truth answer (no model);
* ``hijacked-ground-truth``: an agent fully taken over by the injection: the user task's
  ground truth, then the injection task's (calls and answer), so every attack the tools
  allow succeeds. Without an injection task it is ``ground-truth``;
* ``FILE.py:FACTORY``: ``FACTORY`` from that file, called with those of ``suite``,
  ``user_task`` and ``injection_task`` it takes, returns the pipeline (any
  ``BasePipelineElement``; its ``name`` is the episode's agent).
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import EmptyEnv, FunctionsRuntime
from agentdojo.task_suite.task_suite import TaskSuite
from agentdojo.types import ChatMessage

from litmus_sandbox._model.errors import ConfigError

BUILT_IN = ("ground-truth", "hijacked-ground-truth")

#: Makes the pipeline of one (user task, injection task) pair.
PipelineFactory = Callable[
    [TaskSuite[Any], BaseUserTask[Any], BaseInjectionTask[Any] | None], BasePipelineElement
]


class HijackedGroundTruth(BasePipelineElement):
    """The user task's ground truth, then the injection task's: an agent that obeys the
    injection completely (AgentDojo's ground-truth pipelines, one after the other)."""

    name = "hijacked-ground-truth"

    def __init__(
        self, user_task: BaseUserTask[Any], injection_task: BaseInjectionTask[Any]
    ) -> None:
        self._user = GroundTruthPipeline(user_task)
        self._injection = GroundTruthPipeline(injection_task)

    def query(
        self,
        query: str,
        runtime: FunctionsRuntime,
        env: Any = EmptyEnv(),  # noqa: B008 - AgentDojo's own signature
        messages: Sequence[ChatMessage] = (),
        extra_args: dict[str, Any] | None = None,
    ) -> tuple[str, FunctionsRuntime, Any, Sequence[ChatMessage], dict[str, Any]]:
        extra = extra_args or {}
        query, runtime, env, messages, extra = self._user.query(
            query, runtime, env, messages, extra
        )
        return self._injection.query(query, runtime, env, messages, extra)


def _ground_truth(
    suite: TaskSuite[Any],
    user_task: BaseUserTask[Any],
    injection_task: BaseInjectionTask[Any] | None,
) -> BasePipelineElement:
    del suite, injection_task
    pipeline = GroundTruthPipeline(user_task)
    pipeline.name = "ground-truth"
    return pipeline


def _hijacked(
    suite: TaskSuite[Any],
    user_task: BaseUserTask[Any],
    injection_task: BaseInjectionTask[Any] | None,
) -> BasePipelineElement:
    if injection_task is None:
        return _ground_truth(suite, user_task, None)
    return HijackedGroundTruth(user_task, injection_task)


def _from_file(spec: str) -> PipelineFactory:
    path, _, name = spec.rpartition(":")
    if not path or not name or not path.endswith(".py"):
        raise ConfigError(f"--pipeline {spec!r}: one of {', '.join(BUILT_IN)}, or FILE.py:FACTORY")
    if not Path(path).is_file():
        raise ConfigError(f"--pipeline {spec!r}: no file {path!r}")
    module_spec = importlib.util.spec_from_file_location(
        f"_litmus_pipeline_{Path(path).stem}", path
    )
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"--pipeline {spec!r}: cannot load {path!r}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ConfigError(f"--pipeline {spec!r}: {path!r} has no function {name!r}")
    accepted = set(inspect.signature(factory).parameters)

    def make(
        suite: TaskSuite[Any],
        user_task: BaseUserTask[Any],
        injection_task: BaseInjectionTask[Any] | None,
    ) -> BasePipelineElement:
        given = {"suite": suite, "user_task": user_task, "injection_task": injection_task}
        pipeline = factory(**{k: v for k, v in given.items() if k in accepted})
        if not isinstance(pipeline, BasePipelineElement):
            raise ConfigError(f"{spec}: returned {type(pipeline).__name__}, not a pipeline")
        return pipeline

    return make


def pipeline_factory(spec: str | PipelineFactory) -> PipelineFactory:
    """The factory a ``--pipeline`` value names (a factory is returned as it is).

    Raises:
        ConfigError: neither a built-in name nor a loadable ``FILE.py:FACTORY``.
    """
    if callable(spec):
        return spec
    if spec == "ground-truth":
        return _ground_truth
    if spec == "hijacked-ground-truth":
        return _hijacked
    return _from_file(spec)


def agent_name(pipeline: BasePipelineElement) -> str:
    """The episode's agent: the pipeline's name, else its class."""
    return pipeline.name or type(pipeline).__name__
