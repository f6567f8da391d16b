"""Tools' output schemas, and structured content for results the proxy originates (sans-io).

A tool that declares an ``outputSchema`` promises ``structuredContent`` that conforms to
it, and MCP clients check: the official Python client refuses a result without it. A
stubbed or swallowed call is answered by the proxy, usually from a text stand-in, so the
proxy learns each tool's schema from the ``tools/list`` answers it relays and, when the
stand-in has no structure of its own, gives the smallest value the schema accepts, with
the stand-in's text in its strings. The step records it as shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["output_schemas", "placeholder"]

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


def placeholder(schema: Mapping[str, Any], text: str) -> Any:
    """A small value that ``schema`` (a JSON Schema) accepts, carrying ``text`` in its strings.

    Covers what tool output schemas use: ``type`` (or a list of types), ``properties`` and
    ``required``, ``items`` and ``minItems``, ``enum``, ``const``, ``default``, ``anyOf``,
    ``oneOf`` and ``allOf``, and minimums for numbers and string lengths. Optional
    properties are left out.
    """
    return _value(schema, text, 0)


def _value(schema: Any, text: str, depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return text
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _value(options[0], text, depth + 1)
    parts = schema.get("allOf")
    if isinstance(parts, list) and parts:
        return _value(_merge([schema, *parts]), text, depth + 1)
    kind = _kind(schema)
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        required = schema.get("required")
        names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
        return {name: _value(props.get(name, {}), text, depth + 1) for name in names}
    if kind == "array":
        n = schema.get("minItems", 0)
        items = schema.get("items", {})
        return [_value(items, text, depth + 1) for _ in range(n if isinstance(n, int) else 0)]
    if kind == "string":
        n = schema.get("minLength", 0)
        return text.ljust(n) if isinstance(n, int) else text
    if kind in ("number", "integer"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        if isinstance(low, int | float) and not isinstance(low, bool):
            value = low + 1 if "minimum" not in schema else low
            return int(value) if kind == "integer" else value
        return 0
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return text  # no type: anything goes


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
