"""Redaction of a tool call's arguments at record time. Sans-io.

Theory of operation
-------------------
A :class:`Redaction` is the ``[record]`` policy in force: which argument keys are
secrets, which secret shapes are looked for in text (``redaction_shapes.py``), which user
patterns too. Every writer of a tool call's step passes the step through
:func:`redact_step` before it encodes it (the sandbox's step writer,
``_runtime/tool_calls.write_step``; the importers through :func:`redact_records`), so
the plain value of a secret is never written, and nothing read back from a stream holds
it: neither ``show``, nor the reports, nor an export.

* **By key** - a value under a secret key, at any depth, is redacted whole: a string, a
  number or bytes becomes its redacted form; a list or a table under it has each of those
  redacted; ``true``, ``false`` and ``null`` are kept (they hold no secret). A key is a
  secret when, lower-cased with every character but letters and digits dropped, it ends
  with one of the keys (``x-api-key``, ``client_secret``, ``access_token``,
  ``openaiApiKey``), also in the plural (``secrets``; not ``tokens``, a count), before
  trailing digits or a word such as ``_confirmation``; not when its first word counts
  (``max_token``).
* **By shape** - in every other string value, anywhere in the arguments, only the matched
  part is replaced (the password of a DSN, the token after ``Bearer``).

The redacted form (``<redacted N chars sha256:PREFIX>``) is the same for the same plain
value, so replay matches a live call (whose arguments are redacted the same way before
they are compared) and the gate compares steps as before. A step says which of its fields
were redacted, never their values: ``meta.redacted``, a list of ``{"path", "shape"}``
(``shape`` is ``key`` for a redaction by key). An episode's header says which policy its
writer applied: ``meta.redaction`` (:meth:`Redaction.describe`).

Argument *names*, results, messages and errors are recorded as they are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from litmus_sandbox._core.redaction_shapes import MARKER, SHAPES, marker, redact_text
from litmus_sandbox._model.codec import content_hash
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import EpisodeHeader, ToolCallStep

#: Key of the redaction facts: in a step's ``meta`` (what was redacted) and in an
#: episode header's ``meta`` (the policy applied).
REDACTED_KEY = "redacted"
HEADER_KEY = "redaction"

#: Argument keys whose values are secrets, by default.
DEFAULT_KEYS: tuple[str, ...] = (
    "api_key",
    "password",
    "passwd",
    "passphrase",
    "token",
    "secret",
    "secret_key",
    "private_key",
    "access_key",
    "authorization",
    "credential",
    "credentials",
    "cookie",
)
#: Words a secret's key may end with after the secret's name (``password_confirmation``).
_TRAILERS = ("confirmation", "confirm", "value", "base64", "b64", "hex", "pem", "plain", "raw")
#: A key whose first word is one of these counts something (``max_token``): no secret.
_COUNTERS = frozenset({"max", "min", "num", "n", "count", "total", "limit"})
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_NOT_ALNUM = re.compile(r"[^a-z0-9]")
#: How many argument keys a :class:`Redaction` remembers the decision of.
_KNOWN_KEYS = 4096
#: A key ``format_path`` writes bare; any other is quoted (ASCII only: a path is safe to
#: print as it is).
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def flat_key(name: str) -> str:
    """``name`` lower-cased, every character but letters and digits dropped."""
    return _NOT_ALNUM.sub("", name.lower())


class Redaction:
    """What is redacted from a tool call's arguments before its step is written.

    Args:
        enabled: False records arguments as they are (``[record] redact = false``).
        keys: secret argument keys, added to :data:`DEFAULT_KEYS`.
        patterns: regular expressions of secrets in text, added to the shapes.
        keep_defaults: False drops the default keys and shapes (only ``keys`` and
            ``patterns`` remain).

    Raises:
        ConfigError: a key with no letter or digit, a pattern that does not compile or
            matches the empty string, or nothing left to redact while enabled.
    """

    __slots__ = ("_compiled", "_flat", "_known", "enabled", "keys", "patterns", "shapes")

    def __init__(
        self,
        *,
        enabled: bool = True,
        keys: Sequence[str] = (),
        patterns: Sequence[str] = (),
        keep_defaults: bool = True,
    ) -> None:
        self.enabled = enabled
        base = DEFAULT_KEYS if keep_defaults else ()
        self.keys: tuple[str, ...] = tuple(dict.fromkeys((*base, *keys))) if enabled else ()
        self.shapes: tuple[str, ...] = SHAPES if enabled and keep_defaults else ()
        self.patterns: tuple[str, ...] = tuple(dict.fromkeys(patterns)) if enabled else ()
        for i, key in enumerate(keys):
            if not isinstance(key, str) or not flat_key(key):
                raise ConfigError(f"redact_keys[{i}]: {key!r} is not a key (no letter or digit)")
        self._flat = tuple(dict.fromkeys(flat_key(k) for k in self.keys))
        #: Argument keys already decided (the same few come back on every call).
        self._known: dict[str, bool] = {}
        self._compiled = tuple(_compile(i, p) for i, p in enumerate(patterns))
        if enabled and not (self.keys or self.patterns):
            raise ConfigError(
                "keep_defaults = false with no redact_keys or redact_patterns leaves nothing "
                "to redact: write redact = false to record arguments as they are"
            )

    def __repr__(self) -> str:
        return f"Redaction({self.describe()!r})"

    def describe(self) -> dict[str, Any]:
        """The policy, as an episode header records it (``meta.redaction``)."""
        if not self.enabled:
            return {"redact": False}
        out: dict[str, Any] = {
            "redact": True,
            "keys": list(self.keys),
            "shapes": list(self.shapes),
            "patterns": list(self.patterns),
        }
        out["fingerprint"] = "sha256:" + content_hash(out)[:16]
        return out

    def is_secret_key(self, name: str) -> bool:
        """Whether a value under the argument key ``name`` is a secret (module docstring)."""
        known = self._known.get(name)
        if known is None:
            known = self._is_secret_key(name)
            if len(self._known) < _KNOWN_KEYS:
                self._known[name] = known
        return known

    def _is_secret_key(self, name: str) -> bool:
        flat = flat_key(name)
        if not flat:
            return False
        stems = [flat, flat.rstrip("0123456789")]
        if flat.endswith("s") and not flat.endswith("tokens"):  # prompt_tokens counts
            stems.append(flat[:-1])  # secrets, passwords, api_keys
        stems += [flat[: -len(t)] for t in _TRAILERS if flat.endswith(t) and len(flat) > len(t)]
        for stem in stems:
            for key in self._flat:
                if stem.endswith(key):
                    # max_token counts tokens: a key whose first word counts is no secret.
                    words = _WORD.findall(name)
                    return stem == key or not (words and words[0].lower() in _COUNTERS)
        return False

    def text(self, value: str) -> tuple[str, list[str]]:
        """``value`` with the secrets its shapes find redacted, and those shapes."""
        if not self.enabled:
            return value, []
        return redact_text(value, self.shapes, self.is_secret_key, self._compiled)

    def args(self, args: Any) -> tuple[Any, list[dict[str, str]]]:
        """``args`` with every secret redacted (a copy; ``args`` itself when nothing
        was), and what was redacted: ``[{"path": "$.password", "shape": "key"}]``."""
        if not self.enabled:
            return args, []
        found: list[dict[str, str]] = []
        try:
            out = self._walk(args, [], False, found)
        except RecursionError:
            # Too deep to look through: nothing of it is kept but that it was there.
            return {}, [{"path": "$", "shape": "too_deep"}]
        return (args, found) if not found else (out, _unique(found))

    def _walk(
        self, value: Any, at: list[str | int], secret: bool, found: list[dict[str, str]]
    ) -> Any:
        if isinstance(value, str):
            if secret and value:
                found.append({"path": format_path(at), "shape": "key"})
                return value if _is_marker(value) else marker(value)
            text, shapes = self.text(value)
            found.extend({"path": format_path(at), "shape": s} for s in shapes)
            return text
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float | bytes | bytearray):
            if not secret:
                return value
            found.append({"path": format_path(at), "shape": "key"})
            return marker(bytes(value) if isinstance(value, bytearray) else _plain(value))
        if isinstance(value, dict):
            before = len(found)
            out = {}
            for k, v in value.items():
                hidden = secret or (isinstance(k, str) and self.is_secret_key(k))
                out[k] = self._walk(v, [*at, k if isinstance(k, str) else str(k)], hidden, found)
            return out if len(found) > before else value
        if isinstance(value, list | tuple | set | frozenset):
            before = len(found)
            items = [self._walk(v, [*at, i], secret, found) for i, v in enumerate(value)]
            return items if len(found) > before else value
        # Any other value (a dataclass, a Struct...): redacted in its JSON form when that
        # holds a secret; one JSON cannot hold is recorded by its repr, redacted then.
        try:
            plain = msgspec.to_builtins(value, str_keys=True)
        except (TypeError, ValueError, OverflowError, RecursionError):
            return value
        before = len(found)
        out = self._walk(plain, at, secret, found)
        return out if len(found) > before else value


def _plain(value: Any) -> str | bytes:
    return value if isinstance(value, bytes) else json.dumps(value)


def _is_marker(text: str) -> bool:
    return MARKER.fullmatch(text) is not None


def _compile(index: int, pattern: str) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"redact_patterns[{index}]: {pattern!r} is not a regular expression")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(
            f"redact_patterns[{index}]: {pattern!r} is not a regular expression ({exc})"
        ) from None
    if compiled.fullmatch("") is not None:
        raise ConfigError(f"redact_patterns[{index}]: {pattern!r} matches the empty string")
    return compiled


def _unique(found: list[dict[str, str]]) -> list[dict[str, str]]:
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for item in found:
        seen.setdefault((item["path"], item["shape"]), item)
    return list(seen.values())


def format_path(segments: Sequence[str | int]) -> str:
    """``$.headers["X-Api-Key"]``, ``$.items[0].token``: the JSON path of an argument,
    in ASCII (a key that is not a plain name is quoted, its characters escaped)."""
    out = ["$"]
    for seg in segments:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif _BARE_KEY.fullmatch(seg):
            out.append(f".{seg}")
        else:
            out.append(f"[{json.dumps(seg)}]")
    return "".join(out)


#: Redaction as it is when a policy says nothing (``[record]`` defaults).
DEFAULT_REDACTION = Redaction()
#: No redaction (``[record] redact = false``).
NO_REDACTION = Redaction(enabled=False)


def redact_step(step: ToolCallStep, redaction: Redaction) -> ToolCallStep:
    """``step`` with its arguments redacted and ``meta.redacted`` saying where (itself
    when nothing was)."""
    if not redaction.enabled:
        return step
    args, found = redaction.args(step.args)
    if not found:
        return step
    earlier = step.meta.get(REDACTED_KEY)
    if isinstance(earlier, list):  # redacted before (a second pass adds only what is new)
        found = _unique([*(e for e in earlier if isinstance(e, dict)), *found])
    meta = {**step.meta, REDACTED_KEY: found}
    return msgspec.structs.replace(step, args=args, meta=meta)


def stamp_header(header: EpisodeHeader, redaction: Redaction) -> EpisodeHeader:
    """``header`` saying which redaction its episode's steps were written under."""
    meta = {**header.meta, HEADER_KEY: redaction.describe()}
    return msgspec.structs.replace(header, meta=meta)


def redact_records(records: Iterable[msgspec.Struct], redaction: Redaction) -> list[msgspec.Struct]:
    """An episode's records as they are written: each header stamped
    (:func:`stamp_header`), each tool call's step redacted (:func:`redact_step`)."""
    out: list[msgspec.Struct] = []
    for record in records:
        if isinstance(record, ToolCallStep):
            record = redact_step(record, redaction)
        elif isinstance(record, EpisodeHeader):
            record = stamp_header(record, redaction)
        out.append(record)
    return out
