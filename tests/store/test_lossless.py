"""Text that is not valid Unicode, and bytes, in every field of a record: written as valid
UTF-8 JSON, read back as stand-ins, restored exactly (``_model/lossless.py``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import (
    Actual,
    Effects,
    EpisodeEnd,
    EpisodeHeader,
    Finding,
    FsEffect,
    JsonlWriter,
    MessageStep,
    Shown,
    ToolCallStep,
    read_episodes,
    restore_original,
)
from litmus_sandbox._model import lossless
from litmus_sandbox._model.codec import (
    as_written,
    canonical_json,
    decode_episode_record,
    encode,
    json_bytes,
)

_BYTES = (bytes, bytearray, memoryview)

# Text with lone surrogates (hypothesis leaves them out unless asked), text as
# ``os.listdir`` gives a name that is not UTF-8, and what the writer's stand-ins look like.
chars = st.one_of(
    st.characters(),
    st.characters(categories=["Cs"]),
    st.sampled_from("\ufffd#2"),
)
texts = st.one_of(
    st.text(chars, max_size=10),
    st.binary(max_size=8).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), texts, st.binary(max_size=10)
)
keys = st.one_of(texts, st.sampled_from(["k", "k\udcff", "k\udcfe", "k\ufffd", "k\ufffd#2"]))
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(keys, st.binary(max_size=4)), inner, max_size=4),
    ),
    max_leaves=12,
)
objects = st.dictionaries(keys, values, max_size=5)
#: Values as arguments usually are: text keys only.
arguments = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def records(draw: st.DrawFn) -> msgspec.Struct:
    eid = draw(texts)
    kind = draw(st.sampled_from(["episode", "message", "tool_call", "end"]))
    if kind == "episode":
        return EpisodeHeader(
            v=1,
            episode_id=eid,
            case_id=draw(texts),
            agent=draw(texts),
            suite=draw(texts),
            tool_modes={draw(texts): "real"},
            meta=draw(objects),
        )
    if kind == "message":
        return MessageStep(v=1, episode_id=eid, index=0, role="user", text=draw(texts))
    if kind == "end":
        return EpisodeEnd(v=1, episode_id=eid, status="aborted", reason=draw(texts))
    return ToolCallStep(
        v=1,
        episode_id=eid,
        index=0,
        call_id=draw(texts),
        tool=draw(texts),
        args=draw(objects),
        fidelity="real",
        shown=Shown(
            content=({"type": "text", "text": draw(texts)}, draw(objects)),
            structured=draw(values),
        ),
        actual=Actual(
            outcome="raised",
            value=draw(values),
            error_type=draw(texts),
            error_message=draw(texts),
        ),
        effects=Effects(fs=(FsEffect(op="created", path=draw(texts)),), state=(draw(objects),)),
        findings=(Finding(code="escape", detail=draw(texts)),),
        meta=draw(objects),
    )


def plain(value: Any) -> Any:
    """``value`` as builtins to compare: lists for tuples, bytes for any bytes."""
    if isinstance(value, msgspec.Struct):
        value = msgspec.to_builtins(value, builtin_types=_BYTES)
    if isinstance(value, dict):
        return {(bytes(k) if isinstance(k, _BYTES) else k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, _BYTES):
        return bytes(value)
    return value


def strict_json(line: bytes) -> Any:
    """The line read as strict readers read it: UTF-8, then the stdlib's and msgspec's JSON."""
    text = line.decode("utf-8")  # strict: no lone surrogate, no invalid byte
    value = json.loads(text)
    assert msgspec.json.decode(line) == value
    return value


@given(records())
def test_every_record_is_written_as_valid_json_and_restored_exactly(
    record: msgspec.Struct,
) -> None:
    line = encode(record)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    strict_json(line)
    back = decode_episode_record(line.strip())
    assert plain(restore_original(back)) == plain(record)
    assert plain(as_written(record)) == plain(back)


@given(records())
def test_what_readers_get_is_valid_text(record: msgspec.Struct) -> None:
    """The stand-ins are what judges and reports see: text UTF-8 encodes, and no bytes."""
    back = decode_episode_record(encode(record).strip())
    msgspec.json.encode(back)  # raises on a lone surrogate
    assert b"\n" not in msgspec.json.encode(back)


def test_a_record_with_nothing_to_stand_in_for_is_written_as_before() -> None:
    step = ToolCallStep(
        v=1,
        episode_id="e",
        index=0,
        call_id="e:1",
        tool="ls",
        args={"path": "é", "n": 196},  # a msgpack bin marker byte, but no bytes
        fidelity="real",
        shown=Shown(content=({"type": "text", "text": "Ą"},)),
    )
    assert encode(step) == msgspec.json.encode(step) + b"\n"
    assert as_written(step) == step


def test_the_form_is_the_documented_one() -> None:
    odd_key, stand_in_key = "k\udcff", "k\ufffd"  # (ruff takes them for one literal key)
    step = MessageStep(v=1, episode_id="e", index=0, role="user", text="a\udcff")
    call = ToolCallStep(
        v=1,
        episode_id="e",
        index=1,
        call_id="e:1",
        tool="read",
        args={odd_key: b"\xff\x00", stand_in_key: 1},
        fidelity="real",
        shown=Shown(),
    )
    assert json.loads(encode(step)) == {
        **json.loads(msgspec.json.encode(msgspec.structs.replace(step, text="a\ufffd"))),
        "meta": {"lossless": [{"at": ["text"], "str": "Ye2zvw=="}]},
    }
    written = json.loads(encode(call))
    assert written["args"] == {"k\ufffd#2": "\ufffd\x00", "k\ufffd": 1}
    assert written["meta"] == {
        "lossless": [
            {"at": ["args", "k\ufffd#2"], "str": "a+2zvw==", "key": True},
            {"at": ["args", "k\ufffd#2"], "bytes": "/wA="},
        ]
    }


def test_a_file_of_such_records_reads_back_whole(tmp_path: Path) -> None:
    """Through the stream writer and reader: the episode is complete, every line is JSON
    to ``jq`` too, and restoring gives back what was recorded."""
    path = tmp_path / "eps.jsonl"
    steps = [
        MessageStep(v=1, episode_id="e\udcff", index=0, role="user", text="ls \udcff"),
        ToolCallStep(
            v=1,
            episode_id="e\udcff",
            index=1,
            call_id="c",
            tool="ls\udcff",
            args={"dir\udcff": b"\xff"},
            fidelity="real",
            shown=Shown(structured=["name\udcff", b"\x00\xff"]),
        ),
    ]
    header = EpisodeHeader(v=1, episode_id="e\udcff", case_id="c\udcff", agent="a\udcff")
    with JsonlWriter(path) as w:
        w.write(header)
        w.write_many(steps)
        w.write(EpisodeEnd(v=1, episode_id="e\udcff", status="complete", steps=2))
    for line in path.read_bytes().splitlines():
        strict_json(line)
    if shutil.which("jq") is not None:
        subprocess.run(["jq", "-e", ".kind", str(path)], check=True, capture_output=True)
    (episode,) = read_episodes([path])
    assert episode.complete
    assert episode.case_id == "c\ufffd"
    original = restore_original(episode)
    assert original.header.case_id == "c\udcff"
    assert original.header.agent == "a\udcff"
    assert [plain(s) for s in original.steps] == [plain(s) for s in steps]


def test_restoring_ignores_entries_that_do_not_apply() -> None:
    """A malformed entry, or one whose place no longer holds its stand-in, leaves the
    record as it is there; the others still apply."""
    good = {"at": ["text"], "str": "Ye2zvw=="}
    bad: list[Any] = [
        "junk",
        {"at": ["text"]},
        {"at": ["text"], "str": "!!", "bytes": "AA=="},
        {"at": ["text"], "str": "not base64!"},
        {"at": [], "str": "YQ=="},
        {"at": ["nowhere", 3], "str": "Ye2zvw=="},
        {"at": ["role"], "str": "Ye2zvw=="},  # "user" is not its stand-in
        {"at": ["text"], "bytes": "/w==", "key": "yes"},
    ]
    step = MessageStep(
        v=1,
        episode_id="e",
        index=0,
        role="user",
        text="a\ufffd",
        meta={"lossless": [*bad, good], "other": 1},
    )
    restored = restore_original(step)
    assert restored.text == "a\udcff"
    assert restored.role == "user"
    assert restored.meta == {"other": 1}
    stale = msgspec.structs.replace(step, text="edited", meta={"lossless": [good]})
    assert restore_original(stale).text == "edited"


def test_a_bytes_key_where_the_type_wants_text_keeps_its_text_form() -> None:
    call = ToolCallStep(
        v=1,
        episode_id="e",
        index=0,
        call_id="c",
        tool="t",
        args={"a": {b"\xff": b"\x01"}},
        fidelity="real",
        shown=Shown(),
        meta={b"\xfe": 1},  # type: ignore[dict-item]
    )
    back = restore_original(decode_episode_record(encode(call).strip()))
    assert isinstance(back, ToolCallStep)
    assert back.meta == {"\ufffd": 1}
    assert back.args == {"a": {"\ufffd": b"\x01"}}


def test_the_values_that_may_hold_bytes_are_every_value_typed_any() -> None:
    """``may_hold_bytes`` looks only where a record's annotations allow anything: that list
    must name every such place (a field added later with ``Any`` in it must be listed)."""

    def any_places(t: msgspec.inspect.Type, at: str) -> set[str]:
        if isinstance(t, msgspec.inspect.AnyType):
            return {at}
        if isinstance(t, msgspec.inspect.UnionType):
            return set().union(*(any_places(u, at) for u in t.types))
        if isinstance(t, msgspec.inspect.StructType):
            return set().union(*(any_places(f.type, f"{at}.{f.name}") for f in t.fields))
        if isinstance(t, msgspec.inspect.DictType):
            return any_places(t.value_type, at)
        if isinstance(t, msgspec.inspect.ListType | msgspec.inspect.VarTupleType):
            return any_places(t.item_type, at)
        return set()

    expected = {
        ToolCallStep: {
            ".args",
            ".shown.content",
            ".shown.structured",
            ".actual.value",
            ".effects.state",
            ".meta",
        },
        MessageStep: {".meta"},
        EpisodeHeader: {".oracles", ".meta"},
        EpisodeEnd: {".unattributed.state", ".startup.state", ".shutdown.state", ".meta"},
    }
    for cls, places in expected.items():
        assert any_places(msgspec.inspect.type_info(cls), "") == places, cls
        assert cls in lossless._ANY_VALUES
    blob = b"\x01"
    for step in (
        ToolCallStep(
            v=1,
            episode_id="e",
            index=0,
            call_id="c",
            tool="t",
            args={},
            fidelity="real",
            shown=Shown(),
            actual=Actual(outcome="raised", value=blob),
        ),
        ToolCallStep(
            v=1,
            episode_id="e",
            index=0,
            call_id="c",
            tool="t",
            args={},
            fidelity="real",
            shown=Shown(),
            effects=Effects(state=({"x": [blob]},)),
        ),
        EpisodeHeader(v=1, episode_id="e", case_id="c", oracles={"fs": blob}),
        EpisodeEnd(
            v=1, episode_id="e", status="complete", unattributed=Effects(state=({"x": blob},))
        ),
        EpisodeEnd(v=1, episode_id="e", status="complete", startup=Effects(state=({"x": blob},))),
        EpisodeEnd(v=1, episode_id="e", status="complete", shutdown=Effects(state=({"x": blob},))),
    ):
        assert lossless.may_hold_bytes(step)
        assert b'"bytes":"AQ=="' in encode(step)


@given(arguments, arguments)
def test_canonical_json_tells_values_apart_even_with_lone_surrogates(a: Any, b: Any) -> None:
    """Replay keys and content hashes: equal values, equal bytes; different ones differ
    (bytes are JSON's base64 there, as they always were)."""

    def as_json(v: Any) -> Any:
        return json.loads(json.dumps(msgspec.to_builtins(v), ensure_ascii=True))

    assert canonical_json(a) == canonical_json(a)
    assert (canonical_json(a) == canonical_json(b)) == (
        json.dumps(as_json(a), sort_keys=True) == json.dumps(as_json(b), sort_keys=True)
    )
    assert len(json_bytes(a)) >= 1


@pytest.mark.parametrize("value", ["a\udcff", b"\xff", {"k\udcff": [b"\x00"]}])
def test_stand_in_is_valid_text(value: Any) -> None:
    msgspec.json.encode(lossless.stand_in(value))
