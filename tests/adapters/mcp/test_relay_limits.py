"""The relay's bounds (sans-io): the id scan that answers a refused message with its id."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from litmus_sandbox.adapters.mcp._relay import Relay, ToClient
from litmus_sandbox.adapters.mcp._relay._limits import (
    ID_SCAN_BYTES,
    ID_SCAN_TOKENS,
    request_id_of,
)

DEEP = b"[" * 100_000 + b"]" * 100_000


def head(rid: Any) -> bytes:
    """A request's text up to its params' value, its id first."""
    return b'{"jsonrpc":"2.0","id":' + json.dumps(rid).encode() + b',"method":"tools/call",'


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (head(1) + b'"params":' + DEEP + b"}", 1),
        (head('a"b') + b'"params":{"x":"' + b"y" * 10_000_000, 'a"b'),  # cut in a string
        (b' \n{ "id" :\t-2.5e3 , "params": {}}', -2500.0),
        (b'{"method":"id","params":{"id":3},"id":"top"}', "top"),  # value "id", nested id
        (b'{"\\u0069d":7}', 7),  # the key spelt with an escape
        (b'{"id":null,"method":"tools/call"}', None),
        (b'{"id":{"a":1}}', None),
        (b'{"id":true}', None),
        (b'{"id":12', None),  # cut inside the id: it may go on
        (b'{"id":1e999}', None),  # not a finite number
        (b'{"id":' + b"9" * 5000 + b"}", None),  # too long to convert
        (b'{"id":"\xff"}', None),  # not UTF-8
        (b'[{"jsonrpc":"2.0","id":1}]', None),  # a batch: no one id
        (b'{"params":' + DEEP + b',"id":1}', None),  # past the depth bound
        (b'{"a":"[{\\"id\\":1}"', None),  # brackets and ids inside strings do not count
        (b'{"a":1}{"id":2}', None),  # the top-level object ended
        (b"", None),
        (b"junk", None),
    ],
)
def test_the_id_scan(data: bytes, expected: Any) -> None:
    assert request_id_of(data) == expected


def test_the_id_scan_is_bounded() -> None:
    many = b'{"params":[' + b'"a",' * ID_SCAN_TOKENS + b'],"id":1}'
    assert request_id_of(many) is None  # the id comes past the token bound
    far = b'{"params":"' + b"y" * ID_SCAN_BYTES + b'","id":1}'
    assert request_id_of(far) is None  # ... or past the byte bound
    assert request_id_of(b'{"params":[' + b'"a",' * 100 + b'],"id":1}') == 1


ids = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63),
    st.text(max_size=20),
    st.floats(allow_nan=False, allow_infinity=False),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@given(rid=ids, params=values, depth=st.integers(0, 300), pad=st.integers(0, 3000))
@settings(max_examples=200, deadline=None)
def test_the_id_of_a_request_whose_id_precedes_its_params_is_found(
    rid: Any, params: Any, depth: int, pad: int
) -> None:
    inner = json.dumps({"blob": "[{" * pad, "v": params}).encode()
    text = head(rid) + b'"params":' + b"[" * depth + inner + b"]" * depth + b"}"
    assert json.loads(text)["id"] == rid  # a request indeed
    assert request_id_of(text) == rid
    cut = len(head(rid)) + (len(text) - len(head(rid))) // 2
    assert request_id_of(text[:cut]) == rid  # what was read of an oversized one


@given(st.binary(max_size=2000))
@settings(max_examples=500)
def test_the_id_scan_never_raises(data: bytes) -> None:
    found = request_id_of(data)
    assert found is None or isinstance(found, str | int | float)


@given(
    st.lists(
        st.sampled_from([b"{", b"}", b"[", b"]", b'"', b"\\", b'"id"', b":", b",", b"1", b" "]),
        max_size=200,
    )
)
def test_the_id_scan_never_raises_on_json_like_junk(parts: list[bytes]) -> None:
    found = request_id_of(b"".join(parts))
    assert found is None or isinstance(found, str | int | float)


def test_the_core_answers_a_refused_message_with_its_id() -> None:
    relay = Relay(max_message_bytes=1024)
    deep = head(7) + b'"params":{"a":' + DEEP + b"}}\n"
    (answer,) = [a for a in relay.from_client(deep, 0.0) if isinstance(a, ToClient)]
    assert json.loads(answer.data)["id"] == 7
    actions = relay.client_too_long(70_000, head("s") + b'"params":{"x":"yyyy')
    (answer,) = [a for a in actions if isinstance(a, ToClient)]
    assert json.loads(answer.data)["id"] == "s"
    (answer,) = [a for a in relay.client_too_long(70_000) if isinstance(a, ToClient)]
    assert json.loads(answer.data)["id"] is None  # nothing read: no id to find
