"""The relay core: one MCP session's decisions, with no I/O (in the manner of h11).

Theory of operation
-------------------
A driver (stdio: ``_stdio_session.py``; streamable HTTP: ``_http*.py``) owns the pipes,
the clock and the recorder; a :class:`Relay` owns every decision. It is fed what happens
- a line from the client (:meth:`Relay.from_client`), a line from the server
(:meth:`Relay.from_server`), the clock (:meth:`Relay.expire`), a side leaving
(:meth:`Relay.client_closed`, :meth:`Relay.session_ended`, :meth:`Relay.server_closed`),
a stop (:meth:`Relay.stop`), a request no answer can reach any more
(:meth:`Relay.forget`) - and returns the actions to perform, in order (``_actions.py``). Each request awaiting an answer is one
:class:`~._states.Pending` in one dict, in an explicit state (``_states.py``).

Messages pass through byte for byte, except that a ``tools/call`` becomes a call the
driver records (``StartCall``, then :meth:`Relay.forward` when it goes to the server,
``FinishCall`` when it ends; :meth:`Relay.recorded` then gives the reply, so the client
never holds an answer the record lacks); an answer to a request the proxy gave up on is
dropped (the client has an error for it), but a late answer to a call the client
cancelled goes on, as a direct client gets it (``meta["mcp"]["late_answers_relayed"]``
counts them); the answers to the proxy's own requests never reach the client. A call the
server makes a task is recorded with the result ``tasks/result`` delivers (``_tasks.py``).

Hostile peers. A client message over the size or depth limit gets a JSON-RPC error (with
its id when a cheap scan finds it: ``_limits.request_id_of``) and aborts the episode; a
server that breaks either is cut off. Whatever could invoke a tool
but cannot be recorded as a call (a batch holding one, a call without an id, with an id
JSON-RPC does not allow, with a malformed name or arguments, a line that cannot be read
but names ``tools/call``) is answered with an error and recorded as refused (the end
record's ``meta["mcp"]["refused"]``): nothing reaches the server unrecorded. The client
only ever receives whole JSON-RPC lines: a line from the server that is not JSON (half a
line from a crashed server, junk, invalid UTF-8) is dropped and counted
(``meta["mcp"]["dropped_from_server"]``); an answer in invalid UTF-8 to a request that
waits fails that request, saying so.

Start-up (``_startup.py``). A driver that launched the server asks for ``startup``: an
``EndStartup`` comes before the client's first message past the handshake.

Episodes. A session is worth an episode (:attr:`Relay.engaged`) once it made a
``tools/call``, its ``initialize`` was answered, something was refused, or it failed; a
connection that only probed (``server/discover``, ``ping``, lists) records none. A
client that closed its input with nothing pending finished cleanly (:attr:`Relay.clean`):
a stop after that cuts nothing short and does not abort the episode.
"""

from __future__ import annotations

import math
from typing import Any

from .._jsonrpc import (
    CONNECTION_CLOSED,
    PROTOCOL_VERSION_META_KEY,
    RECORDED_METHODS,
    REQUEST_TIMEOUT,
    Message,
    cancelled_message,
    cancelled_request_of,
    case_id_of,
    id_key,
    no_answer,
    parse,
    protocol_version_of,
    tool_call_of,
)
from .._recording import CallState
from .._schema import listed_tools, output_schemas
from ._actions import (
    Abort,
    Action,
    CutOff,
    EndStartup,
    FinishCall,
    KeepAnswer,
    Note,
    Offer,
    StartCall,
    ToClient,
    ToServer,
)
from ._guard import INVALID_REQUEST, Guard, Refusal, refusal_of, valid_id
from ._limits import DEFAULT_MAX_DEPTH, DEFAULT_MAX_MESSAGE_BYTES, request_id_of, too_deep
from ._startup import Startup
from ._states import Event, Key, Pending, State, advance
from ._tasks import Tasks, created_task, task_id_of

#: Calls the server never saw, remembered so that the client's cancel of one is not
#: relayed (the oldest are forgotten first).
_MAX_UNFORWARDED = 4096


class Relay(Tasks, Guard, Startup):
    """One MCP session's relay decisions (see the module's theory of operation).

    Args:
        timeout: seconds a forwarded request (other than a call in a task, which the
            recorder times) may go unanswered; None: forever.
        max_message_bytes: the size limit the driver's line readers apply.
        max_depth: arrays and objects one message may nest.
        max_answer_bytes: the largest handshake answer kept for server-less replay.
        startup: say when the server's start-up ends (``EndStartup``).
    """

    def __init__(
        self,
        *,
        timeout: float | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_answer_bytes: int = 256 << 10,
        startup: bool = False,
    ) -> None:
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self.max_depth = max_depth
        self.max_answer_bytes = max_answer_bytes
        self.starting = startup
        #: Every request awaiting an answer, by id key.
        self.pending: dict[Key, Pending] = {}
        self._progress: dict[Key, Pending] = {}
        self._unforwarded: dict[Key, None] = {}
        #: Tools' output schemas learnt from the listings relayed (or the proxy's own).
        self.schemas: dict[str, dict[str, Any]] = {}
        #: The listed tools' entries (what an emulator is told of an emulated tool).
        self.tools: dict[str, dict[str, Any]] = {}
        #: Whether the tools were listed (by the client, or by the proxy for itself).
        self.listed = False
        #: The server's answers kept for server-less replay, by method.
        self.answers: dict[str, Any] = {}
        self.engaged = False
        self.sent_anything = False
        self.client_gone = False
        self.server_gone = False
        self.gone_reason = "the MCP server exited"
        self.stopped: str | None = None
        self.clean = False
        #: The server died while the client was connected.
        self.crashed = False
        #: The earliest deadline of a pending request (``expire`` before then does nothing).
        self.next_deadline = math.inf
        self._offering = True
        self._refused: list[dict[str, Any]] = []
        self._refused_more = 0
        self._dropped: dict[str, int] = {}
        #: The server's tasks whose call waits for its result, by task id.
        self._tasks: dict[str, Pending] = {}
        #: The proxy's own tasks (a stand-in result shown as a task), by task id.
        self._own_tasks: dict[str, dict[str, Any]] = {}
        #: Late answers to cancelled calls relayed to the client.
        self._late_answers = 0

    # -- the client -------------------------------------------------------------------

    def from_client(self, line: bytes, now: float) -> list[Action]:
        """A line the client sent (with its newline, as read)."""
        if self.stopped is not None:
            return []
        self.sent_anything = True
        if too_deep(line, self.max_depth):
            why = f"a message nested deeper than {self.max_depth} levels"
            return [
                *self._refuse(
                    line, Refusal(request_id_of(line, self.max_depth), INVALID_REQUEST, why)
                ),
                Abort(f"the client sent {why}"),
            ]
        msg = parse(line)
        if self.starting and self._ends_startup(msg):  # the message, once it is over
            return [EndStartup(), *self.from_client(line, now)]
        kind = msg.kind
        if kind == "request":
            if msg.method == "tools/call":
                return self._call(line, msg)
            return self._request(line, msg, now)
        if kind == "notification":
            if msg.method == "tools/call":
                return self._other_from_client(line, msg)
            if msg.method == "notifications/cancelled":
                return self._cancel(line, msg)
        elif kind == "other":
            return self._other_from_client(line, msg)
        return self._up(line)

    def client_closed(self, now: float) -> list[Action]:
        """The client closed its input. With nothing pending, it finished cleanly."""
        del now
        self.client_gone = True
        self.clean = not any(
            p.kind != "own" and p.state is not State.ABANDONED for p in self.pending.values()
        )
        return []

    def session_ended(self, now: float) -> list[Action]:
        """The client ended its session (over HTTP: its DELETE, or its client gone past
        the grace period): nobody is left to be shown a call's answer. The client is
        gone, cleanly if nothing of its was pending (as :meth:`client_closed`); each call
        whose step is not written yet is interrupted, as the client's cancel would
        interrupt it (its step says so; the server is told by the session's end, not
        here); requests still waiting are left to the exchanges that carry them."""
        actions = self.client_closed(now)
        for p in list(self.pending.values()):
            if p.kind == "call" and p.state in (State.STARTING, State.AT_SERVER, State.TASK):
                advance(p, Event.GIVE_UP)
                actions.append(FinishCall(p, "interrupted"))
        return actions

    def _offer(self, msg: Message) -> list[Action]:
        if not self._offering:
            return []
        return [Offer(case_id_of(msg), str(msg.method), protocol_version_of(msg))]

    def _call(self, line: bytes, msg: Message) -> list[Action]:
        call = tool_call_of(msg)
        rid = msg.id
        if call is None or not valid_id(rid):
            refusal = refusal_of(line, msg)
            assert refusal is not None
            return self._refuse(line, refusal)
        key = id_key(rid)
        if (old := self.pending.get(key)) is not None and old.state is not State.ABANDONED:
            return [
                self._error(rid, INVALID_REQUEST, "a request with this id is already in flight")
            ]
        tool, args = call
        self.engaged = True
        actions = self._offer(msg) if self._offering else []
        self._offering = False  # the call opens the episode: its case id is settled
        params = msg.params
        assert params is not None  # a well-formed call has them
        meta = params.get("_meta")
        if type(meta) is not dict:
            meta = {}
        state = CallState(rid, line, stateless=PROTOCOL_VERSION_META_KEY in meta)
        state.output_schema = self.schemas.get(tool)
        token = meta.get("progressToken")  # progress_token_of, with the meta at hand
        pending = Pending(
            "call", key, rid, "tools/call", State.STARTING, call=state, tool=tool, args=args
        )
        if token is not None and valid_id(token):
            pending.token = token
            self._progress[id_key(token)] = pending
        if "task" in params:
            pending.task_requested = state.task_requested = isinstance(params["task"], dict)
        self.pending[key] = pending
        actions.append(StartCall(pending))
        return actions

    def _request(self, line: bytes, msg: Message, now: float) -> list[Action]:
        actions = self._offer(msg)
        rid = msg.id
        task_id = task_id_of(msg)
        if task_id is not None and task_id in self._own_tasks:
            actions.append(self._own_task_answer(rid, str(msg.method), task_id))
            return actions
        if self.server_gone:
            actions.append(self._error(rid, CONNECTION_CLOSED, self.gone_reason))
            return actions
        if valid_id(rid):  # else not tracked: the server answers it (or not) as it likes
            key = id_key(rid)
            if (old := self.pending.get(key)) is not None and old.state is not State.ABANDONED:
                actions.append(
                    self._error(rid, INVALID_REQUEST, "a request with this id is already in flight")
                )
                return actions
            pending = Pending("request", key, rid, str(msg.method), State.AT_SERVER)
            pending.task_id = task_id
            # tasks/result waits for its task to end: it takes as long as the task.
            if self.timeout is not None and msg.method != "tasks/result":
                pending.deadline = now + self.timeout
                self.next_deadline = min(self.next_deadline, pending.deadline)
            self.pending[key] = pending
        actions.append(ToServer(line))
        return actions

    def _cancel(self, line: bytes, msg: Message) -> list[Action]:
        rid = cancelled_request_of(msg)
        if not valid_id(rid):
            return self._up(line)
        key = id_key(rid)
        if key in self._unforwarded:
            return []  # the server never saw that call: it must not hear of it
        pending = self.pending.get(key)
        if pending is None or pending.kind == "own":
            return self._up(line)
        if pending.kind == "request":
            pending.deadline = None  # the client expects no answer now
            return self._up(line)
        assert pending.call is not None
        forwarded = pending.call.forwarded
        actions: list[Action] = []
        if pending.state in (State.STARTING, State.AT_SERVER):
            advance(pending, Event.GIVE_UP)
            pending.cancelled = forwarded
            actions.append(FinishCall(pending, "interrupted"))  # the client expects no reply
        if forwarded:  # the server saw the call: it hears of the cancellation too
            actions += self._up(line)
        return actions

    # -- the server -------------------------------------------------------------------

    def from_server(self, line: bytes, now: float) -> list[Action]:
        """A line the server wrote (with its newline; a last line without one is half a
        line: the server died writing it)."""
        del now
        if self.stopped is not None:
            return []
        if not line.endswith(b"\n"):
            return self._drop("unterminated")
        if too_deep(line, self.max_depth):
            why = f"the MCP server sent a message nested deeper than {self.max_depth} levels"
            return [CutOff(why), Abort(why)]
        msg = parse(line)
        kind = msg.kind
        if kind == "response":
            return self._answer(line, msg)
        if (
            kind == "notification"
            and self._progress
            and msg.method == "notifications/progress"
            and msg.params is not None
            and valid_id(token := msg.params.get("progressToken"))
            and (pending := self._progress.get(id_key(token))) is not None
        ):
            assert pending.call is not None
            pending.call.note(msg.body, len(line))
        elif kind == "other":
            return self._other_from_server(line)
        return [ToClient(line)]

    def _answer(self, line: bytes, msg: Message) -> list[Action]:
        pending = self.pending.get(id_key(msg.id)) if valid_id(msg.id) else None
        if pending is None:
            return [ToClient(line)]
        state = pending.state
        if state is State.ABANDONED:
            advance(pending, Event.ANSWER)
            del self.pending[pending.key]
            if pending.cancelled:  # on to the client, as a direct client gets it
                self._late_answers += 1
                return [Note("late_answers_relayed", self._late_answers), ToClient(line)]
            return []  # the late answer: the client has an error for it, or it was ours
        body = msg.body
        assert body is not None
        if pending.kind == "call":
            if state is State.AT_SERVER:
                if pending.task_requested and (task_id := created_task(body)) is not None:
                    return self._task_created(pending, task_id, line)
                advance(pending, Event.ANSWER)
                return [FinishCall(pending, "answered", raw=line, body=body)]
            if state is State.RECORDING:
                return []  # a second answer to one call
            return [ToClient(line)]  # an id the server never had from the proxy
        del self.pending[pending.key]
        if pending.kind == "own":
            return [FinishCall(pending, "answered", raw=line, body=body)]
        actions: list[Action] = []
        method = pending.method
        result = body.get("result")
        if method == "tasks/result" and pending.task_id is not None:
            call = self._tasks.pop(pending.task_id, None)
            if call is not None and call.state is State.TASK:
                return self._task_result(call, pending, line, body)
        if method == "tools/list":
            self.schemas.update(output_schemas(result))
            self.tools.update(listed_tools(result))
            self.listed = True
        elif method == "initialize" and isinstance(result, dict):
            self.engaged = True  # the handshake completed: a session, not a probe
        if (
            method in RECORDED_METHODS
            and method not in self.answers
            and isinstance(result, dict)
            and len(line) <= self.max_answer_bytes
        ):
            self.answers[method] = result
            actions.append(KeepAnswer(dict(self.answers)))
        actions.append(ToClient(line))
        return actions

    def server_closed(self, status: int | None) -> list[Action]:
        """The server is gone (its exit ``status``): what waits for it is answered."""
        self.server_gone = True
        if status is not None:
            self.gone_reason = f"the MCP server exited with status {status}"
        reason = self.gone_reason
        actions: list[Action] = []
        waiting = [p for p in self.pending.values() if p.state in (State.AT_SERVER, State.TASK)]
        if not self.client_gone:
            self.crashed = True
            detail = f"{reason} while the client was connected"
            if waiting:
                detail += f" ({len(waiting)} requests unanswered)"
            actions.append(Abort(detail))
            for p in waiting:
                if p.kind == "request":
                    actions.append(self._error(p.id, CONNECTION_CLOSED, reason))
                else:
                    actions.append(FinishCall(p, "failed", reason=reason))
        else:
            # The client hung up first: nobody saw what still waited end, and the run is
            # not a complete one (only the proxy's own requests waiting: it is).
            theirs = [p for p in waiting if p.kind != "own"]
            if theirs:
                actions.append(Abort(f"the client hung up with {len(theirs)} requests unanswered"))
            for p in waiting:
                how = "interrupted" if p.kind == "call" else "failed"
                actions.append(FinishCall(p, how, reason=reason))  # type: ignore[arg-type]
        for p in list(self.pending.values()):
            if p.state in (State.AT_SERVER, State.TASK, State.ABANDONED):
                advance(p, Event.END)
                del self.pending[p.key]
        return actions

    # -- the clock and the driver's reports -------------------------------------------

    def expire(self, now: float) -> list[Action]:
        """Give up on what is past its deadline: the client gets an error, the server
        ``notifications/cancelled``, and the episode ends aborted (a hung server spoils
        the run)."""
        if now < self.next_deadline or self.stopped is not None:
            return []
        actions: list[Action] = []
        nxt = math.inf
        for p in list(self.pending.values()):
            deadline = p.deadline
            if deadline is None:
                continue
            if deadline > now:
                nxt = min(nxt, deadline)
                continue
            p.deadline = None
            advance(p, Event.GIVE_UP)
            if p.kind == "call":
                actions.append(FinishCall(p, "timed_out"))  # recorded() says the rest
                continue
            reason = no_answer(p.method, self.timeout)
            actions.append(self._error(p.id, REQUEST_TIMEOUT, reason))
            actions.append(Abort(reason))
            if p.method != "initialize" and not self.server_gone:  # initialize cannot be cancelled
                actions.append(ToServer(cancelled_message(p.id, reason) + b"\n"))
        self.next_deadline = nxt
        return actions

    def forward(
        self, pending: Pending, now: float, limit: float | None = None
    ) -> list[Action] | None:
        """Send a call to the server (the recorder runs it for real); ``limit``: seconds
        an inline call may take (the core keeps its deadline). None: the server is gone."""
        if self.server_gone or self.stopped is not None:
            return None
        assert pending.call is not None
        advance(pending, Event.FORWARD)
        pending.call.forwarded = True
        if limit is not None:
            pending.deadline = now + limit
            self.next_deadline = min(self.next_deadline, pending.deadline)
        return [ToServer(pending.call.request)]

    def recorded(self, pending: Pending) -> list[Action]:
        """The call's step is written: the reply it decided (see ``CallState``)."""
        state = pending.call
        assert state is not None
        if pending.token is not None:
            token = id_key(pending.token)
            if self._progress.get(token) is pending:
                del self._progress[token]
        if not state.forwarded:
            self._unforwarded[pending.key] = None
            if len(self._unforwarded) > _MAX_UNFORWARDED:
                del self._unforwarded[next(iter(self._unforwarded))]
        if self.pending.get(pending.key) is pending and advance(pending, Event.RECORDED) is None:
            del self.pending[pending.key]
        if self.stopped is not None:
            return []  # stop() answered it
        actions: list[Action] = []
        if state.timed_out:
            reason = no_answer(f"tools/call {pending.tool!r}")
            actions.append(Abort(reason))
            if not self.server_gone:
                actions.append(ToServer(cancelled_message(pending.id, reason) + b"\n"))
        if state.reply_kind == "relay" and state.envelope_raw is not None:
            actions.append(ToClient(state.envelope_raw))
        elif state.reply_kind == "result" and state.task_id is not None:
            actions.append(ToClient(self._own_task(pending.id, state.task_id, state.reply)))
        elif state.reply_kind in ("result", "error"):
            actions.append(ToClient(state.reply + b"\n"))
        return actions

    def own_request(self, request_id: str, data: bytes) -> tuple[Pending, list[Action]] | None:
        """A request the proxy sends the server for itself (its answer is the proxy's)."""
        if self.server_gone or self.stopped is not None:
            return None
        pending = Pending("own", id_key(request_id), request_id, "tools/list", State.AT_SERVER)
        self.pending[pending.key] = pending
        return pending, [ToServer(data)]

    def give_up(self, pending: Pending) -> None:
        """The driver stopped waiting for its own request: a late answer is dropped."""
        if self.pending.get(pending.key) is pending:
            advance(pending, Event.GIVE_UP)

    def forget(self, pending: Pending) -> None:
        """No answer to ``pending`` can come any more (over HTTP, an answer comes only
        on its request's own response, and that exchange is over): whether still waited
        for or already given up, it leaves the table, its deadline with it; nothing is
        said to either side (the client had what its exchange carried)."""
        if self.pending.get(pending.key) is not pending:
            return  # answered, ended, or its id already reused
        pending.deadline = None  # expire() finds the next deadline without it
        advance(pending, Event.FORGET)
        del self.pending[pending.key]

    def stop(self, reason: str) -> list[Action]:
        """End the session early: every request still waiting gets an error, the episode
        ends aborted - unless the client had already finished cleanly, or the session
        never engaged (a probe that its client then signals is no run to abort)."""
        if self.stopped is not None:
            return []
        self.stopped = reason
        if self.clean:
            return []
        actions: list[Action] = [Abort(reason, say=False)] if self.engaged else []
        live = [p for p in self.pending.values() if p.state is not State.ABANDONED]
        for p in live:
            if p.call is not None:
                p.call.stopped = reason  # its step says the client was told
        for p in live:
            if p.kind == "own":
                continue
            if p.inline and p.state in (State.AT_SERVER, State.TASK):
                actions.append(FinishCall(p, "interrupted"))
            actions.append(self._error(p.id, CONNECTION_CLOSED, reason))
        self.pending.clear()
        return actions

    def interrupted_calls(self) -> list[Action]:
        """Inline calls still in flight when the session ends, whatever ended it."""
        actions: list[Action] = []
        for p in list(self.pending.values()):
            if p.inline and p.state in (State.AT_SERVER, State.TASK):
                advance(p, Event.END)
                del self.pending[p.key]
                actions.append(FinishCall(p, "interrupted"))
        return actions
