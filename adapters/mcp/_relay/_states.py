"""The state of one request the relay has seen, written down once, as data.

Theory of operation
-------------------
Every request that crosses the relay and awaits an answer is one :class:`Pending` in one
dict (``Relay.pending``, keyed by its id), whatever it is: a client's ``tools/call``
(``kind="call"``), any other client request (``"request"``), or a request the proxy sends
the server on its own behalf (``"own"``: the ``tools/list`` it asks for before it answers
a stubbed call itself). Its ``state`` says where it is; nothing else does. A request
leaves the dict when nothing more can happen to it (``DONE`` in the table below).

========= =============================================================================
state     meaning
========= =============================================================================
STARTING  a ``tools/call`` read, not forwarded: the recorder decides how it runs (the
          first call opens the episode; a stand-in answer may need the tools' schemas
          first), and a call the policy answers (stub, deny, replay, a dropped swallow)
          stays here until its step is written: the server never hears of it
AT_SERVER forwarded; its answer is awaited (inline calls and requests keep a deadline)
TASK      a call the server made a task (it answered ``CreateTaskResult``, which the
          client has): its step waits for the result, which comes as the answer to the
          client's ``tasks/result``
RECORDING a call's answer came; its step is being written, then the reply is sent
ABANDONED the proxy gave up on it (timeout, the client cancelled it, the proxy's own
          listing gave up): the client has its answer or expects none. A late answer
          to a call the client cancelled once the server had it goes on to the client
          as the server sent it (a direct client gets it too, and ignores it); any
          other late answer is dropped (the client has an error for it, or it was the
          proxy's own); a driver that knows no answer can come any more (HTTP, once
          its exchange is over) forgets it
========= =============================================================================

:data:`TRANSITIONS` is the whole table: ``(state, event) -> next state`` (``None``:
done). An event a state does not list is a bug (:func:`advance` raises), so the table
is the only place a request's life is decided.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from .._recording import CallState

Kind = Literal["call", "request", "own"]
Key = tuple[str, Any]


class State(enum.Enum):
    # Members are singletons compared by identity: hashed by identity too, in C (the
    # table is looked up for every message; Enum's own hash is Python code).
    __hash__ = object.__hash__

    STARTING = "starting"
    AT_SERVER = "at_server"
    TASK = "task"
    RECORDING = "recording"
    ABANDONED = "abandoned"


class Event(enum.Enum):
    __hash__ = object.__hash__  # as State's

    #: The request was sent to the server.
    FORWARD = "forward"
    #: The policy answered the call without the server.
    #: The server answered (for a task: the answer to ``tasks/result``).
    ANSWER = "answer"
    #: The server answered a call with a task, not a result.
    TASK = "task"
    #: The proxy gave up waiting (deadline, the client's cancel, its own give-up).
    GIVE_UP = "give_up"
    #: The call's step was written (and its reply decided).
    RECORDED = "recorded"
    #: The server is gone, or the proxy stops: the request is answered and forgotten.
    END = "end"
    #: No answer can come any more (over HTTP: the exchange that would carry it is
    #: over): the request is forgotten, with nothing said to either side.
    FORGET = "forget"


S, E = State, Event
#: (state, event) -> next state; None: done, the request leaves the dict.
TRANSITIONS: dict[tuple[State, Event], State | None] = {
    (S.STARTING, E.FORWARD): S.AT_SERVER,
    (S.STARTING, E.RECORDED): None,  # answered by the policy, or the server was gone
    (S.STARTING, E.GIVE_UP): S.STARTING,  # cancelled before it went anywhere
    (S.STARTING, E.END): None,
    (S.AT_SERVER, E.ANSWER): S.RECORDING,
    (S.AT_SERVER, E.GIVE_UP): S.ABANDONED,
    (S.AT_SERVER, E.RECORDED): S.ABANDONED,  # recorded unanswered (its own timer, a cancel)
    (S.AT_SERVER, E.END): None,
    (S.AT_SERVER, E.TASK): S.TASK,
    (S.AT_SERVER, E.FORGET): None,
    (S.TASK, E.ANSWER): S.RECORDING,
    (S.TASK, E.GIVE_UP): S.ABANDONED,  # cancelled: its late result is dropped
    (S.TASK, E.RECORDED): S.ABANDONED,
    (S.TASK, E.END): None,
    (S.RECORDING, E.RECORDED): None,
    (S.RECORDING, E.ANSWER): S.RECORDING,  # a second answer to one id: dropped
    (S.RECORDING, E.GIVE_UP): S.RECORDING,  # too late to give up: the answer is in
    (S.RECORDING, E.END): None,
    (S.ABANDONED, E.ANSWER): None,  # the late answer: relayed if cancelled, else dropped
    (S.ABANDONED, E.GIVE_UP): S.ABANDONED,
    (S.ABANDONED, E.RECORDED): S.ABANDONED,
    (S.ABANDONED, E.END): None,
    (S.ABANDONED, E.FORGET): None,
}


class InvalidTransition(RuntimeError):
    """An event the state table does not allow (a bug in the relay, never the peers')."""


class Pending:
    """One request awaiting its answer (see the module's table).

    ``handle`` belongs to the driver (an ``OpenCall``, a waiter, a cancel scope): the
    core never looks at it.
    """

    __slots__ = (
        "args",
        "call",
        "cancelled",
        "deadline",
        "handle",
        "id",
        "inline",
        "key",
        "kind",
        "method",
        "state",
        "task_id",
        "task_requested",
        "token",
        "tool",
    )

    def __init__(
        self,
        kind: Kind,
        key: Key,
        request_id: Any,
        method: str,
        state: State,
        *,
        call: CallState | None = None,
        tool: str = "",
        args: dict[str, Any] | None = None,
        token: Any = None,
    ) -> None:
        self.kind: Kind = kind
        self.key = key
        self.id = request_id
        self.method = method
        self.state = state
        self.call = call
        self.tool = tool
        self.args: dict[str, Any] = args if args is not None else {}
        self.token = token
        #: When the proxy gives up waiting for the server (None: never, or the
        #: recorder's own timer keeps it).
        self.deadline: float | None = None
        #: Whether the driver runs the call inline (``begin_call``) rather than in a task.
        self.inline = False
        #: The client asked for a task-augmented call (``params.task``).
        self.task_requested = False
        #: The task a ``tasks/*`` request names (None for other requests).
        self.task_id: str | None = None
        #: The client cancelled the call after the server had it (its late answer is
        #: relayed, as the server sent it).
        self.cancelled = False
        self.handle: Any = None

    def __repr__(self) -> str:
        return f"Pending({self.kind}, {self.id!r}, {self.method}, state={self.state.name})"


def advance(pending: Pending, event: Event) -> State | None:
    """Apply ``event``: the next state (set on ``pending``), or None when it is done.

    Raises:
        InvalidTransition: the table has no such transition.
    """
    try:
        nxt = TRANSITIONS[pending.state, event]
    except KeyError:
        raise InvalidTransition(f"{pending!r}: no transition on {event.name}") from None
    if nxt is not None:
        pending.state = nxt
    return nxt
