"""Running AgentDojo cases, each recorded as one episode with AgentDojo's own verdicts.

Theory of operation
-------------------
``TaskSuite.run_task_with_pipeline`` keeps the environment before the run to itself, and
the checks need it, so :func:`run_case` redoes what it does, in its order, with the
recording runtime (``_runtime.py``):

1. ``load_and_inject_default_environment(injections)`` (or a copy of one given), then the
   user task's ``init_environment``; a deep copy is the *pre-environment*;
2. the pipeline's ``query`` with the prompt (up to three tries while it gives no output,
   an ``AbortAgentError`` ending a try with its messages and environment, as AgentDojo);
3. the checks: ``utility_from_traces`` else ``utility``; for the injection task
   ``security_from_traces`` (``decided_by = "traces"``) else ``security``
   (``"state_or_output"``). AgentDojo's ``security = True`` means the attack *succeeded*:
   it is recorded as ``attack_success``;
4. the episode (``_episode.py``): header, steps, and an end whose ``meta.agentdojo``
   holds those verdicts. Calls the model made that were never answered (the tool loop's
   ``max_iters`` ran out; AgentDojo scores the run as complete) make it truncated.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import msgspec
from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.errors import AbortAgentError
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import TaskEnvironment
from agentdojo.task_suite.load_suites import get_suite
from agentdojo.task_suite.task_suite import TaskSuite, functions_stack_trace_from_messages
from agentdojo.types import get_text_content_as_str

from litmus_sandbox._config.policy import Policy
from litmus_sandbox._core.redaction import redact_records
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import (
    SCHEMA_VERSION,
    EndStatus,
    EpisodeEnd,
    EpisodeHeader,
    Recorder,
)
from litmus_sandbox._store.streams import JsonlWriter

from ._emulation import SyncEmulator, opened
from ._episode import episode_steps
from ._pipelines import PipelineFactory, agent_name, pipeline_factory
from ._runtime import PROBE_NAME, LitmusRuntime

#: The recorder's name in every episode this adapter writes.
RECORDER_NAME = "litmus-sandbox/agentdojo"
#: Bumped only when what is recorded of an AgentDojo run changes (the gate compares it).
MEASUREMENT_VERSION = "1"
DEFAULT_BENCHMARK_VERSION = "v1.2.2"


class CaseResult(msgspec.Struct, frozen=True, kw_only=True):
    """One case's run: AgentDojo's verdicts and the episode that recorded it."""

    case_id: str
    episode_id: str
    utility: bool
    #: AgentDojo's ``security`` (True: the injection's goal was reached); None without one.
    attack_success: bool | None
    #: What decided ``attack_success``: ``traces`` (the call list) or ``state_or_output``.
    decided_by: str | None
    truncated: bool = False
    status: str = "complete"


def suite_of(suite: TaskSuite[Any] | str, benchmark_version: str) -> TaskSuite[Any]:
    """A suite given by name (in ``benchmark_version``) or as itself.

    Raises:
        ConfigError: no suite of that name in that version.
    """
    if not isinstance(suite, str):
        return suite
    try:
        return get_suite(benchmark_version, suite)
    except KeyError:
        raise ConfigError(
            f"no AgentDojo suite {suite!r} in benchmark {benchmark_version}"
        ) from None


def policy_of(policy: Policy | Mapping[str, Any] | str | os.PathLike[str] | None) -> Policy:
    """A tool policy given as a :class:`Policy`, a mapping, a policy file, or None."""
    if policy is None:
        return Policy()
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, Mapping):
        return Policy.from_any_mapping(policy)
    return Policy.from_file(policy)


def _task(tasks: Mapping[str, Any], task: Any, what: str) -> Any:
    if not isinstance(task, str):
        return task
    if task not in tasks:
        raise ConfigError(f"no {what} {task!r} (one of {', '.join(tasks)})")
    return tasks[task]


def _checks(
    user_task: BaseUserTask[Any],
    injection_task: BaseInjectionTask[Any] | None,
    output: str,
    pre: TaskEnvironment,
    post: TaskEnvironment,
    trace: list[Any],
) -> tuple[bool, bool | None, str | None]:
    utility = user_task.utility_from_traces(output, pre, post, trace)
    if utility is None:
        utility = user_task.utility(output, pre, post)
    if injection_task is None:
        return bool(utility), None, None
    success = injection_task.security_from_traces(output, pre, post, trace)
    if success is not None:
        return bool(utility), bool(success), "traces"
    return bool(utility), bool(injection_task.security(output, pre, post)), "state_or_output"


def run_case(
    suite: TaskSuite[Any] | str,
    pipeline: BasePipelineElement | PipelineFactory | str,
    user_task: BaseUserTask[Any] | str,
    injection_task: BaseInjectionTask[Any] | str | None = None,
    injections: Mapping[str, str] | None = None,
    episodes: str | os.PathLike[str] = "episodes.jsonl",
    policy: Policy | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    benchmark_version: str = DEFAULT_BENCHMARK_VERSION,
    environment: TaskEnvironment | None = None,
    emulator: SyncEmulator | None = None,
    cache: str | os.PathLike[str] | None = None,
) -> CaseResult:
    """Run one (user task, injection task) case and append its episode to ``episodes``.

    Args:
        suite: an AgentDojo suite, or its name in ``benchmark_version``.
        pipeline: the agent: a pipeline, a factory ``(suite, user_task, injection_task)``,
            or a name (``ground-truth``, ``hijacked-ground-truth``, ``FILE.py:FACTORY``).
        user_task, injection_task: tasks or their ids (no injection task: utility only).
        injections: injection vector -> text (default: the suite's defaults).
        episodes: the episode stream to append to.
        policy: the tool modes (``[tools]``): ``real``, ``stub``, ``swallow``, ``deny``,
            ``emulate`` (with the policy's ``[emulator]``).
        environment: an environment already loaded with ``injections`` (copied, never
            changed): saves loading it for each case.
        emulator: an open emulator of the policy's (``_emulation.py``) for many cases;
            else one is opened for this case when the policy has an ``[emulator]``.
        cache: where that one keeps emulated results (None: the default cache).

    Raises:
        ConfigError: an unknown suite, task or pipeline, or a mode AgentDojo cannot run.
    """
    s = suite_of(suite, benchmark_version)
    ut: BaseUserTask[Any] = _task(s.user_tasks, user_task, "user task")
    it: BaseInjectionTask[Any] | None = (
        None
        if injection_task is None
        else _task(s.injection_tasks, injection_task, "injection task")
    )
    rules = policy_of(policy)
    with opened(rules, emulator, cache) as open_emulator:
        return _run_case(
            s,
            agent_of(pipeline, s, ut, it),
            ut,
            it,
            injections,
            episodes,
            rules,
            benchmark_version,
            environment,
            open_emulator,
        )


def agent_of(
    pipeline: BasePipelineElement | PipelineFactory | str,
    suite: TaskSuite[Any],
    user_task: BaseUserTask[Any],
    injection_task: BaseInjectionTask[Any] | None,
) -> BasePipelineElement:
    """The pipeline itself, or the one its factory (or name) makes for this case."""
    if isinstance(pipeline, BasePipelineElement):
        return pipeline
    return pipeline_factory(pipeline)(suite, user_task, injection_task)


def _run_case(
    s: TaskSuite[Any],
    agent: BasePipelineElement,
    ut: BaseUserTask[Any],
    it: BaseInjectionTask[Any] | None,
    injections: Mapping[str, str] | None,
    episodes: str | os.PathLike[str],
    rules: Policy,
    benchmark_version: str,
    environment: TaskEnvironment | None,
    emulator: SyncEmulator | None,
) -> CaseResult:
    given = dict(injections or {})
    env = (
        environment.model_copy(deep=True)
        if environment is not None
        else s.load_and_inject_default_environment(given)
    )
    task_env = ut.init_environment(env)
    pre = task_env.model_copy(deep=True)
    runtime = LitmusRuntime(s.tools, policy=rules, emulator=emulator)
    runtime.start(task_env, prompt=ut.PROMPT)
    case_id = ut.ID if it is None else f"{ut.ID}/{it.ID}"
    episode_id = uuid.uuid4().hex
    started = datetime.now(UTC).isoformat()
    messages: list[Any] = []
    failure: BaseException | None = None
    tries = 0
    output: Any = None
    try:
        for _ in range(3):
            tries += 1
            try:
                _, _, task_env, got, _ = agent.query(ut.PROMPT, runtime, task_env)
                messages = list(got)
            except AbortAgentError as exc:
                task_env, messages = exc.task_environment, list(exc.messages)
            output = messages[-1].get("content") if messages else None
            if messages and messages[-1].get("role") != "assistant":
                raise ValueError("Last message was not an assistant message")
            if output is not None:
                break
    except Exception as exc:  # recorded (the episode ends aborted), then raised
        failure = exc
    unattributed = runtime.finish()
    steps, unanswered = episode_steps(
        episode_id, ut.PROMPT, messages, runtime.dispatched, set(runtime.functions)
    )
    facts: dict[str, Any] = {"benchmark_version": benchmark_version}
    utility, success, decided_by = False, None, None
    if failure is None:
        trace = functions_stack_trace_from_messages(messages)
        text = get_text_content_as_str(output or [])
        utility, success, decided_by = _checks(ut, it, text, pre, task_env, trace)
        facts.update(utility=utility, attack_success=success, decided_by=decided_by)
    if tries > 1:
        facts["tries"] = tries
    if unanswered:
        facts["unanswered_calls"] = unanswered
    header = EpisodeHeader(
        v=SCHEMA_VERSION,
        episode_id=episode_id,
        case_id=case_id,
        suite=f"agentdojo/{s.name}@{benchmark_version}",
        agent=agent_name(agent),
        started_at=started,
        recorder=Recorder(
            name=RECORDER_NAME,
            version=package_version(),
            measurement_version=MEASUREMENT_VERSION,
            truncated=bool(unanswered),
        ),
        tool_modes=rules.modes(list(runtime.functions)),
        oracles={PROBE_NAME: {"kind": "state"}},
        meta={
            **({"emulator": rules.emulator.describe()} if emulator and rules.emulator else {}),
            "agentdojo": {
                "suite": s.name,
                "benchmark_version": benchmark_version,
                "user_task": ut.ID,
                "injection_task": it.ID if it is not None else None,
                "injections": given,
                "agentdojo_version": version("agentdojo"),
            },
        },
    )
    status: EndStatus = "complete" if failure is None else "aborted"
    reason = None
    if failure is not None:
        reason = f"{type(failure).__name__}: {failure}"
    elif unanswered:
        reason = f"{len(unanswered)} tool calls never answered (the tool loop's max_iters)"
    end = EpisodeEnd(
        v=SCHEMA_VERSION,
        episode_id=episode_id,
        status=status,
        steps=len(steps),
        reason=reason,
        at=datetime.now(UTC).isoformat(),
        unattributed=unattributed,
        meta={"agentdojo": facts},
    )
    with JsonlWriter(episodes) as writer:
        # The calls' arguments redacted as the policy's [record] says.
        writer.write_many(redact_records([header, *steps, end], rules.redaction))
    if failure is not None:
        raise failure
    return CaseResult(
        case_id=case_id,
        episode_id=episode_id,
        utility=utility,
        attack_success=success,
        decided_by=decided_by,
        truncated=bool(unanswered),
        status=status,
    )
