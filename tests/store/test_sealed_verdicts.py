"""Verdicts the gate's engine keeps whole come back equal, and of their own type."""

from __future__ import annotations

from typing import Any

from factories import legacy, replace, verdict
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox._store.verdict_columns import seal, unseal

#: What a field typed ``Any`` may hold once a verdict is built in Python, not read.
ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    case=st.text(min_size=1, max_size=20),
    steps=st.lists(st.booleans(), max_size=6),
    unknown=st.dictionaries(st.text(max_size=8), ANY, max_size=3),
    is_legacy=st.booleans(),
)
def test_a_verdict_sealed_and_unsealed_is_equal_and_of_its_type(
    case: str, steps: list[bool], unknown: dict[str, Any], is_legacy: bool
) -> None:
    base = legacy(case, all(steps)) if is_legacy else verdict(case, all(steps), steps=steps)
    v = replace(base, unknown_provenance=unknown) if unknown else base
    back = unseal(seal(v))
    assert type(back) is type(v)
    assert back == v


def test_what_messagepack_cannot_give_back_is_pickled() -> None:
    for name, value in (("pair", (1, 2)), ("big", 1 << 70)):
        v = replace(verdict("c"), unknown_provenance={name: value})
        sealed = seal(v)
        assert sealed[:1] == b"P"
        back = unseal(sealed)
        assert back == v
        assert type(back.unknown_provenance[name]) is type(value)
    assert seal(verdict("c"))[:1] == b"V"
    assert seal(replace(legacy("c"), unknown_provenance={"seed": 3}))[:1] == b"L"
