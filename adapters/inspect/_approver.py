"""The approver ``litmus_sandbox/policy``: a litmus policy file decides tool calls.

A tool the policy puts in ``deny`` mode is rejected with the policy's message (the step is
``denied``, with the approval in ``meta.inspect.approval``); every other call is approved.
Inspect matches an approver's tool globs against ``"fn(args...)"`` with ``*`` appended, so
``tools: "delete"`` also matches ``delete_file``; the policy's own patterns match tool
names exactly (globs only where written).

On its first decision in a sample, the approver logs its policy's modes
(``InfoEvent(source="litmus-sandbox")``, ``{"litmus": {"setup": {"tool_modes"}}}``), which
the episode's header takes as its ``tool_modes`` (``_setup.py``). An approver can only
approve or reject: a tool its policy stubs or swallows must also be wrapped with
``litmus_tool`` for that mode to apply (else the header says the mode was not applied).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from inspect_ai.approval import Approval, Approver, approver
from inspect_ai.log import Transcript, transcript
from inspect_ai.model import ChatMessage
from inspect_ai.tool import ToolCall, ToolCallView

from ._names import local_name
from ._steps import INFO_SOURCE
from ._tool import resolve_policy


@approver(name=local_name("policy"))
def litmus_policy(policy: str | os.PathLike[str]) -> Approver:
    """Approve tool calls as the litmus policy file ``policy`` (TOML) says.

    Raises:
        ConfigError: the policy file is unreadable or invalid.
    """
    resolved = resolve_policy(policy)
    said: Any = {"litmus": {"setup": {"tool_modes": resolved.modes([])}}}
    told: weakref.WeakSet[Transcript] = weakref.WeakSet()

    async def approve(
        message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]
    ) -> Approval:
        current = transcript()
        if current not in told:
            # Once per sample: the policy's modes reach the episode header's tool_modes.
            told.add(current)
            current.info(said, source=INFO_SOURCE)
        tool_policy = resolved.for_tool(call.function)
        if tool_policy.mode == "deny":
            return Approval(decision="reject", explanation=tool_policy.message)
        return Approval(decision="approve", explanation=f"litmus policy: {tool_policy.mode}")

    return approve
