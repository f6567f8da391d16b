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
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from inspect_ai.log import transcript
from inspect_ai.tool import Tool, ToolDef, ToolError

from litmus_sandbox import ConfigError, Policy
from litmus_sandbox._runtime.modes import CallEnv, mode_for
from litmus_sandbox._runtime.steps import CallSteps

from ._steps import INFO_SOURCE, as_json

#: Bytes of a result recorded in the InfoEvent (the agent always gets the whole).
RECORD_CAP = 64 * 1024


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


def litmus_tool(tool: Tool, *, policy: Policy | str | os.PathLike[str] | Mapping[str, Any]) -> Tool:
    """Wrap the Inspect ``tool`` so the litmus fidelity ``policy`` applies to its calls.

    Args:
        tool: an Inspect tool (what a ``@tool`` function returns).
        policy: a :class:`~litmus_sandbox.Policy`, a policy file (TOML), or a mapping;
            the tool's entry (by its name, a glob or ``default``) says its mode.

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
        performed = await mode.perform(call, tool_policy, env, runner)
        step = performed.step
        transcript().info(
            {
                "litmus": {
                    "tool": name,
                    "mode": tool_policy.mode,
                    "fidelity": step.fidelity,
                    "shown": as_json(step.shown),
                    "actual": as_json(step.actual),
                }
            },
            source=INFO_SOURCE,
        )
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
