"""JSON values as replay and diff compare them: canonical form, paths, differences. Sans-io.

Two values are equal when they are equal as JSON: key order never matters, ``1`` equals
``1.0`` (JSON has one number type) and ``true`` is not ``1``. A *path* names a place in
a value with a small JSONPath subset (``$.a.b``, ``$.items[*].id``, ``$['odd key']``,
``$[0]``); replay drops *ignored* paths from both sides before comparing, and reports the
paths where two values differ. An ignored list element keeps its place (later elements keep
their indices); ``[*]`` at the end of a path ignores every element, however many.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from litmus_sandbox._model.codec import canonical_json
from litmus_sandbox._model.errors import ConfigError


class _Wild:
    """The ``*`` segment of an ignored path (any key, any index)."""

    def __repr__(self) -> str:
        return "*"


WILD = _Wild()
Segment = str | int | _Wild

_SEGMENT = re.compile(
    r"""\.(?P<name>[^.\[\]]+)              # .name or .*
      | \[(?P<index>-?\d+)\]               # [3]
      | \[(?P<star>\*)\]                   # [*]
      | \[(?P<q>['"])(?P<quoted>.*?)(?P=q)\]  # ['any key'] or ["any key"]
    """,
    re.VERBOSE,
)


def parse_path(text: str) -> tuple[Segment, ...]:
    """Parse an ignored-argument path: ``$.a.b``, ``$.items[*].id``, ``$['odd key']``, ``$[0]``.

    ``$`` is the arguments object; a path without the leading ``$`` is read as if it
    had ``$.`` (``request_id`` is ``$.request_id``). ``$`` alone ignores every argument.

    Raises:
        ConfigError: a path this grammar cannot read.
    """
    src = text.strip()
    if not src.startswith("$"):
        src = "$." + src if not src.startswith("[") else "$" + src
    pos, out = 1, []
    while pos < len(src):
        m = _SEGMENT.match(src, pos)
        if m is None:
            raise ConfigError(
                f"ignored path {text!r}: cannot read {src[pos:]!r} "
                "(expected .key, .*, [index], [*] or ['key'])"
            )
        if m["name"] is not None:
            out.append(WILD if m["name"] == "*" else m["name"])
        elif m["index"] is not None:
            out.append(int(m["index"]))
        elif m["star"] is not None:
            out.append(WILD)
        else:
            out.append(m["quoted"])
        pos = m.end()
    return tuple(out)


def format_path(segments: Sequence[Segment]) -> str:
    """The JSONPath-like text of a path (the inverse of :func:`parse_path`)."""
    out = ["$"]
    for seg in segments:
        if isinstance(seg, _Wild):
            out.append("[*]")
        elif isinstance(seg, int):
            out.append(f"[{seg}]")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", seg):
            out.append(f".{seg}")
        else:
            out.append(f"[{_quoted(seg)}]")
    return "".join(out)


def _quoted(key: str) -> str:
    """``key`` as a JSON string; a lone surrogate in it stays as it is (the record that
    names the path keeps it losslessly)."""
    try:
        return msgspec.json.encode(key).decode()
    except UnicodeEncodeError:
        return json.dumps(key, ensure_ascii=False)


_REMOVED = object()
#: What an ignored list element compares as, on both sides (a string, so it encodes).
_IGNORED = "\u0000ignored"


def _strip(obj: Any, path: tuple[Segment, ...]) -> Any:
    if not path:
        return _REMOVED
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        if isinstance(head, _Wild):
            keys = list(obj)
        elif isinstance(head, str) and head in obj:
            keys = [head]
        else:
            return obj
        out = dict(obj)
        for key in keys:
            value = _strip(obj[key], rest)
            if value is _REMOVED:
                del out[key]
            else:
                out[key] = value
        return out
    if isinstance(obj, list):
        if isinstance(head, str) and head.isdigit():
            head = int(head)
        if isinstance(head, _Wild):
            indices = range(len(obj))
        elif isinstance(head, int) and -len(obj) <= head < len(obj):
            indices = range(head % len(obj), head % len(obj) + 1)
        else:
            return obj
        if isinstance(head, _Wild) and not rest:
            return []  # every element ignored, however many
        items = list(obj)
        for i in indices:
            value = _strip(obj[i], rest)
            # An ignored element keeps its place, so later elements keep their indices.
            items[i] = _IGNORED if value is _REMOVED else value
        return items
    return obj


def _canonical(obj: Any) -> Any:
    # JSON has one number type: 1 and 1.0 are the same value (bools stay bools).
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)  # exact: 1e20 is 100000000000000000000
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    return obj


def as_json(args: Any) -> Any:
    """``args`` as the JSON value a recording holds (tuples become lists, and so on)."""
    # Live in-process calls may pass any Python value; the recording holds its JSON form,
    # so compare that. Values JSON cannot hold compare by their repr.
    return msgspec.to_builtins(args, enc_hook=repr)


TOO_DEEP = "JSON nested too deeply to compare (hundreds of levels)"


def normalize_args(args: Any, ignore: Iterable[tuple[Segment, ...]] = ()) -> Any:
    """The arguments as compared: JSON form, ignored paths removed, numbers canonical.

    Raises:
        ConfigError: arguments nested past the interpreter's recursion limit.
    """
    try:
        value = _canonical(as_json(args))
        for path in ignore:
            value = _strip(value, path)
            if value is _REMOVED:
                return None
    except RecursionError:
        raise ConfigError(TOO_DEEP) from None
    return value


def call_key(tool: str, args: Any, ignore: Iterable[tuple[Segment, ...]] = ()) -> bytes:
    """The identity a replay matches on: tool name and canonical JSON of the arguments.

    Raises:
        ConfigError: arguments nested past the interpreter's recursion limit.
    """
    name = tool.encode("utf-8", "surrogatepass")  # a lone surrogate as its three bytes
    return name + b"\x00" + canonical_json(normalize_args(args, ignore))


def differing_paths(a: Any, b: Any, limit: int = 20) -> list[str]:
    """The JSON paths where two (normalized) values differ, at most ``limit`` of them.

    Raises:
        ConfigError: values nested past the interpreter's recursion limit.
    """
    out: list[str] = []
    try:
        _diff(a, b, [], out, limit)
    except RecursionError:
        raise ConfigError(TOO_DEEP) from None
    return out


def _diff(a: Any, b: Any, at: list[Segment], out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(format_path([*at, key]))
            else:
                _diff(a[key], b[key], [*at, key], out, limit)
        return
    if isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            if i >= len(a) or i >= len(b):
                out.append(format_path([*at, i]))
            else:
                _diff(a[i], b[i], [*at, i], out, limit)
        return
    if type(a) is not type(b) or a != b:
        out.append(format_path(at))
