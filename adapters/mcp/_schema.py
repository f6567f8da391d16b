"""Tools' output schemas, and structured content for results the proxy originates (sans-io).

A tool that declares an ``outputSchema`` promises ``structuredContent`` that conforms to
it, and MCP clients check: the official Python client refuses a result without it. A
stubbed or swallowed call is answered by the proxy, usually from a text stand-in, so the
proxy learns each tool's schema from the ``tools/list`` answers it relays and, when the
stand-in has no structure of its own, gives the smallest value the schema accepts, with
the stand-in's text in its strings. The step records it as shown.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = ["listed_schemas", "listed_tools", "output_schemas", "placeholder"]

_MAX_DEPTH = 16


def output_schemas(result: Any) -> dict[str, dict[str, Any]]:
    """``{tool name: outputSchema}`` for the tools of a ``tools/list`` result that declare one."""
    out: dict[str, dict[str, Any]] = {}
    tools = result.get("tools") if isinstance(result, Mapping) else None
    if not isinstance(tools, list):
        return out
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        name, schema = tool.get("name"), tool.get("outputSchema")
        if isinstance(name, str) and isinstance(schema, Mapping):
            out[name] = dict(schema)
    return out


def listed_tools(result: Any) -> dict[str, dict[str, Any]]:
    """``{tool name: its entry}`` for the tools of a ``tools/list`` result (what an
    emulator is told of each: description, input and output schemas)."""
    tools = result.get("tools") if isinstance(result, Mapping) else None
    if not isinstance(tools, list):
        return {}
    return {
        tool["name"]: dict(tool)
        for tool in tools
        if isinstance(tool, Mapping) and isinstance(tool.get("name"), str)
    }


#: Pages of ``tools/list`` the proxy follows when it lists the tools for itself.
MAX_LISTING_PAGES = 20


async def listed_schemas(
    fetch_page: Callable[[str, Any], Awaitable[Any]],
    tools: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """The output schemas of every page of ``tools/list``, the proxy asking for itself.

    ``await fetch_page(request_id, cursor)`` sends one request (the transport's business)
    and returns its ``result``, or None when there is none to be had; the pages are
    followed by ``nextCursor``, at most :data:`MAX_LISTING_PAGES`. ``tools``, if given,
    gets every tool's entry (:func:`listed_tools`).
    """
    out: dict[str, dict[str, Any]] = {}
    cursor: Any = None
    for page in range(MAX_LISTING_PAGES):
        result = await fetch_page(f"litmus-sandbox:tools/list:{page}", cursor)
        if not isinstance(result, Mapping):
            break
        out.update(output_schemas(result))
        if tools is not None:
            tools.update(listed_tools(result))
        cursor = result.get("nextCursor")
        if not cursor:
            break
    return out


def placeholder(schema: Mapping[str, Any], text: str) -> Any:
    """A small value that ``schema`` (a JSON Schema) accepts, carrying ``text`` in its strings.

    Covers what tool output schemas use: ``type`` (or a list of types), ``properties`` and
    ``required``, ``items``, ``minItems`` and ``uniqueItems``, ``enum``, ``const``,
    ``default``, ``anyOf``, ``oneOf`` and ``allOf``, local ``$ref`` (``#/$defs/...``, as
    pydantic writes nested models), string lengths and number bounds. Optional properties
    are left out. (A ``pattern`` is not honoured.)
    """
    return _value(schema, text, 0, schema)


def _value(schema: Any, text: str, depth: int, root: Mapping[str, Any], nth: int = 0) -> Any:
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return text
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _resolve(ref, root)
        if target is not None:
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return _value(_merge([target, rest]) if rest else target, text, depth + 1, root, nth)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[nth % len(enum)]
    if "default" in schema and not nth:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _value(options[0], text, depth + 1, root, nth)
    parts = schema.get("allOf")
    if isinstance(parts, list) and parts:
        return _value(_merge([schema, *parts]), text, depth + 1, root, nth)
    kind = _kind(schema)
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        required = schema.get("required")
        names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
        return {name: _value(props.get(name, {}), text, depth + 1, root) for name in names}
    if kind == "array":
        n = schema.get("minItems", 0)
        items = schema.get("items", {})
        count = n if isinstance(n, int) else 0
        # Distinct items when asked (and always harmless): the i-th differs by its place.
        return [_value(items, text, depth + 1, root, i) for i in range(count)]
    if kind == "string":
        return _string(schema, f"{text}{nth}" if nth else text)
    if kind in ("number", "integer"):
        return _number(schema, kind, nth)
    if kind == "boolean":
        return bool(nth % 2)
    if kind == "null":
        return None
    return text if not nth else f"{text}{nth}"  # no type: anything goes


def _resolve(ref: str, root: Mapping[str, Any]) -> Any:
    """The schema a local ``$ref`` (``#`` or a ``#/...`` JSON pointer) points at, or None."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None  # a remote reference: not followed
    node: Any = root
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _string(schema: Mapping[str, Any], text: str) -> str:
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    if isinstance(low, int) and len(text) < low:
        text = text.ljust(low, "_")
    return text


def _number(schema: Mapping[str, Any], kind: str, nth: int) -> int | float:
    def bound(key: str) -> float | None:
        v = schema.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    low, xlow = bound("minimum"), bound("exclusiveMinimum")
    high, xhigh = bound("maximum"), bound("exclusiveMaximum")
    value: float = 0.0
    if low is not None:
        value = low
    if xlow is not None and value <= xlow:
        value = xlow + 1 if kind == "integer" else xlow + (abs(xlow) or 1) * 0.5
    value += nth
    if high is not None and value > high:
        value = high
    if xhigh is not None and value >= xhigh:
        value = xhigh - 1 if kind == "integer" else xhigh - (abs(xhigh) or 1) * 0.5
    if kind == "integer":
        whole = math.ceil(value)
        if (high is not None and whole > high) or (xhigh is not None and whole >= xhigh):
            whole = math.floor(value)
        return whole
    return value


def _kind(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        named = [k for k in kind if isinstance(k, str)]
        # Prefer what carries the text best; null only as a last resort.
        for preferred in ("object", "string", "array", "number", "integer", "boolean"):
            if preferred in named:
                return preferred
        return named[0] if named else None
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _merge(parts: list[Any]) -> dict[str, Any]:
    """The ``allOf`` parts as one schema: properties and required lists united."""
    merged: dict[str, Any] = {}
    props: dict[str, Any] = {}
    required: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, Mapping):
                props.update(value)
            elif key == "required" and isinstance(value, list):
                required.extend(v for v in value if isinstance(v, str) and v not in required)
            elif key != "allOf":
                merged.setdefault(key, value)
    if props:
        merged["properties"] = props
    if required:
        merged["required"] = required
    return merged
