"""``litmus_tool``: a host-side Inspect tool under a litmus fidelity policy.

Agents such as ``react()`` keep their tools private, so stubbing, swallowing or denying a
host-side ``@tool`` takes the task author's one line::

    tools = [litmus_tool(send_email(), policy="litmus.toml")]

Each call of the wrapped tool is performed by the fidelity mode its policy names (the
runtime's :mod:`~litmus_sandbox._runtime.modes`, the same as ``Sandbox``): ``real`` runs
the tool and gives the agent exactly what it gave (its exceptions included); ``stub``,
``swallow`` and ``deny`` answer as the policy says (``deny`` as a tool error). Inside the
tool's span, an ``InfoEvent(source="litmus-sandbox")`` then says what happened:
``{"litmus": {"tool", "mode", "fidelity", "shown", "actual"}}``; the log import and the recorder
hooks read it, so the step says ``swallowed`` with the real outcome in ``actual`` where
Inspect's log alone would show an empty result. ``replay`` needs recorded episodes, which an
Inspect tool has none of: it is refused when the tool is wrapped.

``emulate`` never runs the tool: the policy's ``[emulator]`` answers, told the tool's
description and parameters (as the model sees them) and the sample's earlier calls of
wrapped tools with what they gave (a tool sees nothing else of the conversation); the
InfoEvent carries its ``meta.emulator``, and an emulator's error is a tool error.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Mapping
from typing import Any

from inspect_ai.log import Transcript, transcript
from inspect_ai.tool import Tool, ToolDef, ToolError

from litmus_sandbox import ConfigError, Policy
from litmus_sandbox._core.emulation import History, ToolSpec
from litmus_sandbox._runtime.emulator import Emulator
from litmus_sandbox._runtime.modes import CallEnv, Performed, mode_for
from litmus_sandbox._runtime.steps import CallSteps

from ._steps import INFO_SOURCE, as_json

#: Bytes of a result recorded in the InfoEvent (the agent always gets the whole).
RECORD_CAP = 64 * 1024
#: Per sample (its transcript), the calls of wrapped tools so far: an emulator's history.
_HISTORIES: weakref.WeakKeyDictionary[Transcript, History] = weakref.WeakKeyDictionary()
#: The samples (transcripts) told the emulator's parameters already (for their header).
_TOLD_EMULATOR: weakref.WeakSet[Transcript] = weakref.WeakSet()


def resolve_policy(policy: Policy | str | os.PathLike[str] | Mapping[str, Any]) -> Policy:
    """A :class:`~litmus_sandbox.Policy` from one, a policy file's path, or a mapping.

    Raises:
        ConfigError: an unreadable or invalid policy.
    """
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str | os.PathLike):
        return Policy.from_file(policy)
    return Policy.from_any_mapping(policy)


def litmus_tool(
    tool: Tool,
    *,
    policy: Policy | str | os.PathLike[str] | Mapping[str, Any],
    cache: str | os.PathLike[str] | None = None,
) -> Tool:
    """Wrap the Inspect ``tool`` so the litmus fidelity ``policy`` applies to its calls.

    Args:
        tool: an Inspect tool (what a ``@tool`` function returns).
        policy: a :class:`~litmus_sandbox.Policy`, a policy file (TOML), or a mapping;
            the tool's entry (by its name, a glob or ``default``) says its mode.
        cache: where an emulated tool's results are kept (None: the step-verdict cache's
            default).

    Returns:
        A tool of the same name, description and parameters.

    Raises:
        ConfigError: an invalid policy, or the tool's mode is ``replay``.
    """
    tdef = ToolDef(tool)
    name = tdef.name
    resolved = resolve_policy(policy)
    tool_policy = resolved.for_tool(name)
    if tool_policy.mode == "replay":
        raise ConfigError(f"{name}: an Inspect tool cannot be replayed (no recorded episodes)")
    mode = mode_for(tool_policy.mode)
    env = CallEnv(tools={}, cap=RECORD_CAP)
    said_mode = resolved.modes([name])[name]  # an emulated tool's names its emulator
    spec = ToolSpec(
        name=name,
        description=tdef.description or None,
        input_schema=tdef.parameters.model_dump(mode="json", exclude_none=True),
    )
    calls = 0

    async def execute(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        returned: list[Any] = []
        raised: list[BaseException] = []

        async def runner(_name: str, args: dict[str, Any]) -> Any:
            try:
                value = await tool(**args)
            except Exception as exc:
                raised.append(exc)
                raise
            returned.append(value)
            return value

        call = CallSteps("inspect", f"{name}:{calls}", name, dict(kwargs))
        sample = transcript()
        history = _HISTORIES.setdefault(sample, History())
        if tool_policy.mode == "emulate":
            if sample not in _TOLD_EMULATOR and resolved.emulator is not None:
                # Once a sample: the header keeps the parameters (the key's variable only).
                _TOLD_EMULATOR.add(sample)
                setup: dict[str, Any] = {"setup": {"emulator": resolved.emulator.describe()}}
                sample.info({"litmus": setup}, source=INFO_SOURCE)
            performed = await _emulated(resolved, spec, cache, call, history)
        else:
            performed = await mode.perform(call, tool_policy, env, runner)
        step = performed.step
        history.add_call(name, call.args, as_json(step.shown))
        said: dict[str, Any] = {
            "tool": name,
            "mode": said_mode,
            "fidelity": step.fidelity,
            "shown": as_json(step.shown),
            "actual": as_json(step.actual),
        }
        if "emulator" in step.meta:
            said["emulator"] = step.meta["emulator"]
        transcript().info({"litmus": said}, source=INFO_SOURCE)
        if step.fidelity == "real":
            # Transparent: the agent gets what the tool gave, exceptions included.
            if raised:
                raise raised[0]
            return returned[0] if returned else ""
        shown = performed.whole or step.shown
        text = shown.text()
        if not text and shown.structured is not None:
            text = json.dumps(shown.structured)
        if shown.is_error:
            raise ToolError(text)
        return text

    return ToolDef(
        execute,
        name=name,
        description=tdef.description,
        parameters=tdef.parameters,
        parallel=tdef.parallel,
        viewer=tdef.viewer,
        model_input=tdef.model_input,
        max_output=tdef.max_output,
        options=tdef.options,
    ).as_tool()


async def _emulated(
    policy: Policy,
    spec: ToolSpec,
    cache: str | os.PathLike[str] | None,
    call: CallSteps,
    history: History,
) -> Performed:
    """``call`` answered by the policy's emulator (a session of its own for the call)."""
    assert policy.emulator is not None  # a policy that emulates a tool has one
    async with Emulator(policy.emulator, redaction=policy.redaction, cache=cache) as emulator:
        emulator.describe_tools({spec.name: spec})
        env = CallEnv(tools={}, cap=RECORD_CAP, emulator=emulator)
        env.history = history
        return await mode_for("emulate").perform(call, policy.for_tool(spec.name), env, None)
