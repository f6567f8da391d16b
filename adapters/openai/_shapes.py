"""OpenAI chat messages and Responses items, read into one conversation of turns.

Theory of operation
-------------------
A chat transcript (``messages``) and a Responses one (``input`` items) say the same things
in two shapes. Both are read here into one list of *turns*, in conversation order:

=====================================  ===========================================
chat                                   Responses                       turn
=====================================  ===========================================
system / developer / user message      message item of that role       :class:`Said`
assistant ``content`` / ``refusal``    assistant message item          :class:`Said`
                                       (``output_text`` / ``refusal``)
assistant ``tool_calls[i]``            ``function_call`` item          :class:`Called`
tool message ``{tool_call_id}``        ``function_call_output`` item   :class:`Answered`
=====================================  ===========================================

Custom tools (chat ``type: "custom"`` calls, Responses ``custom_tool_call`` items) are
calls whose arguments are ``{"input": ...}``. Other Responses items (reasoning, built-in
tools) are skipped and counted. An assistant chat message with tool calls and no text
gives no :class:`Said`: the Responses form of the same turn has no message item.

Shapes are checked with msgspec, so a wrong one is one line naming the JSON path
(:class:`ShapeError`). Objects of the ``openai`` package are read through their
``model_dump``: the package is never imported. Nothing here does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from litmus_sandbox._model.records import Role


class ShapeError(ValueError):
    """A message or item not of the shape the API gives (``str(exc)`` says where)."""


class Said(NamedTuple):
    """A message: who said it, its text, whether it is an explicit refusal."""

    role: Role
    text: str
    refusal: bool | None
    meta: dict[str, Any]


class Called(NamedTuple):
    """A tool call as the model listed it (arguments decoded, or why they could not be)."""

    call_id: str
    tool: str
    args: dict[str, Any]
    meta: dict[str, Any]


class Answered(NamedTuple):
    """What the agent was shown for call ``call_id``: MCP-style content blocks."""

    call_id: str
    content: tuple[dict[str, Any], ...]


Turn = Said | Called | Answered


# ---------------------------------------------------------------- shapes


class _Function(msgspec.Struct):
    name: str
    arguments: str


class _Custom(msgspec.Struct):
    name: str
    input: str


class _ToolCall(msgspec.Struct):
    id: str
    type: str = "function"
    function: _Function | None = None
    custom: _Custom | None = None


class _ChatMessage(msgspec.Struct):
    role: str
    content: Any = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None


class _Item(msgspec.Struct):
    """Every Responses input item kind this reads, by ``type`` (a message may omit it)."""

    type: str = "message"
    role: str | None = None
    content: Any = None
    call_id: str | None = None
    name: str | None = None
    arguments: Any = None
    input: Any = None
    output: Any = None


def plain(value: Any) -> Any:
    """``value`` as plain JSON data: an ``openai`` object through its ``model_dump``."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_none=True)
    return value


def _convert(value: Any, kind: type[msgspec.Struct], where: str) -> Any:
    try:
        return msgspec.convert(plain(value), kind)
    except msgspec.ValidationError as exc:
        text = str(exc).replace("`$", f"`{where}", 1)
        raise ShapeError(text) from None


#: Message roles as steps: a developer message is the system's, said so in ``meta``.
_ROLES: dict[str, Role] = {"system": "system", "developer": "system", "user": "user"}
#: Text parts, in user and assistant content of both APIs, and in tool results.
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def _parts(content: Any, where: str) -> tuple[list[str], list[str], int]:
    """A message's content as (texts, refusal texts, parts that are not text)."""
    if content is None:
        return [], [], 0
    if isinstance(content, str):
        return [content], [], 0
    if not isinstance(content, list):
        raise ShapeError(f"Expected `str | array`, got `{type(content).__name__}` - at `{where}`")
    texts: list[str] = []
    refusals: list[str] = []
    other = 0
    for i, part in enumerate(plain(p) for p in content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            refusals.append(part["refusal"])
        elif isinstance(kind, str):
            other += 1
        else:
            raise ShapeError(f"Expected a content part with a `type` - at `{where}[{i}]`")
    return texts, refusals, other


def _said(
    role: Role, texts: list[str], refusals: list[str], other: int, api_role: str | None = None
) -> Said:
    facts: dict[str, Any] = {"role": api_role} if api_role is not None else {}
    if other:
        facts["non_text_parts"] = other
    return Said(
        role,
        "\n".join([*texts, *refusals]),
        True if refusals else None,
        {"openai": facts} if facts else {},
    )


def blocks(output: Any, where: str) -> tuple[dict[str, Any], ...]:
    """A tool result (a string, or a list of content parts) as content blocks."""
    if output is None or output == "":
        return ()
    if isinstance(output, str):
        return ({"type": "text", "text": output},)
    if not isinstance(output, list):
        raise ShapeError(f"Expected `str | array`, got `{type(output).__name__}` - at `{where}`")
    out: list[dict[str, Any]] = []
    for i, part in enumerate(plain(p) for p in output):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ShapeError(f"Expected a content part with a `type` - at `{where}[{i}]`")
        if part["type"] in _TEXT_PARTS:
            out.append({"type": "text", "text": str(part.get("text", ""))})
        else:
            out.append(part)
    return tuple(out)


def arguments(raw: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A call's ``arguments`` string as (args, meta): JSON that is not an object gives
    ``{}``, and the meta keeps the raw text and says it was invalid."""
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError:
        args = None
    if isinstance(args, dict):
        return args, {}
    return {}, {"openai": {"arguments_raw": raw, "arguments_invalid": True}}


def _call(call_id: str, name: str, raw: str, custom: bool) -> Called:
    if custom:
        return Called(call_id, name, {"input": raw}, {"openai": {"tool_type": "custom"}})
    args, meta = arguments(raw)
    return Called(call_id, name, args, meta)


# ---------------------------------------------------------------- chat


def chat_turns(message: Any, where: str = "$") -> list[Turn]:
    """The turns of one chat message (a dict, or an ``openai`` message object).

    Raises:
        ShapeError: not a chat message of a known role, or a field of the wrong type.
    """
    msg: _ChatMessage = _convert(message, _ChatMessage, where)
    if msg.role in _ROLES:
        texts, refusals, other = _parts(msg.content, f"{where}.content")
        role = "developer" if msg.role == "developer" else None
        return [_said(_ROLES[msg.role], texts, refusals, other, role)]
    if msg.role == "tool":
        if msg.tool_call_id is None:
            raise ShapeError(f"Expected `tool_call_id` in a tool message - at `{where}`")
        return [Answered(msg.tool_call_id, blocks(msg.content, f"{where}.content"))]
    if msg.role != "assistant":
        raise ShapeError(f"Unknown message role {msg.role!r} - at `{where}.role`")
    texts, refusals, other = _parts(msg.content, f"{where}.content")
    if msg.refusal:
        refusals.append(msg.refusal)
    turns: list[Turn] = []
    calls = msg.tool_calls or []
    if any(texts) or refusals or other or not calls:
        turns.append(_said("assistant", texts, refusals, other))
    for i, call in enumerate(calls):
        spec = call.custom if call.type == "custom" else call.function
        if spec is None:
            raise ShapeError(
                f"Expected `{call.type}` in a tool call - at `{where}.tool_calls[{i}]`"
            )
        raw = spec.input if isinstance(spec, _Custom) else spec.arguments
        turns.append(_call(call.id, spec.name, raw, isinstance(spec, _Custom)))
    return turns


def chat_conversation(messages: Sequence[Any], where: str = "$.messages") -> list[Turn]:
    """The turns of a whole chat transcript, in order."""
    out: list[Turn] = []
    for i, message in enumerate(messages):
        out.extend(chat_turns(message, f"{where}[{i}]"))
    return out


# ---------------------------------------------------------------- Responses


def response_turns(
    item: Any, where: str = "$", skipped: dict[str, int] | None = None
) -> list[Turn]:
    """The turns of one Responses input or output item; items of other kinds are counted
    in ``skipped`` (by type) and give none.

    Raises:
        ShapeError: a message, call or call output of the wrong shape.
    """
    it: _Item = _convert(item, _Item, where)
    if it.type == "message":
        if it.role in _ROLES:
            texts, refusals, other = _parts(it.content, f"{where}.content")
            role = "developer" if it.role == "developer" else None
            return [_said(_ROLES[it.role], texts, refusals, other, role)]
        if it.role == "assistant":
            return [_said("assistant", *_parts(it.content, f"{where}.content"))]
        raise ShapeError(f"Unknown message role {it.role!r} - at `{where}.role`")
    if it.type in ("function_call", "custom_tool_call"):
        custom = it.type == "custom_tool_call"
        raw = it.input if custom else it.arguments
        if not isinstance(it.call_id, str) or not isinstance(it.name, str):
            raise ShapeError(f"Expected `call_id` and `name` in a {it.type} - at `{where}`")
        if not isinstance(raw, str):
            field = "input" if custom else "arguments"
            raise ShapeError(f"Expected `str`, got `{type(raw).__name__}` - at `{where}.{field}`")
        return [_call(it.call_id, it.name, raw, custom)]
    if it.type in ("function_call_output", "custom_tool_call_output"):
        if not isinstance(it.call_id, str):
            raise ShapeError(f"Expected `call_id` in a {it.type} - at `{where}`")
        return [Answered(it.call_id, blocks(it.output, f"{where}.output"))]
    if skipped is not None:
        skipped[it.type] = skipped.get(it.type, 0) + 1
    return []


def response_conversation(
    items: Iterable[Any] | str, where: str = "$.input", skipped: dict[str, int] | None = None
) -> list[Turn]:
    """The turns of a whole Responses ``input`` (a string is one user message)."""
    if isinstance(items, str):
        return [Said("user", items, None, {})]
    out: list[Turn] = []
    for i, item in enumerate(items):
        out.extend(response_turns(item, f"{where}[{i}]", skipped))
    return out


def finish_refusal(choice: Mapping[str, Any]) -> bool:
    """Whether a chat choice ended by the content filter (a refusal by the API)."""
    return choice.get("finish_reason") == "content_filter"
