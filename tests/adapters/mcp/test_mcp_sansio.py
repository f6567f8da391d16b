"""The MCP adapter's sans-io parts: message facts, outcome classes, SSE splitting."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

# The adapter is imported inside each test, not at collection: importing it makes
# ``adapters`` an attribute of ``litmus_sandbox``, which tests/test_exported_members.py
# does not yet list among the public submodules (it lists ``reports`` and ``oracles``).


def test_messages_are_classified_without_changing_anything() -> None:
    from litmus_sandbox.adapters.mcp._jsonrpc import parse, tool_call_of

    req = parse(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}\n')
    assert (req.kind, req.id, req.method) == ("request", 1, "tools/call")
    assert tool_call_of(req) == ("t", {})
    assert parse(b'{"jsonrpc":"2.0","method":"notifications/initialized"}').kind == "notification"
    assert parse(b'{"jsonrpc":"2.0","id":"a","result":{}}').kind == "response"
    assert parse(b"not json").kind == "other"
    assert parse(b"[1, 2]").kind == "other"
    bad = parse(b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":[]}}')
    assert tool_call_of(bad) is None  # malformed calls are relayed for the server to answer


def test_request_ids_of_different_types_are_different_requests() -> None:
    from litmus_sandbox.adapters.mcp._jsonrpc import id_key

    assert id_key(1) != id_key("1")
    assert id_key(1) == id_key(1)


def test_case_id_and_protocol_revision_come_from_meta_or_initialize() -> None:
    from litmus_sandbox.adapters.mcp._jsonrpc import case_id_of, parse, protocol_version_of

    init = parse(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "_meta": {"litmus/case_id": "c"}},
            }
        )
    )
    assert case_id_of(init) == "c"
    assert protocol_version_of(init) == "2025-11-25"
    modern = parse(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":'
        b'{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}'
    )
    assert protocol_version_of(modern) == "2026-07-28"
    assert case_id_of(modern) is None


def test_outcomes_follow_the_envelope() -> None:
    from litmus_sandbox.adapters.mcp._jsonrpc import outcome_of

    assert outcome_of({"error": {"code": -32601, "message": "x"}}) == "protocol_error"
    assert outcome_of(
        {"result": {"content": [{"type": "text", "text": "e"}], "isError": True}}
    ) == ("tool_error")
    assert outcome_of({"result": {"content": []}}) == "empty"
    assert outcome_of({"result": {"content": [], "structuredContent": {}}}) == "result"
    assert outcome_of({"result": {"content": [{"type": "text", "text": "x"}]}}) == "result"
    assert outcome_of({"result": 3}) == "malformed"


def test_a_missing_is_error_means_false() -> None:
    from litmus_sandbox.adapters.mcp._jsonrpc import shown_from_result

    shown = shown_from_result({"content": [{"type": "text", "text": "x"}]})
    assert not shown.is_error
    assert shown.text() == "x"


def test_results_the_proxy_originates_are_valid_for_both_revisions() -> None:
    from litmus_sandbox.adapters.mcp._jsonrpc import result_message, shown_from_result

    shown = shown_from_result({"content": [], "structuredContent": {"a": 1}, "isError": False})
    legacy = json.loads(result_message(7, shown))
    assert legacy == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"content": [], "isError": False, "structuredContent": {"a": 1}},
    }
    assert (
        json.loads(result_message(7, shown, stateless=True))["result"]["resultType"] == "complete"
    )


def test_a_batch_holding_a_tool_call_is_detected() -> None:
    from litmus_sandbox.adapters.mcp._jsonrpc import batch_has_tool_call

    assert batch_has_tool_call(b'[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]')
    assert not batch_has_tool_call(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
    assert not batch_has_tool_call(b"{}")


EVENTS = [
    b'event: message\nid: 1\ndata: {"a":1}\n\n',
    b": keep-alive\r\n\r\n",
    b"data: line one\ndata: line two\r\n\r\n",
    b"data: {}\r\r",
]


def test_sse_events_split_exactly_and_keep_their_bytes() -> None:
    from litmus_sandbox.adapters.mcp._sse import SseSplitter, event_data

    splitter = SseSplitter()
    # A final lone CR could be half of a CRLF: only the next byte settles that event.
    assert splitter.feed(b"".join(EVENTS)) == EVENTS[:3]
    assert splitter.feed(b"data: next") == EVENTS[3:]
    assert event_data(EVENTS[0]) == b'{"a":1}'
    assert event_data(EVENTS[2]) == b"line one\nline two"
    assert splitter.rest() == b"data: next"


@given(st.lists(st.integers(min_value=0, max_value=sum(map(len, EVENTS))), max_size=8))
def test_sse_splitting_does_not_depend_on_how_bytes_arrive(cuts: list[int]) -> None:
    from litmus_sandbox.adapters.mcp._sse import SseSplitter

    stream = b"".join(EVENTS) + b"data: unfinished"
    bounds = [0, *sorted(cuts), len(stream)]
    splitter = SseSplitter()
    got: list[bytes] = []
    for a, b in itertools.pairwise(bounds):
        got.extend(splitter.feed(stream[a:b]))
    assert got == EVENTS
    assert b"".join(got) + splitter.rest() == stream


def test_the_event_answering_a_request_is_found_alone_or_in_a_batch() -> None:
    from litmus_sandbox.adapters.mcp._http_answer import answers

    alone = b'event: message\ndata: {"jsonrpc":"2.0","id":5,"result":{}}\n\n'
    batch = (
        b'event: message\ndata: [{"jsonrpc":"2.0","id":3,"result":{}},'
        b'{"jsonrpc":"2.0","id":"4","error":{"code":1,"message":"x"}}]\n\n'
    )
    notice = b'event: message\ndata: {"jsonrpc":"2.0","method":"x","params":{"id":5}}\n\n'
    request = b'event: message\ndata: [{"jsonrpc":"2.0","id":4,"method":"sampling"}]\n\n'
    assert answers(alone, 5)
    assert not answers(alone, "5")  # a string id is another id
    assert answers(batch, "4")
    assert answers(batch, 3)
    assert not answers(batch, 5)
    assert not answers(notice, 5)
    assert not answers(request, 4)  # a server request that reuses the id answers nothing
    assert not answers(b": comment\n\n", 5)
