"""Live OpenAI-style tool loops: record a model's turn and run its calls under the policy.

Theory of operation
-------------------
An agent loop that talks to an OpenAI-compatible API hands each model turn to one helper,
and appends what it returns to the conversation::

    message = completion.choices[0]
    messages += [message, *await run_chat_tool_calls(ep, message)]      # chat
    items += [*response.output, *await run_response_function_calls(ep, response.output)]

The turn is read by the importer's own code (``_shapes.py``), so a live episode and the
imported transcript of the same conversation have the same steps. The assistant's words
are a message step (``refusal = true`` for an API refusal, or a chat choice cut by the
content filter); each call then runs through ``ep.call_with`` under the sandbox policy,
in the order the model listed them. Its step's ``call_id`` is the model's id, as the import
gives (``meta.openai.call_id`` too, and ``meta.openai.tool_call_id`` for a chat call), unless
the episode already has a step with that id (a model that reuses ids, or gives none): then
the step keeps the sandbox's own id, ``<episode_id>:<n>`` for the episode's n-th call, which
is also what the probes' windows and an unattributed effect's ``during`` name. A call that
cannot run - arguments that are not a JSON object,
a tool the sandbox does not have - is answered with an error by the helper (the step is
``denied``, with ``meta.openai`` saying why), so the model can correct itself and the
loop goes on. Plain dicts and ``openai`` objects are accepted alike; the package is never
imported.

A tool the policy emulates need not exist: the ``[emulator]`` answers for it, told what
:func:`describe_tools` said of it (the ``tools`` the loop sends the model: each function's
description and parameters' schema).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import msgspec

from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Actual, Shown, ToolCallStep
from litmus_sandbox._runtime.recorder import Recording
from litmus_sandbox._runtime.sandbox import Sandbox
from litmus_sandbox._runtime.tool_calls import ToolResult

from ._shapes import Called, Said, ShapeError, Turn, chat_turns, finish_refusal, plain
from ._shapes import response_turns as _response_turns

#: Modes in which a call reaches a registered tool (so a missing one cannot serve it).
_RUNS_THE_TOOL = frozenset({"real", "swallow"})


def _record_said(ep: Recording, said: Said, refusal: bool) -> None:
    ep.message(said.role, said.text, refusal=True if refusal else said.refusal)


def _has_tool(ep: Recording, tool: str) -> bool:
    sandbox = getattr(ep, "sandbox", None)
    if sandbox is None:
        return True  # nothing to check against: the recorder says what it can
    if tool in sandbox.tools:
        return True
    return sandbox.policy.for_tool(tool).mode not in _RUNS_THE_TOOL


#: Per open episode, the call ids its steps already have (a step's id is unique in it).
_USED_IDS: weakref.WeakKeyDictionary[Recording, set[str]] = weakref.WeakKeyDictionary()


def _step_id(ep: Recording, model_id: str, own_id: str) -> str:
    """The id ``ep``'s next call step is recorded under: the model's, unless taken."""
    used = _USED_IDS.setdefault(ep, set())
    chosen = model_id if model_id and model_id not in used else own_id
    used.add(chosen)
    return chosen


async def _run(ep: Recording, call: Called, api: str) -> ToolResult:
    """Run ``call`` under the sandbox policy; its step is named by the model's call id."""
    facts: dict[str, Any] = {"call_id": call.call_id, **call.meta.get("openai", {})}
    if api == "chat":
        facts["tool_call_id"] = call.call_id
    refusal: str | None = None
    if facts.get("arguments_invalid"):
        refusal = "the arguments are not a JSON object; call the tool again with valid arguments"
    elif not _has_tool(ep, call.tool):
        refusal = f"there is no tool named {call.tool!r}"
        facts["unknown_tool"] = True

    async def answer(tool: str, args: dict[str, Any]) -> Shown:
        del tool, args
        return Shown(content=({"type": "text", "text": refusal or ""},), is_error=True)

    def finalize(step: ToolCallStep) -> ToolCallStep:
        named = _step_id(ep, call.call_id, step.call_id)
        meta = {**step.meta, "openai": {**step.meta.get("openai", {}), **facts}}
        step = msgspec.structs.replace(step, call_id=named, meta=meta)
        if refusal is not None and step.fidelity in ("real", "swallowed"):
            # Nothing ran (the helper answered for the tool): told so, and recorded so.
            told = Shown(content=({"type": "text", "text": refusal},), is_error=True)
            return msgspec.structs.replace(
                step, fidelity="denied", shown=told, actual=Actual(outcome="not_run")
            )
        return step

    runner = answer if refusal is not None else None
    # Unreadable arguments: no mode may answer (an emulator asked with {} would make up
    # a success). A tool the sandbox lacks may still be stubbed or emulated.
    refuse = refusal if facts.get("arguments_invalid") else None
    return await ep.call_with(runner, call.tool, call.args, finalize=finalize, refuse=refuse)


async def _run_turns(
    ep: Recording, turns: list[Turn], refusal: bool, api: str
) -> list[tuple[str, str]]:
    """Record the said turns and run the calls; (call id, text shown) per call, in order."""
    out: list[tuple[str, str]] = []
    for turn in turns:
        if isinstance(turn, Said):
            _record_said(ep, turn, refusal)
        elif isinstance(turn, Called):
            result = await _run(ep, turn, api)
            out.append((turn.call_id, result.text))
    return out


async def run_chat_tool_calls(ep: Recording, choice_or_message: Any) -> list[dict[str, Any]]:
    """Record an assistant chat turn and run its tool calls under the sandbox policy.

    Args:
        ep: the episode open in the sandbox (``async with sandbox.episode(...) as ep``).
        choice_or_message: a chat completion choice (``completion.choices[0]``), its
            ``message``, or the whole completion (its first choice); dicts or ``openai``
            objects.

    Returns:
        The tool messages to append, one per call in order:
        ``{"role": "tool", "tool_call_id", "content"}``.

    Raises:
        ConfigError: not an assistant message of the chat API's shape.
    """
    data = plain(choice_or_message)
    if isinstance(data, dict) and isinstance(data.get("choices"), list) and data["choices"]:
        data = plain(data["choices"][0])
    if not isinstance(data, dict):
        raise ConfigError(f"expected a chat choice or message, got {type(data).__name__}")
    refusal = False
    message: Any = data
    if "message" in data:
        refusal = finish_refusal(data)
        message = data["message"]
    try:
        turns = chat_turns(message)
    except ShapeError as exc:
        raise ConfigError(f"not a chat message: {exc}") from None
    if plain(message).get("role") != "assistant":
        raise ConfigError("run_chat_tool_calls records an assistant message")
    done = await _run_turns(ep, turns, refusal, "chat")
    return [{"role": "tool", "tool_call_id": cid, "content": text} for cid, text in done]


async def run_response_function_calls(ep: Recording, output_items: Any) -> list[dict[str, Any]]:
    """Record a Responses turn (its ``output`` items) and run its function calls.

    Args:
        ep: the episode open in the sandbox.
        output_items: ``response.output`` (dicts or ``openai`` objects), or the response.

    Returns:
        The ``function_call_output`` items to send back, one per call in order:
        ``{"type": "function_call_output", "call_id", "output"}`` (custom tool calls get
        ``custom_tool_call_output`` items).

    Raises:
        ConfigError: an item not of the Responses API's shape.
    """
    data = plain(output_items)
    items: Iterable[Any] = data["output"] if isinstance(data, dict) and "output" in data else data
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise ConfigError(f"expected Responses output items, got {type(items).__name__}")
    turns: list[Turn] = []
    try:
        for i, item in enumerate(items):
            turns.extend(_response_turns(item, f"$[{i}]", {}))
    except ShapeError as exc:
        raise ConfigError(f"not a Responses item: {exc}") from None
    custom = {
        t.call_id
        for t in turns
        if isinstance(t, Called) and "tool_type" in t.meta.get("openai", {})
    }
    done = await _run_turns(ep, turns, False, "responses")
    return [
        {
            "type": "custom_tool_call_output" if cid in custom else "function_call_output",
            "call_id": cid,
            "output": text,
        }
        for cid, text in done
    ]


def describe_tools(target: Sandbox | Recording, tools: Iterable[Any]) -> list[str]:
    """Tell the sandbox's emulator the tools a loop offers the model (nothing without one).

    Args:
        target: the sandbox, or an episode open in it.
        tools: the ``tools`` of a chat request (``{"type": "function", "function": {...}}``)
            or of a Responses request (``{"type": "function", "name", ...}``, custom
            tools too); dicts or ``openai`` objects.

    Returns:
        The names of the tools described.

    Raises:
        ConfigError: not a list of tool definitions, or an episode of no sandbox.
    """
    sandbox = target if isinstance(target, Sandbox) else getattr(target, "sandbox", None)
    if not isinstance(sandbox, Sandbox):
        raise ConfigError("describe_tools needs a Sandbox, or an episode open in one")
    data = plain(tools)
    if isinstance(data, str | bytes | dict) or not isinstance(data, Iterable):
        raise ConfigError(f"expected a list of tool definitions, got {type(data).__name__}")
    found: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(data):
        tool = plain(item)
        entry = tool.get("function", tool) if isinstance(tool, dict) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(name, str):
            raise ConfigError(f"tools[{i}] is not a tool definition with a name")
        found[name] = entry
    sandbox.describe_tools(found)
    return list(found)
