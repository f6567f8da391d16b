"""The emulator's prompt, the strict reading of its answer, and the history and keys that
make a re-run ask the same question (sans-io)."""

from __future__ import annotations

import string

import pytest
from factories import call, msg

from litmus_sandbox._core.emulation import (
    DEFAULT_PROMPT_TEMPLATE,
    BadEmulation,
    Emulated,
    History,
    ToolSpec,
    emulation_key,
    parse_emulation,
    render_prompt,
)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"result": {"id": 3}}', Emulated(result={"id": 3})),
        ('{"result": null}', Emulated(result=None)),
        ('  {"error": "no such account"}\n', Emulated(error="no such account")),
        ('{"result": "a \\"quoted\\" {brace"}', Emulated(result='a "quoted" {brace')),
    ],
)
def test_a_result_or_an_error_is_read(content: str, expected: Emulated) -> None:
    assert parse_emulation(content) == expected


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"result": 1, "result": 2}', "key 'result' twice"),
        ('{"result": {"a": 1, "a": 1}}', "key 'a' twice"),
        ('{"result": 1, "error": "x"}', "exactly one of"),
        ('{"answer": 1}', "exactly one of"),
        ("{}", "no key"),
        ('{"error": null}', "not a string"),
        ('"result"', "not an object"),
        ("result: 1", "not JSON"),
        ('{"result": ' + "[" * 33 + "]" * 33 + "}", "deeper than 32"),
    ],
)
def test_anything_else_is_a_bad_emulation(content: str, why: str) -> None:
    with pytest.raises(BadEmulation, match=why):
        parse_emulation(content)


def test_the_history_hash_follows_what_the_agent_did_and_saw_only() -> None:
    a, b = History(), History()
    a.add(msg(0, "user", "pay bob"))
    a.add(call(1, "send", args={"to": "bob"}, shown="sent"))
    # Another episode id, other indices, other notes: the same history.
    b.add(msg(5, "user", "pay bob", eid="other"))
    b.add(call(9, "send", args={"to": "bob"}, shown="sent", eid="other", meta={"x": 1}))
    assert a.view().sha256 == b.view().sha256
    b.add(msg(10, "assistant", "done"))
    assert b.view().sha256 != a.view().sha256
    assert b.view().steps == 3


def test_the_prompt_shows_the_spec_the_history_and_the_call() -> None:
    h = History()
    h.add_message("user", "pay")
    for i in range(25):
        h.add_call("noop", {"i": i}, {"content": [{"type": "text", "text": "x"}]})
    spec = ToolSpec(name="pay", description="Pays.", input_schema={"type": "object"})
    prompt = render_prompt(string.Template(DEFAULT_PROMPT_TEMPLATE), spec, {"to": "bob"}, h.view())
    assert "Tool: pay\nDescription: Pays.\n" in prompt
    assert 'Schema: {"arguments":{"type":"object"}}' in prompt
    assert "(6 older steps not shown)" in prompt  # 26 steps, the last 20 shown
    assert '[25] call noop {"i":24} -> result: x' in prompt
    assert 'The call to answer: pay with arguments {"to":"bob"}' in prompt


def test_the_key_names_the_emulator_tool_arguments_and_context() -> None:
    h = History()
    spec = ToolSpec(name="pay")
    key = emulation_key("fp", spec, {"a": 1, "b": 2}, h.view())
    assert key == emulation_key("fp", spec, {"b": 2, "a": 1}, h.view())  # key order aside
    assert key != emulation_key("fp2", spec, {"a": 1, "b": 2}, h.view())
    assert key != emulation_key(
        "fp", ToolSpec(name="pay", description="d"), {"a": 1, "b": 2}, h.view()
    )
    h.add_message("user", "hi")
    assert key != emulation_key("fp", spec, {"a": 1, "b": 2}, h.view())
