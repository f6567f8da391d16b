"""Running one tool call and turning its outcome into what the agent is shown.

Helpers of the sandbox: the result type agents get back, the conversion of any return
value into MCP-style content blocks (JSON when it can, ``repr`` flagged when it cannot,
capped with size and hash when huge), and the timed invocation of sync or async tools.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal

import anyio
import msgspec

from litmus_sandbox._core.redaction import DEFAULT_REDACTION, Redaction, redact_step
from litmus_sandbox._model.codec import encode, json_bytes
from litmus_sandbox._model.records import Actual, Shown, ToolCallStep
from litmus_sandbox._runtime import workers


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What the agent is shown for a call: the value, its content blocks, an error flag."""

    value: Any
    content: tuple[dict[str, Any], ...]
    is_error: bool = False
    fidelity: str = "real"

    @property
    def text(self) -> str:
        return "\n".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")


def to_content(value: Any, cap: int) -> tuple[tuple[dict[str, Any], ...], Any, dict[str, Any]]:
    """(content blocks, structured content, meta) for a tool's return value."""
    meta: dict[str, Any] = {}
    if value is None:
        return (), None, meta
    if isinstance(value, str):
        text, structured = value, None
    else:
        try:
            # Text holding lone surrogates is shown as it is (the record keeps it losslessly).
            text, structured = json_bytes(value).decode("utf-8", "surrogatepass"), value
        except (TypeError, msgspec.EncodeError, UnicodeDecodeError, OverflowError, RecursionError):
            text, structured = _safe_repr(value), None
            meta["repr_only"] = True
    text, capped = cap_text(text, cap)
    if capped is not None:
        meta["capped"] = capped
        structured = None
    return ({"type": "text", "text": text},), structured, meta


def json_safe(value: Any) -> Any:
    """``value`` as JSON can hold it: what JSON cannot hold becomes its ``repr`` (bytes
    stay bytes: the record keeps them losslessly)."""
    try:
        return msgspec.to_builtins(
            value, enc_hook=_safe_repr, str_keys=True, builtin_types=(bytes, bytearray, memoryview)
        )
    except (TypeError, ValueError, OverflowError, RecursionError):
        return _safe_repr(value)


#: What encoding a record can raise when a value in it is not JSON.
_UNENCODABLE = (TypeError, msgspec.EncodeError, OverflowError, RecursionError)


def write_step(
    write: Callable[[bytes], None],
    step: ToolCallStep,
    cap: int | None = None,
    redaction: Redaction = DEFAULT_REDACTION,
) -> ToolCallStep:
    """Encode a tool call's step and write the line with ``write``; returns the step as
    written.

    Every writer of a recorded call's step writes it here, and here its arguments are
    redacted first (``redaction``, the policy's ``[record]``; see
    :mod:`litmus_sandbox._core.redaction`): the plain value of a secret is never encoded.
    In-process calls may pass any Python value as an argument: the call ran, so its step
    is kept, with what JSON cannot hold by its ``repr`` (flagged ``args_repr_only``).
    With ``cap`` (``max_result_bytes``), arguments whose JSON takes more are recorded
    capped (:func:`cap_args`, ``meta.args_capped``), as results are: a step line stays far
    below the readers' line limit whatever the agent passed. Only a line longer than
    ``cap`` can hold such arguments, so a step is measured only then.
    """
    step = redact_step(step, redaction)
    try:
        line = encode(step)
    except _UNENCODABLE:
        args, meta = json_safe(step.args), json_safe(step.meta)
        meta = meta if isinstance(meta, dict) else {}
        if args != step.args:
            meta["args_repr_only"] = True
        step = msgspec.structs.replace(
            step, args=args if isinstance(args, dict) else {"repr": args}, meta=meta
        )
        # What JSON could not hold is now its repr: that text is looked through too.
        step = redact_step(step, redaction)
        step, line = _encoded(step)
    if cap is not None and len(line) > cap:
        args, capped = cap_args(step.args, cap)
        if capped is not None:
            meta = {**step.meta, "args_capped": capped}
            step = msgspec.structs.replace(step, args=args, meta=meta)
            line = encode(step)
    write(line)
    return step


def _encoded(step: ToolCallStep) -> tuple[ToolCallStep, bytes]:
    """``step``, whose arguments and meta JSON holds, and its line: what else JSON cannot
    hold (a runner's own result, a probe's state) by its ``repr``, the parts named in
    ``meta.parts_repr_only``. The call ran: its step is written whatever it holds."""
    try:
        return step, encode(step)
    except _UNENCODABLE:
        pass
    parts: list[str] = []

    def safe(name: str, value: Any) -> Any:
        try:
            json_bytes(value)
        except _UNENCODABLE:
            parts.append(name)
            return json_safe(value)
        return value

    def objects(value: Any, wrap: Callable[[str], dict[str, Any]]) -> tuple[dict[str, Any], ...]:
        items = value if isinstance(value, list) else [value]
        return tuple(
            v if isinstance(v, dict) else wrap(v if isinstance(v, str) else _safe_repr(v))
            for v in items
        )

    shown, actual, effects = step.shown, step.actual, step.effects
    content = safe("shown.content", list(shown.content))
    shown = msgspec.structs.replace(
        shown,
        content=objects(content, lambda text: {"type": "text", "text": text}),
        structured=safe("shown.structured", shown.structured),
    )
    if actual is not None:
        actual = msgspec.structs.replace(actual, value=safe("actual.value", actual.value))
    state = safe("effects.state", list(effects.state))
    effects = msgspec.structs.replace(effects, state=objects(state, lambda text: {"repr": text}))
    meta = {**step.meta, "parts_repr_only": parts}
    step = msgspec.structs.replace(step, shown=shown, actual=actual, effects=effects, meta=meta)
    try:
        return step, encode(step)
    except _UNENCODABLE as exc:  # a field of a type its record does not allow
        text = {"type": "text", "text": _safe_repr(step.shown)}
        bare = ToolCallStep(
            v=step.v,
            episode_id=str(step.episode_id),
            index=step.index,
            call_id=str(step.call_id),
            tool=str(step.tool),
            args={"repr": _safe_repr(step.args)},
            fidelity=step.fidelity,
            shown=Shown(content=(text,), is_error=step.shown.is_error is True),
            started_at=step.started_at,
            ended_at=step.ended_at,
            meta={"unencodable": _safe_repr(exc), "actual_repr": _safe_repr(step.actual)},
        )
        return bare, encode(bare)


#: A capped argument keeps at most this share of ``max_result_bytes``.
_ARGUMENT_SHARE = 8


def cap_args(args: dict[str, Any], cap: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Arguments as the record keeps them: as they are when they take at most ``cap``
    bytes as JSON; else each value over ``cap // 8`` bytes of JSON cut to that (a string
    to its first bytes, anything else to the first bytes of its JSON text), the names of
    the values cut, the arguments dropped once the cap is spent (their count), and the
    size and sha256 of the whole arguments' JSON."""
    data = json_bytes(args)
    if len(data) <= cap:
        return args, None
    share = max(cap // _ARGUMENT_SHARE, 1)
    kept: dict[str, Any] = {}
    cut: list[str] = []
    used = 0
    for name, value in args.items():
        part = json_bytes(value)
        too_long = len(part) > share
        if too_long:
            text = value if isinstance(value, str) else part.decode(errors="replace")
            value, _ = cap_text(text, share)
            part = json_bytes(value)
        used += len(part) + len(json_bytes(name)) + 2  # its name, a colon, a comma
        if used > cap:
            break
        kept[name] = value
        if too_long:
            cut.append(name)
    facts: dict[str, Any] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    facts["cut"] = cut
    if len(kept) < len(args):
        facts["dropped"] = len(args) - len(kept)
    return kept, facts


def _safe_repr(value: Any) -> str:
    """``repr(value)``, or a description when even that fails (a broken ``__repr__``)."""
    try:
        return repr(value)
    except Exception as exc:  # the recorder never crashes on a tool's odd value
        return f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"


#: A cap no result reaches (what the agent is shown is never capped).
UNCAPPED = sys.maxsize


def cap_text(text: str, cap: int) -> tuple[str, dict[str, Any] | None]:
    """``text`` cut to ``cap`` bytes (UTF-8), and the size and sha256 of the whole when cut."""
    data = text.encode(errors="surrogatepass")
    if len(data) <= cap:
        return text, None
    whole = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return data[:cap].decode(errors="ignore"), whole


class Bounded(msgspec.Struct, frozen=True):
    """A runner's result already bounded for the record (``ep.run``'s output, each
    stream cut to the cap): recorded and shown as it is, never capped again."""

    shown: Shown


def cap_shown(shown: Shown, cap: int) -> tuple[Shown, dict[str, Any] | None]:
    """A :class:`Shown` as the record keeps it: as it is when its content and structured
    content take at most ``cap`` bytes as JSON, else its text cut to ``cap`` bytes (no
    structured content, the error flag kept), and the size and sha256 of that JSON."""
    try:
        data = json_bytes((shown.content, shown.structured))
    except _UNENCODABLE:
        return shown, None  # recorded by its repr when written (``write_step``)
    if len(data) <= cap:
        return shown, None
    text, _ = cap_text(shown.text(), cap)
    whole = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return Shown(content=({"type": "text", "text": text},), is_error=shown.is_error), whole


def shown_value(shown: Shown) -> Any:
    """What a tool result gives the agent as its value: structured content, else text."""
    if shown.structured is not None:
        return shown.structured
    return shown.text() if shown.content else None


class CallOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a call that ran for real ended: it returned ``value``, raised, or timed out."""

    kind: Literal["returned", "raised", "timeout"]
    value: Any = None
    error_type: str | None = None
    error_message: str | None = None


async def invoke_tool(
    fn: Callable[..., Any],
    args: dict[str, Any],
    on_thread: Callable[[threading.Event], None] | None = None,
) -> CallOutcome:
    """Run a tool. A sync tool runs in a daemon worker thread (``workers.py``); with
    ``on_thread``, it is given an event set when that thread ends (a thread abandoned at a
    timeout runs on)."""
    try:
        if inspect.iscoroutinefunction(fn):
            value = await fn(**args)
        else:
            # Sync tools run in a worker thread so the loop never blocks; on timeout the
            # thread is abandoned (it cannot be interrupted) and the call recorded as such.
            ended = threading.Event()

            def run() -> Any:
                try:
                    return fn(**args)
                finally:
                    ended.set()

            if on_thread is not None:
                on_thread(ended)
            # A daemon thread: one that never returns does not hold the process at exit.
            value = await workers.run_sync(run)
            if inspect.isawaitable(value):
                value = await value
    except Exception as exc:
        return raised_outcome(exc)
    return CallOutcome(kind="returned", value=value)


def raised_outcome(exc: BaseException) -> CallOutcome:
    """The outcome of a call that raised ``exc``."""
    return CallOutcome(kind="raised", error_type=type(exc).__name__, error_message=str(exc))


def timeout_outcome(limit: float) -> CallOutcome:
    """The outcome of a call that got no result within ``limit`` seconds."""
    return CallOutcome(
        kind="timeout", error_type="TimeoutError", error_message=f"no result within {limit:g}s"
    )


async def run_tool(
    fn: Callable[..., Any],
    args: dict[str, Any],
    limit: float | None,
    on_thread: Callable[[threading.Event], None] | None = None,
) -> CallOutcome:
    """Run a tool within ``limit`` seconds (None: no limit); see :func:`invoke_tool`."""
    if limit is None:
        # No cancel scope on the hot path when unbounded.
        return await invoke_tool(fn, args, on_thread)
    with anyio.move_on_after(limit):
        return await invoke_tool(fn, args, on_thread)
    # Only reached when the timeout cancelled the call.
    return timeout_outcome(limit)


def real_parts(
    outcome: CallOutcome, cap: int, limit: float | None
) -> tuple[Shown, Actual | None, dict[str, Any]]:
    """(shown, actual, meta) of a call that ran for real and is shown as it ended.

    A returned :class:`Shown` is shown as is (recorded capped when larger than ``cap``:
    :func:`cap_shown`); any other value is converted to content blocks. An exception or
    a timeout is shown as an error naming it, and recorded in ``actual`` (its message
    capped like any result).
    """
    if outcome.kind == "returned":
        if type(outcome.value) is Bounded:
            return outcome.value.shown, None, {}
        if isinstance(outcome.value, Shown):
            shown, capped = cap_shown(outcome.value, cap)
            return shown, None, {"capped": capped} if capped is not None else {}
        content, structured, meta = to_content(outcome.value, cap)
        return Shown(content=content, structured=structured), None, meta
    message, capped = cap_text(outcome.error_message or "", cap)
    actual = Actual(
        outcome=outcome.kind,
        error_type=outcome.error_type,
        error_message=message if outcome.error_message is not None else None,
    )
    text = (
        f"tool timed out after {limit:g}s"
        if outcome.kind == "timeout" and limit is not None
        else f"{outcome.error_type}: {message}"
    )
    shown = Shown(content=({"type": "text", "text": text},), is_error=True)
    return shown, actual, {"capped": capped} if capped is not None else {}


def capped_text(data: bytes, cap: int) -> str:
    return data[:cap].decode(errors="replace")
