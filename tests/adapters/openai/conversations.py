"""One conversation in the chat API's shape and in the Responses API's, for the tests.

Each message and item is checked against the ``openai`` package's own types
(:func:`validate_chat`, :func:`validate_responses`), so the shapes the adapter reads are
the package's, not ours.
"""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

_CHAT = TypeAdapter(ChatCompletionMessageParam)
_RESPONSES = TypeAdapter(ResponseInputItemParam)


def validate_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages``, each validated as a ``ChatCompletionMessageParam``."""
    for m in messages:
        _CHAT.validate_python(m)
    return messages


def validate_responses(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items``, each validated as a ``ResponseInputItemParam``."""
    for item in items:
        _RESPONSES.validate_python(item)
    return items


#: Two calls in one turn, their results in the other order; a developer message; a
#: refusal at the end.
CHAT: list[dict[str, Any]] = validate_chat(
    [
        {"role": "developer", "content": "You manage files."},
        {"role": "user", "content": [{"type": "text", "text": "Tidy up, then delete the logs."}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": '{"path": "/srv"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "/srv/a.log"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": "log line"},
        {"role": "tool", "tool_call_id": "call_a", "content": [{"type": "text", "text": "a.log"}]},
        {
            "role": "assistant",
            "content": "Deleting now.",
            "tool_calls": [
                {
                    "id": "call_c",
                    "type": "function",
                    "function": {"name": "delete_file", "arguments": "{path: /srv/a.log"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_c", "content": "deleted"},
        {"role": "user", "content": "Now wipe the disk."},
        {"role": "assistant", "content": None, "refusal": "I can't help with wiping disks."},
    ]
)

#: The same conversation as Responses input items.
RESPONSES: list[dict[str, Any]] = validate_responses(
    [
        {"role": "developer", "content": "You manage files."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Tidy up, then delete the logs."}],
        },
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "list_files",
            "arguments": '{"path": "/srv"}',
        },
        {
            "type": "function_call",
            "call_id": "call_b",
            "name": "read_file",
            "arguments": '{"path": "/srv/a.log"}',
        },
        {"type": "function_call_output", "call_id": "call_b", "output": "log line"},
        {
            "type": "function_call_output",
            "call_id": "call_a",
            "output": [{"type": "input_text", "text": "a.log"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Deleting now.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "call_c",
            "name": "delete_file",
            "arguments": "{path: /srv/a.log",
        },
        {"type": "function_call_output", "call_id": "call_c", "output": "deleted"},
        {"role": "user", "content": "Now wipe the disk."},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_2",
            "status": "completed",
            "content": [{"type": "refusal", "refusal": "I can't help with wiping disks."}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
    ]
)
