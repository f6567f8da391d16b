"""Structured content for results the proxy originates: the smallest value a schema accepts."""

from __future__ import annotations

from typing import Any

import anyio
import jsonschema
from hypothesis import given
from hypothesis import strategies as st
from litmus_sandbox.adapters.mcp._schema import output_schemas, placeholder

_leaf = st.one_of(
    st.just({"type": "string"}),
    st.builds(lambda n: {"type": "string", "minLength": n}, st.integers(0, 5)),
    st.just({"type": "number"}),
    st.builds(lambda n: {"type": "integer", "minimum": n}, st.integers(-3, 3)),
    st.builds(lambda n: {"type": "number", "exclusiveMinimum": n}, st.integers(-3, 3)),
    st.just({"type": "boolean"}),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 4)),
    st.builds(
        lambda lo, width: {"type": "integer", "minimum": lo + 0.5, "maximum": lo + 1 + width},
        st.integers(-5, 5),
        st.integers(0, 3),
    ),
    st.builds(lambda hi: {"type": "number", "exclusiveMaximum": hi}, st.integers(-5, 5)),
    st.builds(lambda hi: {"type": "integer", "maximum": hi}, st.integers(-5, 5)),
    st.just({"type": "null"}),
    st.just({"type": ["string", "null"]}),
    st.builds(lambda xs: {"enum": xs}, st.lists(st.integers() | st.text(), min_size=1)),
    st.builds(lambda x: {"const": x}, st.integers() | st.text()),
    st.just({}),
)


def _compound(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def names(alphabet: str) -> st.SearchStrategy[dict[str, Any]]:
        return st.dictionaries(st.text(alphabet, min_size=1, max_size=4), inner, max_size=4)

    props = names("abcxyz")

    def obj(p: dict[str, Any], pick: list[bool]) -> dict[str, Any]:
        required = [name for name, keep in zip(p, pick, strict=False) if keep]
        return {"type": "object", "properties": p, "required": required}

    return st.one_of(
        st.builds(obj, props, st.lists(st.booleans(), max_size=4)),
        st.builds(
            lambda i, n: {"type": "array", "items": i, "minItems": n}, inner, st.integers(0, 3)
        ),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(
            lambda kind, n: {
                "type": "array",
                "items": {"type": kind},
                "minItems": n,
                "uniqueItems": True,
            },
            st.sampled_from(["string", "integer", "number"]),
            st.integers(0, 4),
        ),
        # allOf parts over different names (same-named parts could contradict each other).
        st.builds(
            lambda a, b: {"allOf": [a, b]},
            st.builds(obj, names("abc"), st.just([True] * 4)),
            st.builds(obj, names("xyz"), st.just([True] * 4)),
        ),
    )


_inner = st.recursive(_leaf, _compound, max_leaves=12)
# As pydantic writes nested models: a property that refers to a definition of the root.
_with_defs = st.builds(
    lambda item: {
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "required": ["item"],
        "$defs": {"Item": item},
    },
    _inner,
)
schemas = st.one_of(_inner, _with_defs)


@given(schema=schemas, text=st.text(max_size=20))
def test_the_placeholder_conforms_to_its_schema(schema: dict[str, Any], text: str) -> None:
    jsonschema.validate(placeholder(schema, text), schema)


def test_the_stand_in_text_goes_into_the_strings() -> None:
    schema = {
        "type": "object",
        "properties": {
            "content": {"type": "string"},
            "lines": {"type": "integer"},
            "optional": {"type": "string"},
        },
        "required": ["content", "lines"],
    }
    assert placeholder(schema, "Successfully wrote") == {
        "content": "Successfully wrote",
        "lines": 0,
    }


def test_output_schemas_come_from_a_tools_list_result() -> None:
    schema = {"type": "object", "properties": {"content": {"type": "string"}}}
    result = {
        "tools": [
            {"name": "read", "inputSchema": {"type": "object"}, "outputSchema": schema},
            {"name": "write", "inputSchema": {"type": "object"}},
            {"name": 7, "outputSchema": schema},
            "junk",
        ]
    }
    assert output_schemas(result) == {"read": schema}
    assert output_schemas({"tools": "nope"}) == {}
    assert output_schemas(None) == {}


def test_listing_for_itself_follows_every_page_and_stops() -> None:
    from litmus_sandbox.adapters.mcp._schema import MAX_LISTING_PAGES, listed_schemas

    pages = {
        None: {"tools": [{"name": "a", "outputSchema": {"type": "object"}}], "nextCursor": "p2"},
        "p2": {"tools": [{"name": "b", "inputSchema": {}}, {"name": "c", "outputSchema": {}}]},
    }
    asked: list[tuple[str, object]] = []

    async def fetch(rid: str, cursor: object) -> object:
        asked.append((rid, cursor))
        return pages.get(cursor)  # type: ignore[call-overload]

    assert anyio.run(listed_schemas, fetch) == {"a": {"type": "object"}, "c": {}}
    assert [c for _, c in asked] == [None, "p2"]
    assert len({rid for rid, _ in asked}) == 2  # each request its own id

    async def endless(rid: str, cursor: object) -> object:
        asked.append((rid, cursor))
        return {"tools": [], "nextCursor": "again"}

    asked.clear()
    assert anyio.run(listed_schemas, endless) == {}
    assert len(asked) == MAX_LISTING_PAGES

    async def nothing(rid: str, cursor: object) -> object:
        return None

    assert anyio.run(listed_schemas, nothing) == {}
