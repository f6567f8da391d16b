"""The approver ``litmus_sandbox/policy``: a litmus policy file decides tool calls.

A tool the policy puts in ``deny`` mode is rejected with the policy's message (the step is
``denied``, with the approval in ``meta.inspect.approval``); every other call is approved.
Inspect matches an approver's tool globs against ``"fn(args...)"`` with ``*`` appended, so
``tools: "delete"`` also matches ``delete_file``; the policy's own patterns match tool
names exactly (globs only where written).
"""

from __future__ import annotations

import os

from inspect_ai.approval import Approval, Approver, approver
from inspect_ai.model import ChatMessage
from inspect_ai.tool import ToolCall, ToolCallView

from ._names import local_name
from ._tool import resolve_policy


@approver(name=local_name("policy"))
def litmus_policy(policy: str | os.PathLike[str]) -> Approver:
    """Approve tool calls as the litmus policy file ``policy`` (TOML) says.

    Raises:
        ConfigError: the policy file is unreadable or invalid.
    """
    resolved = resolve_policy(policy)

    async def approve(
        message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]
    ) -> Approval:
        tool_policy = resolved.for_tool(call.function)
        if tool_policy.mode == "deny":
            return Approval(decision="reject", explanation=tool_policy.message)
        return Approval(decision="approve", explanation=f"litmus policy: {tool_policy.mode}")

    return approve
