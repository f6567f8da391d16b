"""The OpenAI-compatible chat-completions exchange, sans-io: request body, answer, Retry-After.

Nothing here touches a socket (``_openai.py`` sends). The request is exactly::

    {"model", "messages": [{"role": "system", "content": system_prompt},
                           {"role": "user", "content": the step's prompt}],
     "temperature", "top_p", "seed" (when configured), "max_tokens",
     "response_format": {"type": "json_object"}}

The answer is read strictly, never guessed: a JSON object with at least one choice whose
message ``content`` is itself a JSON object ``{"safe": bool, "reason"?: str}`` and nothing
else. A ``refusal`` in the message, a ``content_filter`` finish, or text that reads as a
refusal is the judge model refusing; anything else unexpected is a bad answer. So is a key
found twice in one object, anywhere in the answer or in its content (``{"safe": true,
"safe": false}``: a JSON reader keeps one of them, so which the judge meant is a guess),
and nesting deeper than :data:`MAX_ANSWER_DEPTH` (checked before any parse).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from litmus_sandbox._config.scoring import OpenAIParams
from litmus_sandbox._core.scoring import RefusalDetector, StepJudgment
from litmus_sandbox._model.codec import duplicate_key, too_deep
from litmus_sandbox.judges._failure import JudgeFailure

RESPONSE_FORMAT: dict[str, str] = {"type": "json_object"}
#: The most of an answer that is read (a larger one is a bad answer).
MAX_ANSWER_BYTES = 1 << 20
#: How much of an unexpected body an error message quotes.
QUOTE_CHARS = 200
#: The deepest nesting of arrays and objects an answer (or its content) may have.
MAX_ANSWER_DEPTH = 32


def request_body(params: OpenAIParams, system_prompt: str, prompt: str) -> dict[str, Any]:
    """The JSON body of the chat-completions request for one step."""
    body: dict[str, Any] = {
        "model": params.model,
        "messages": [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": prompt},
        ],
        "temperature": params.temperature,
        "top_p": params.top_p,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    body["max_tokens"] = params.max_tokens
    body["response_format"] = dict(RESPONSE_FORMAT)
    return body


class _Message(msgspec.Struct, frozen=True, kw_only=True):
    content: str | None = None
    refusal: str | None = None


class _Choice(msgspec.Struct, frozen=True, kw_only=True):
    message: _Message
    finish_reason: str | None = None


class _Completion(msgspec.Struct, frozen=True, kw_only=True):
    choices: tuple[_Choice, ...]
    model: str | None = None
    system_fingerprint: str | None = None


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """What a chat completion said: its first choice's content, whether it was cut at
    ``max_tokens`` (``finish_reason`` length), and the model that answered."""

    content: str
    cut: bool = False
    model: str | None = None
    system_fingerprint: str | None = None


class _Answer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    safe: bool
    reason: str | None = None


_completion = msgspec.json.Decoder(_Completion).decode
_answer = msgspec.json.Decoder(_Answer).decode
_REFUSALS = RefusalDetector()


def completion_content(
    body: bytes, *, attempts: int, who: str = "judge", check_content: bool = True
) -> Completion:
    """The content of a 200 answer's first choice, read strictly (see the module doc):
    what every asker of the endpoint reads before its own answer format.

    Args:
        who: what the endpoint is, in messages (``judge``, ``emulator``).
        check_content: check the content for keys twice and deep nesting here (the
            emulator does, with its own limits, and keeps a content it refuses).

    Raises:
        JudgeFailure: ``bad_answer`` (not a chat completion with content, a duplicate
            key or nesting past the limit, in the answer or in its content) or
            ``refusal`` (the model refused, or the content filter withheld the answer).
    """
    strict(body, "the answer", attempts)
    try:
        completion = _completion(body)
    except msgspec.DecodeError as exc:
        why = f"not a chat completion ({exc}): {quote(body)}"
        raise _fail("bad_answer", why, attempts) from None
    if not completion.choices:
        raise _fail("bad_answer", "the answer has no choices", attempts)
    choice = completion.choices[0]
    message = choice.message
    if message.refusal:
        raise _fail("refusal", f"the {who} model refused: {quote(message.refusal)}", attempts)
    if choice.finish_reason == "content_filter":
        why = "the answer was withheld by the endpoint's content filter"
        raise _fail("refusal", why, attempts)
    content = message.content
    if content is None:
        raise _fail("bad_answer", "the answer's message has no content", attempts)
    if check_content:
        strict(content.encode("utf-8", "surrogatepass"), "the answer's content", attempts)
    return Completion(
        content=content,
        cut=choice.finish_reason == "length",
        model=completion.model,
        system_fingerprint=completion.system_fingerprint,
    )


def _fail(failure: str, why: str, attempts: int) -> JudgeFailure:
    return JudgeFailure(why, failure=failure, attempts=attempts)


def strict(data: bytes, what: str, attempts: int) -> None:
    """``bad_answer`` if ``data`` nests too deeply or holds a key twice in one object.

    Raises:
        JudgeFailure: ``bad_answer``, saying which.
    """
    if too_deep(data, MAX_ANSWER_DEPTH):
        why = f"{what} nests deeper than {MAX_ANSWER_DEPTH} levels"
        raise _fail("bad_answer", why, attempts)
    key = duplicate_key(data)
    if key is not None:
        raise _fail(
            "bad_answer",
            f"{what} holds the key {quote(key)} twice in one object (which value is "
            "meant is ambiguous)",
            attempts,
        )


def parse_answer(body: bytes, *, attempts: int) -> StepJudgment:
    """The judgment in a 200 answer's body.

    Raises:
        JudgeFailure: ``bad_answer`` (not the expected JSON) or ``refusal``.
    """
    said = completion_content(body, attempts=attempts)
    content = said.content
    try:
        answer = _answer(content)
    except msgspec.DecodeError as exc:
        if _REFUSALS.is_refusal_text(content):
            why = f"the judge model refused: {quote(content)}"
            raise _fail("refusal", why, attempts) from None
        cut = " (finish_reason length: raise max_tokens)" if said.cut else ""
        raise _fail(
            "bad_answer",
            f'content is not {{"safe": bool, "reason"?: str}}{cut} ({exc}): {quote(content)}',
            attempts,
        ) from None
    return StepJudgment(
        safe=answer.safe,
        reason=answer.reason,
        attempts=attempts,
        model=said.model,
        system_fingerprint=said.system_fingerprint,
    )


def retry_delay(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """How long a 429 answer asks to wait, in seconds: ``retry-after-ms``, else
    ``Retry-After`` (seconds, or an HTTP date); None when neither says (or cannot be read).
    """
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms)
        except ValueError:
            value = -1.0
        if value >= 0 and value == value:  # not NaN
            return value / 1000
    after = headers.get("retry-after")
    if after is None:
        return None
    after = after.strip()
    try:
        seconds = float(after)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(after)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    return seconds if seconds >= 0 and seconds == seconds else None


def quote(text: str | bytes) -> str:
    """The start of ``text`` as one printable line, for an error message."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    short = text[:QUOTE_CHARS]
    shown = repr(short)
    return shown + (f" (+{len(text) - QUOTE_CHARS} chars)" if len(text) > QUOTE_CHARS else "")
