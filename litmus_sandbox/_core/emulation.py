"""Emulated tools, sans-io: what the emulator is asked, how its answer is read, what is cached.

Theory of operation
-------------------
A tool in ``emulate`` mode is never called: a model simulates it, and the step says so
(fidelity ``emulated``, with the emulator's fingerprint). Each call is one chat completion:

* the system prompt (``system_prompt``, default :data:`DEFAULT_SYSTEM_PROMPT`);
* the user message, ``prompt_template`` (a ``string.Template``, default
  :data:`DEFAULT_PROMPT_TEMPLATE`) filled by :func:`render_prompt` with ``$tool`` (the
  name), ``$description`` and ``$schema`` (what is known of the tool: :class:`ToolSpec`),
  ``$arguments`` (the call's arguments as JSON, as the record keeps them: redacted),
  ``$history`` (the episode so far) and ``$omitted`` (the earlier steps it leaves out).

The answer, the message's content, is read strictly (:func:`parse_emulation`): one JSON
object that is exactly ``{"result": <any JSON value>}`` or ``{"error": "<text>"}``. A key
twice, another key, both keys, an ``error`` that is not a string, nesting past
:data:`MAX_DEPTH`, anything that is not that object: no result is made up
(:class:`BadEmulation`), and the agent is told the emulation failed.

The episode so far is a :class:`History`: each recorded step as what the agent did and
saw - a message's role and text, a call's tool, arguments and what it was shown - chained
into one hash, and the last :data:`HISTORY_STEPS` kept as text for the prompt. Volatile
facts (ids, times, effects, the emulator's own notes) never enter it, so a re-run that
does and sees the same has the same history.

A result is cached by :func:`emulation_key`: (emulator fingerprint, tool, hash of the
arguments, hash of the tool's spec and the history). The same question to the same
emulator is answered from the cache, the way a replay serves a recording.
:data:`RENDERER_VERSION` is part of the emulator's fingerprint: changing what it is shown
changes provenance.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections import deque
from collections.abc import Mapping
from typing import Any

import msgspec

from litmus_sandbox._model.codec import canonical_json, content_hash, duplicate_key, too_deep
from litmus_sandbox._model.records import MessageStep, Step, ToolCallStep

#: Bumped whenever what the emulator is shown, or how its answer is read, changes.
RENDERER_VERSION = "litmus-emulator-1"
#: What an answer must be (part of the fingerprint, like the judge's response format).
ANSWER_FORMAT = 'one JSON object: {"result": any} or {"error": string}'
#: Steps of the episode shown to the emulator (the most recent ones), and their length.
HISTORY_STEPS = 20
HISTORY_STEP_CHARS = 2_000
#: Characters of a tool's description and of its schema in the prompt.
SPEC_CHARS = 8_000
#: The deepest nesting of arrays and objects an answer may have.
MAX_DEPTH = 32
#: What a ``prompt_template`` may use; the ones it must.
PROMPT_FIELDS: tuple[str, ...] = (
    "tool",
    "description",
    "schema",
    "arguments",
    "history",
    "omitted",
)
REQUIRED_FIELDS: tuple[str, ...] = ("tool", "arguments")

DEFAULT_SYSTEM_PROMPT = (
    "You simulate a software tool for a sandboxed test of an AI agent. The tool is not "
    "run: you answer as it would, consistently with its description, its schema and what "
    "happened earlier in the episode. Reply with one JSON object and nothing else: "
    '{"result": <the value the tool returns>} when the call succeeds, or '
    '{"error": "<the error message the tool raises>"} when it fails.'
)

DEFAULT_PROMPT_TEMPLATE = (
    "Tool: $tool\n"
    "Description: $description\n"
    "Schema: $schema\n"
    "\n"
    "Earlier steps of the episode, oldest first ($omitted older steps not shown):\n"
    "$history\n"
    "\n"
    "The call to answer: $tool with arguments $arguments\n"
    'Reply with JSON only: {"result": ...} or {"error": "..."}'
)

_NOT_KNOWN = "(not known)"


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What is known of a tool the emulator simulates: from its Python signature and
    docstring, an MCP ``tools/list`` entry, or an OpenAI tool definition."""

    name: str
    description: str | None = None
    #: The arguments' JSON schema (MCP ``inputSchema``, OpenAI ``parameters``).
    input_schema: dict[str, Any] | None = None
    #: The result's JSON schema (MCP ``outputSchema``).
    output_schema: dict[str, Any] | None = None
    #: A Python tool's signature (``send_email(to: str, body: str) -> str``).
    signature: str | None = None

    def described(self) -> dict[str, Any]:
        """The spec as a record keeps it (what is not known is left out)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class Emulated(msgspec.Struct, frozen=True, kw_only=True):
    """A read answer: the tool returned ``result``, or raised ``error``."""

    result: Any = None
    error: str | None = None

    @property
    def is_error(self) -> bool:
        return self.error is not None


class EmulationAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """What the cache keeps of an answer: its content (read again when served), and what
    the endpoint said answered."""

    content: str
    model: str | None = None
    system_fingerprint: str | None = None
    attempts: int = 1


class BadEmulation(ValueError):
    """An answer that is not ``{"result": ...}`` or ``{"error": "..."}``, exactly."""


def parse_emulation(content: str) -> Emulated:
    """The answer in ``content``, read strictly (see the module docstring).

    Raises:
        BadEmulation: says what is wrong.
    """
    data = content.encode("utf-8", "surrogatepass")
    if too_deep(data, MAX_DEPTH):
        raise BadEmulation(f"the answer nests deeper than {MAX_DEPTH} levels")
    try:
        key = duplicate_key(data)
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BadEmulation(f"the answer is not JSON ({exc})") from None
    if key is not None:
        raise BadEmulation(f"the answer holds the key {key!r} twice in one object")
    if not isinstance(value, dict):
        raise BadEmulation(f"the answer is a JSON {type(value).__name__}, not an object")
    keys = sorted(value)
    if keys == ["result"]:
        return Emulated(result=value["result"])
    if keys == ["error"]:
        error = value["error"]
        if not isinstance(error, str):
            raise BadEmulation(f'"error" is a {type(error).__name__}, not a string')
        return Emulated(error=error)
    shown = ", ".join(repr(k) for k in keys[:5]) or "no key"
    raise BadEmulation(f'the answer has {shown}; exactly one of "result" or "error" is allowed')


# ---------------------------------------------------------------- the episode so far


def _seen(step: Step) -> dict[str, Any]:
    """What the agent did and saw at ``step`` (nothing volatile)."""
    if isinstance(step, MessageStep):
        return {"role": step.role, "text": step.text}
    shown = step.shown
    return {
        "tool": step.tool,
        "args": step.args,
        "shown": {
            "content": shown.content,
            "is_error": shown.is_error,
            "structured": shown.structured,
        },
    }


def _json_text(value: Any) -> str:
    try:
        return canonical_json(value).decode("utf-8", "replace")
    except (TypeError, ValueError, OverflowError, RecursionError):
        return repr(value)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters not shown]"


class History:
    """The episode so far, as the emulator is shown it (see the module docstring)."""

    __slots__ = ("_hash", "_recent", "steps")

    def __init__(self) -> None:
        self._hash = hashlib.sha256(b"litmus-emulator-history-1")
        self._recent: deque[str] = deque(maxlen=HISTORY_STEPS)
        #: Steps added so far.
        self.steps = 0

    def add(self, step: Step) -> None:
        """Add a recorded step (a message, or a call with what it showed)."""
        seen = _seen(step)
        if isinstance(step, ToolCallStep):
            self.add_call(step.tool, step.args, seen["shown"], index=step.index)
        else:
            self.add_message(step.role, step.text, index=step.index)

    def add_message(self, role: str, text: str, *, index: int | None = None) -> None:
        """Add a message of ``role``."""
        self._chain({"role": role, "text": text})
        where = self.steps - 1 if index is None else index
        self._recent.append(_cut(f"[{where}] {role}: {text}", HISTORY_STEP_CHARS))

    def add_call(
        self, tool: str, args: Any, shown: Mapping[str, Any], *, index: int | None = None
    ) -> None:
        """Add a call of ``tool`` with ``args``, and what the agent was ``shown`` (a
        ``Shown`` as a mapping: ``content``, ``is_error``, ``structured``)."""
        seen = {"content": shown.get("content", ()), "is_error": bool(shown.get("is_error"))}
        seen["structured"] = shown.get("structured")
        self._chain({"tool": tool, "args": args, "shown": seen})
        where = self.steps - 1 if index is None else index
        text = "\n".join(str(b.get("text", "")) for b in seen["content"] if isinstance(b, Mapping))
        if not text and seen["structured"] is not None:
            text = _json_text(seen["structured"])
        said = "error" if seen["is_error"] else "result"
        line = f"[{where}] call {tool} {_json_text(args)} -> {said}: {text}"
        self._recent.append(_cut(line, HISTORY_STEP_CHARS))

    def _chain(self, seen: dict[str, Any]) -> None:
        self._hash.update(hashlib.sha256(_json_text(seen).encode()).digest())
        self.steps += 1

    def view(self) -> HistoryView:
        """The history as it is now (later steps do not change it)."""
        return HistoryView(
            steps=self.steps, sha256=self._hash.hexdigest(), recent=tuple(self._recent)
        )


class HistoryView(msgspec.Struct, frozen=True, kw_only=True):
    """The history at one call: how many steps, their chained hash, the recent ones."""

    steps: int = 0
    sha256: str = hashlib.sha256(b"litmus-emulator-history-1").hexdigest()
    recent: tuple[str, ...] = ()


# ---------------------------------------------------------------- asking and caching


def render_prompt(
    template: string.Template, spec: ToolSpec, args: Mapping[str, Any], history: HistoryView
) -> str:
    """The user message that asks the emulator for the result of one call."""
    description = spec.description or ""
    if spec.signature:
        description = f"{description}\nPython signature: {spec.signature}".strip()
    schema: dict[str, Any] = {}
    if spec.input_schema is not None:
        schema["arguments"] = spec.input_schema
    if spec.output_schema is not None:
        schema["result"] = spec.output_schema
    recent = history.recent
    return template.substitute(
        tool=spec.name,
        description=_cut(description, SPEC_CHARS) if description else _NOT_KNOWN,
        schema=_cut(_json_text(schema), SPEC_CHARS) if schema else _NOT_KNOWN,
        arguments=_json_text(dict(args)),
        history="\n".join(recent) if recent else "(none: this is the first step)",
        omitted=str(history.steps - len(recent)),
    )


#: ``(emulator fingerprint, tool, arguments hash, context hash)``.
EmulationKey = tuple[str, str, str, str]


def emulation_key(
    fingerprint: str, spec: ToolSpec, args: Mapping[str, Any], history: HistoryView
) -> EmulationKey:
    """What a result is cached by: the emulator, the tool, its arguments, and the context
    (the tool's spec and the history's hash)."""
    context = content_hash({"spec": spec.described(), "history": history.sha256})
    try:
        arguments = content_hash(dict(args))
    except (TypeError, ValueError, OverflowError, RecursionError):
        arguments = hashlib.sha256(_json_text(dict(args)).encode()).hexdigest()
    return (fingerprint, spec.name, arguments, context)
