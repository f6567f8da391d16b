"""The relay's sans-io core, fed messages and a fake clock: no process, no sleep."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from litmus_sandbox.adapters.mcp._jsonrpc import error_message
from litmus_sandbox.adapters.mcp._relay import (
    Abort,
    Action,
    CutOff,
    FinishCall,
    KeepAnswer,
    Note,
    Offer,
    Relay,
    StartCall,
    State,
    ToClient,
    ToServer,
)
from litmus_sandbox.adapters.mcp._relay._states import (
    TRANSITIONS,
    Event,
    InvalidTransition,
    Pending,
    advance,
)


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def call(rid: Any, name: Any = "echo", args: Any = None, **params: Any) -> bytes:
    p = {"name": name, "arguments": {} if args is None else args, **params}
    return line({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": p})


def req(rid: Any, method: str, **params: Any) -> bytes:
    return line({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def answer(rid: Any, **result: Any) -> bytes:
    return line({"jsonrpc": "2.0", "id": rid, "result": result or {"content": []}})


def cancel(rid: Any) -> bytes:
    return line(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}
    )


def only(actions: list[Action], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def to_client(actions: list[Action]) -> list[Any]:
    return [json.loads(a.data) for a in only(actions, ToClient)]


class Driver:
    """What a driver does with the core's actions, with the recorder faked: a call runs
    inline, and its step 'records' what the reply would be."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.now = 0.0
        self.aborted: list[str] = []
        self.recorded: list[tuple[Any, str]] = []
        self.client: list[bytes] = []
        self.server: list[bytes] = []
        self.inline = True

    def run(self, actions: list[Action]) -> list[Action]:
        out: list[Action] = []
        todo = list(actions)
        while todo:
            a = todo.pop(0)
            out.append(a)
            if isinstance(a, ToClient):
                self.client.append(a.data)
            elif isinstance(a, ToServer):
                self.server.append(a.data)
            elif isinstance(a, Abort):
                self.aborted.append(a.reason)
            elif isinstance(a, StartCall):
                a.pending.inline = self.inline
                fwd = self.relay.forward(a.pending, self.now, 1.0 if self.inline else None)
                todo[:0] = fwd if fwd is not None else self.finish(a.pending, "failed")
            elif isinstance(a, FinishCall) and a.pending.kind == "call":
                if a.how == "answered":
                    assert a.body is not None
                    assert a.pending.call is not None
                    a.pending.call.answered(a.raw, a.body)
                todo[:0] = self.finish(a.pending, a.how)
        return out

    def finish(self, p: Pending, how: str) -> list[Action]:
        state = p.call
        assert state is not None
        self.recorded.append((p.id, how))
        if how == "answered":
            state.reply_kind = "relay"
        elif how == "interrupted" and state.stopped is None:
            state.reply_kind = "none"
        else:
            state.timed_out = how == "timed_out"
            state.reply_kind = "error"
            state.reply = error_message(p.id, -32001 if state.timed_out else -32000, how)
        replies: list[Action] = self.relay.recorded(p)
        return replies

    def client_says(self, data: bytes) -> list[Action]:
        return self.run(self.relay.from_client(data, self.now))

    def server_says(self, data: bytes) -> list[Action]:
        return self.run(self.relay.from_server(data, self.now))

    def tick(self, seconds: float) -> list[Action]:
        self.now += seconds
        return self.run(self.relay.expire(self.now))


@pytest.fixture
def d() -> Driver:
    return Driver(Relay(timeout=5.0))


def test_messages_pass_through_byte_for_byte(d: Driver) -> None:
    sent = [
        b'{ "id" : "p" , "jsonrpc" : "2.0", "method" : "ping" }\r\n',
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
        b"not json at all\n",
    ]
    for data in sent:
        d.client_says(data)
    assert d.server == sent
    d.server_says(b'{"jsonrpc":"2.0","id":"p","result":{}}   \n')
    assert d.client == [b'{"jsonrpc":"2.0","id":"p","result":{}}   \n']
    assert not d.relay.pending


def test_a_call_is_recorded_before_its_answer_is_relayed(d: Driver) -> None:
    actions = d.client_says(call(1))
    assert [type(a) for a in actions] == [Offer, StartCall, ToServer]
    (pending,) = d.relay.pending.values()
    assert pending.state is State.AT_SERVER
    reply = answer(1, content=[{"type": "text", "text": "hi"}])
    actions = d.server_says(reply)
    assert [type(a) for a in actions] == [FinishCall, ToClient]  # record, then reply
    assert d.client == [reply]
    assert d.recorded == [(1, "answered")]
    assert not d.relay.pending


def test_an_inline_call_times_out_on_the_fake_clock_and_its_late_answer_is_dropped(
    d: Driver,
) -> None:
    d.client_says(call(1, "hang"))
    assert d.tick(0.5) == []
    actions = d.tick(0.6)
    assert d.recorded == [(1, "timed_out")]
    assert d.aborted == ["tools/call 'hang' got no answer within its timeout (server hung?)"]
    assert b"notifications/cancelled" in d.server[-1]
    assert to_client(actions)[0]["error"]["code"] == -32001
    (pending,) = d.relay.pending.values()
    assert pending.state is State.ABANDONED
    assert d.server_says(answer(1)) == []  # too late: the client has its error
    assert not d.relay.pending


def test_a_request_times_out_and_initialize_is_never_cancelled(d: Driver) -> None:
    d.client_says(req(0, "initialize"))
    d.client_says(req(7, "resources/read"))
    actions = d.tick(5.0)
    errors = to_client(actions)
    assert [(e["id"], e["error"]["code"]) for e in errors] == [(0, -32001), (7, -32001)]
    cancels = [a.data for a in only(actions, ToServer)]
    assert len(cancels) == 1
    assert b'"requestId":7' in cancels[0]
    assert d.aborted[0] == "initialize got no answer within 5s (server hung?)"


def test_a_forgotten_request_leaves_the_table_and_its_deadline_never_fires(d: Driver) -> None:
    """Over HTTP an answer comes only on its request's own response: once that exchange
    is over, the driver forgets the request, waited for or given up, and nothing more
    happens to it (no timeout, no error, no cancel, no abort)."""
    d.client_says(req(1, "resources/read"))
    d.client_says(req(2, "prompts/get"))
    d.tick(1.0)
    d.client_says(req(3, "tools/list"))
    waited, later = d.relay.pending[("int", 1)], d.relay.pending[("int", 3)]
    d.relay.forget(waited)
    assert d.tick(4.0) != []  # request 2 times out; 1 was forgotten
    assert [json.loads(data)["id"] for data in d.client] == [2]
    given_up = d.relay.pending[("int", 2)]
    assert given_up.state is State.ABANDONED
    d.relay.forget(given_up)
    d.relay.forget(given_up)  # twice: nothing more
    d.relay.forget(waited)
    assert list(d.relay.pending) == [("int", 3)]
    d.relay.forget(later)
    assert d.tick(60.0) == []
    assert not d.relay.pending
    assert d.aborted == ["prompts/get got no answer within 5s (server hung?)"]
    d.client_says(req(1, "resources/read"))  # the id may be used again
    reused = d.relay.pending[("int", 1)]
    d.relay.forget(waited)  # the old one's forget cannot touch the new request
    assert d.relay.pending[("int", 1)] is reused


def test_a_request_that_is_not_waiting_for_the_server_cannot_be_forgotten() -> None:
    for state in (State.STARTING, State.TASK, State.RECORDING):
        p = Pending("call", ("int", 1), 1, "tools/call", state)
        with pytest.raises(InvalidTransition):
            advance(p, Event.FORGET)


def test_cancelling_a_forwarded_call_interrupts_it_and_tells_the_server(d: Driver) -> None:
    d.client_says(call(1, "hang"))
    d.client_says(cancel(1))
    assert d.recorded == [(1, "interrupted")]
    assert d.server[-1] == cancel(1)
    assert d.client == []  # nothing is sent for the cancel itself
    late = answer(1)
    actions = d.server_says(late)  # the server's late answer goes on, as sent
    assert d.client == [late]
    assert [(a.key, a.value) for a in only(actions, Note)] == [("late_answers_relayed", 1)]
    assert not d.relay.pending


def test_a_call_the_server_never_saw_is_not_cancelled_there(d: Driver) -> None:
    d.inline = False
    actions = d.relay.from_client(call(3, "stubbed"), d.now)
    (start,) = only(actions, StartCall)
    # The policy answers it: no forward; its step is written, and its reply sent.
    start.pending.call.reply_kind = "result"
    start.pending.call.reply = b'{"jsonrpc":"2.0","id":3,"result":{}}'
    assert to_client(d.relay.recorded(start.pending)) == [{"jsonrpc": "2.0", "id": 3, "result": {}}]
    assert d.client_says(cancel(3)) == []  # never relayed
    assert d.server == []


def test_a_request_id_already_in_flight_is_refused(d: Driver) -> None:
    d.client_says(call(1, "hang"))
    for again in (call(1), req(1, "ping")):
        (error,) = to_client(d.client_says(again))
        assert error["error"]["code"] == -32600
        assert "already in flight" in error["error"]["message"]
    assert len(d.server) == 1


def test_progress_notifications_are_kept_on_their_call(d: Driver) -> None:
    d.client_says(call(1, "progress", _meta={"progressToken": "t"}))
    note = line(
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "t", "progress": 1},
        }
    )
    d.server_says(note)
    assert d.client == [note]
    (pending,) = d.relay.pending.values()
    assert pending.call is not None
    assert pending.call.notifications == [json.loads(note)]


def test_a_crash_answers_what_waits_and_aborts(d: Driver) -> None:
    d.client_says(call(1, "crash"))
    d.client_says(req(2, "resources/read"))
    actions = d.run(d.relay.server_closed(3))
    assert d.aborted == [
        "the MCP server exited with status 3 while the client was connected (2 requests unanswered)"
    ]
    assert d.recorded == [(1, "failed")]
    assert sorted(e["id"] for e in to_client(actions)) == [1, 2]
    assert d.relay.crashed
    assert not d.relay.pending
    (error,) = to_client(d.client_says(req(3, "ping")))  # the server is gone: refused here
    assert error["error"]["code"] == -32000


def test_a_client_that_hangs_up_on_a_pending_call_leaves_it_interrupted(d: Driver) -> None:
    d.client_says(call(1))
    d.server_says(answer(1))
    d.client_says(call(2, "hang"))
    d.run(d.relay.client_closed(d.now))
    assert not d.relay.clean
    d.run(d.relay.server_closed(0))
    assert d.aborted == ["the client hung up with 1 requests unanswered"]
    assert d.recorded[-1] == (2, "interrupted")


def test_a_session_that_ends_interrupts_only_the_calls_still_running(d: Driver) -> None:
    """Over HTTP a session ends at its DELETE or once its client is gone past the grace
    period: the calls whose steps are not written are interrupted (no abort, nothing
    to either side); requests waiting are left to their exchanges."""
    d.client_says(call(1))
    d.server_says(answer(1))  # recorded and relayed: nothing left of it
    d.client_says(call(2, "hang"))
    d.client_says(req(3, "resources/read"))
    d.inline = False
    (start,) = only(d.relay.from_client(call(4, "stubbed"), d.now), StartCall)
    before = (list(d.client), list(d.server))
    actions = d.run(d.relay.session_ended(d.now))
    assert [(a.pending.id, a.how) for a in only(actions, FinishCall)] == [
        (2, "interrupted"),
        (4, "interrupted"),
    ]
    assert d.recorded[-2:] == [(2, "interrupted"), (4, "interrupted")]
    assert (d.client, d.server) == before
    assert d.aborted == []
    assert d.relay.client_gone
    assert not d.relay.clean
    assert start.pending.key not in d.relay.pending
    assert list(d.relay.pending) == [("int", 2), ("int", 3)]  # 2 given up, 3 still waited for
    assert d.relay.pending[("int", 2)].state is State.ABANDONED
    assert d.relay.pending[("int", 3)].state is State.AT_SERVER


def test_a_session_that_ends_with_nothing_pending_finished_cleanly(d: Driver) -> None:
    d.client_says(call(1))
    d.server_says(answer(1))
    assert d.run(d.relay.session_ended(d.now)) == []
    assert d.relay.clean
    assert d.run(d.relay.stop("the proxy was stopped by SIGTERM")) == []
    assert d.aborted == []


def test_a_clean_finish_is_not_aborted_by_a_stop_that_follows(d: Driver) -> None:
    d.client_says(req(0, "initialize"))
    d.server_says(answer(0, protocolVersion="2025-11-25"))
    d.client_says(call(1))
    d.server_says(answer(1))
    d.run(d.relay.client_closed(d.now))
    assert d.relay.clean
    assert d.run(d.relay.stop("the proxy was stopped by SIGTERM")) == []
    assert d.aborted == []


def test_a_stop_answers_everything_that_waits(d: Driver) -> None:
    d.client_says(call(1, "stall"))
    d.client_says(req(2, "resources/read"))
    actions = d.run(d.relay.stop("the proxy was stopped by SIGINT"))
    assert d.aborted == ["the proxy was stopped by SIGINT"]
    assert d.recorded == [(1, "interrupted")]
    errors = to_client(actions)
    assert sorted(e["id"] for e in errors) == [1, 2]
    assert all("stopped by SIGINT" in e["error"]["message"] for e in errors)
    assert d.client_says(call(3)) == []  # stopped: nothing more happens


def test_a_connection_that_only_probed_is_not_an_episode(d: Driver) -> None:
    d.client_says(req(1, "server/discover"))
    actions = d.server_says(answer(1, supportedVersions=["2026-07-28"]))
    assert only(actions, KeepAnswer)
    assert not d.relay.engaged
    d.client_says(req(2, "initialize"))
    d.server_says(answer(2, protocolVersion="2025-11-25"))
    assert d.relay.engaged  # the handshake completed


def test_a_stop_after_only_a_probe_aborts_no_episode(d: Driver) -> None:
    """TS SDK v2 probes ``server/discover`` on a sibling process, then signals it: that
    connection was never a run, so its stop has no episode to abort."""
    d.client_says(req(1, "server/discover"))
    d.server_says(answer(1, supportedVersions=["2026-07-28"]))
    d.client_says(req(2, "initialize"))  # not answered yet: still no session
    actions = d.run(d.relay.stop("the proxy was stopped by SIGTERM"))
    assert d.aborted == []
    assert [e["id"] for e in to_client(actions)] == [2]  # what waits is still answered


def test_listings_teach_output_schemas(d: Driver) -> None:
    d.client_says(req(1, "tools/list"))
    schema = {"type": "object"}
    d.server_says(answer(1, tools=[{"name": "w", "outputSchema": schema}]))
    assert d.relay.schemas == {"w": schema}
    assert d.relay.listed


def test_the_proxys_own_requests_never_reach_the_client(d: Driver) -> None:
    made = d.relay.own_request("own:0", req("own:0", "tools/list"))
    assert made is not None
    pending, actions = made
    assert only(actions, ToServer)
    (finish,) = d.relay.from_server(answer("own:0", tools=[]), d.now)
    assert isinstance(finish, FinishCall)
    assert finish.pending is pending
    made = d.relay.own_request("own:1", req("own:1", "tools/list"))
    assert made is not None
    d.relay.give_up(made[0])
    assert d.relay.from_server(answer("own:1", tools=[]), d.now) == []


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (
            line([{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}]),
            -32600,
        ),
        (
            line({"jsonrpc": "2.0", "id": None, "method": "tools/call", "params": {"name": "x"}}),
            -32600,
        ),
        (call(1, "x", args=["a"]), -32602),
        (call(1, "x", args="a"), -32602),
        (call(1, ["x"]), -32602),
        (call({"odd": 1}), -32600),
        (call(True), -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\xff"}}\n', -32700),
    ],
)
def test_what_could_invoke_a_tool_but_cannot_be_recorded_is_refused(
    d: Driver, data: bytes, code: int
) -> None:
    actions = d.client_says(data)
    assert d.server == []  # nothing reaches the server unrecorded
    (error,) = to_client(actions) if not data.startswith(b"[") else to_client(actions)[0]
    assert error["error"]["code"] == code
    (note,) = only(actions, Note)
    assert note.key == "refused"
    assert d.relay.engaged


def test_a_call_without_an_id_is_refused_without_an_answer(d: Driver) -> None:
    data = line({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "x"}})
    actions = d.client_says(data)
    assert d.server == []
    assert d.client == []
    assert only(actions, Note)[0].value[0]["request_id"] is None


def test_a_batch_without_a_tool_call_is_relayed(d: Driver) -> None:
    data = line([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    d.client_says(data)
    assert d.server == [data]


def test_deep_nesting_is_refused_from_the_client_and_cuts_the_server_off(d: Driver) -> None:
    deep = (
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":'
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}}\n"
    )
    actions = d.client_says(deep)
    assert to_client(actions)[0]["error"]["code"] == -32600
    assert d.server == []
    assert "nested deeper than 128 levels" in d.aborted[0]
    actions = d.server_says(deep)
    assert only(actions, CutOff)
    # Brackets inside strings are not nesting.
    text = line({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"s": "[" * 1000}})
    d.client_says(text)
    assert d.server == [text]


def test_an_oversized_client_message_is_answered_and_aborts(d: Driver) -> None:
    actions = d.run(d.relay.client_too_long(70_000_000))
    assert to_client(actions)[0]["error"]["code"] == -32600
    assert "over 67108864 bytes" in d.aborted[0]
    assert only(d.run(d.relay.server_too_long(70_000_000)), CutOff)


def test_only_whole_json_rpc_lines_reach_the_client(d: Driver) -> None:
    d.client_says(call(1))
    (note,) = d.server_says(b'{"jsonrpc":"2.0","id":1,"res')  # half a line, then EOF
    assert isinstance(note, Note)
    assert (note.key, note.value) == ("dropped_from_server", {"unterminated": 1})
    (note,) = d.server_says(b"a log line on stdout\n")
    assert isinstance(note, Note)
    assert note.value == {"unterminated": 1, "not_json": 1}
    assert d.client == []
    assert d.relay.pending  # the call still waits for a real answer


def test_an_answer_in_invalid_utf8_fails_its_call_saying_so(d: Driver) -> None:
    d.client_says(call(1))
    d.client_says(req(2, "resources/read"))
    d.server_says(
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\xff"}]}}\n'
    )
    assert d.recorded == [(1, "failed")]
    (pending,) = list(d.relay.pending.values())
    assert pending.id == 2
    actions = d.server_says(b'{"jsonrpc":"2.0","id":2,"result":{"x":"\xfe"}}\n')
    (error,) = to_client(actions)
    assert error["id"] == 2
    assert "invalid UTF-8" in error["error"]["message"]


def test_every_transition_not_in_the_table_is_refused() -> None:
    for state, event in itertools.product(State, Event):
        p = Pending("call", ("int", 1), 1, "tools/call", state)
        if (state, event) in TRANSITIONS:
            advance(p, event)
        else:
            with pytest.raises(InvalidTransition):
                advance(p, event)


def test_a_task_call_is_recorded_with_the_result_tasks_result_delivers(d: Driver) -> None:
    d.client_says(call(1, "research", task={"ttl": 60000}))
    created = answer(1, task={"taskId": "t-9", "status": "working"})
    d.server_says(created)
    assert d.client == [created]  # the client has its task at once; the step waits
    (pending,) = d.relay.pending.values()
    assert pending.state is State.TASK
    assert d.recorded == []
    d.client_says(req(2, "tasks/get", taskId="t-9"))
    d.server_says(answer(2, taskId="t-9", status="completed"))
    d.client_says(req(3, "tasks/result", taskId="t-9"))
    assert d.tick(60) == []  # tasks/result waits as long as the task: no deadline
    final = answer(3, content=[{"type": "text", "text": "found it"}])
    actions = d.server_says(final)
    assert [type(a) for a in actions] == [FinishCall, ToClient]  # recorded, then relayed
    assert d.client[-1] == final
    assert d.recorded == [(1, "answered")]
    assert pending.call.extra_meta["task"] == {
        "task_id": "t-9",
        "result_request_id": 3,
        "result_later": True,
    }
    assert pending.call.envelope_raw == final
    assert not d.relay.pending


def test_a_stand_in_for_a_task_call_is_a_task_of_the_proxys_own(d: Driver) -> None:
    d.inline = False
    (start,) = only(d.relay.from_client(call(4, "research", task={}), d.now), StartCall)
    state = start.pending.call
    assert state.task_requested
    stub = {"content": [{"type": "text", "text": "stubbed"}], "isError": False}
    state.reply_kind, state.task_id = "result", "litmus-sandbox:task:x"
    state.reply = json.dumps({"jsonrpc": "2.0", "id": 4, "result": stub}).encode()
    (created,) = to_client(d.relay.recorded(start.pending))
    assert created["result"]["task"]["taskId"] == "litmus-sandbox:task:x"
    assert created["result"]["task"]["status"] == "completed"
    (got,) = to_client(d.client_says(req(5, "tasks/get", taskId="litmus-sandbox:task:x")))
    assert got["result"]["status"] == "completed"
    (result,) = to_client(d.client_says(req(6, "tasks/result", taskId="litmus-sandbox:task:x")))
    assert result["result"]["content"] == stub["content"]
    related = result["result"]["_meta"]["io.modelcontextprotocol/related-task"]
    assert related == {"taskId": "litmus-sandbox:task:x"}
    assert d.server == []  # the server never heard of it
