"""What the relay core asks its driver to do. Plain values: the core performs none.

The driver performs a batch in order. Bytes go to a side as they are given (the core
never re-encodes what it relays). Recording is the driver's: ``StartCall`` hands it a
call to run (inline through ``EpisodeRecorder.begin_call`` or in a task through
``call_with``); ``FinishCall`` tells it how that call ended. Once the step is written
the driver calls ``Relay.recorded``, which gives the reply: a client is never shown an
answer the record does not have yet.
"""

from __future__ import annotations

from typing import Any, Literal

from ._states import Pending

How = Literal["answered", "failed", "timed_out", "interrupted"]


class ToServer:
    """Write these bytes (whole lines) to the server."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"ToServer({self.data!r})"


class ToClient:
    """Write these bytes (whole JSON-RPC lines) to the client."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"ToClient({self.data!r})"


class StartCall:
    """Run this ``tools/call`` under the sandbox's policy (then ``Relay.forward`` it, or
    let the policy answer it)."""

    __slots__ = ("pending",)

    def __init__(self, pending: Pending) -> None:
        self.pending = pending

    def __repr__(self) -> str:
        return f"StartCall({self.pending!r})"


class FinishCall:
    """The call (or the proxy's own request) ended ``how``: record its step, or wake the
    task that waits for it. ``raw``/``body``: the server's answer; ``reason``: why it
    failed."""

    __slots__ = ("body", "how", "pending", "raw", "reason")

    def __init__(
        self,
        pending: Pending,
        how: How,
        *,
        raw: bytes = b"",
        body: dict[str, Any] | None = None,
        reason: str = "",
    ) -> None:
        self.pending = pending
        self.how: How = how
        self.raw = raw
        self.body = body
        self.reason = reason

    def __repr__(self) -> str:
        return f"FinishCall({self.pending!r}, {self.how})"


class EndStartup:
    """The client's first message past the handshake is next: the server's start-up is
    over (the driver takes the probes' pass before that message reaches the server)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EndStartup()"


class Abort:
    """The episode will end ``aborted`` with this reason (the first reason stands);
    ``say``: tell the operator on stderr too."""

    __slots__ = ("reason", "say")

    def __init__(self, reason: str, *, say: bool = True) -> None:
        self.reason = reason
        self.say = say

    def __repr__(self) -> str:
        return f"Abort({self.reason!r})"


class Offer:
    """A client request that may name the episode's case id and protocol revision."""

    __slots__ = ("case_id", "method", "version")

    def __init__(self, case_id: str | None, method: str, version: str | None) -> None:
        self.case_id = case_id
        self.method = method
        self.version = version


class KeepAnswer:
    """The server's answer to ``initialize``, ``server/discover`` or ``tools/list``: kept
    with the episode for server-less replay (``answers``: all kept so far)."""

    __slots__ = ("answers",)

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers


class Note:
    """A fact about the session for the episode's ``meta["mcp"]`` (the end record's):
    ``key`` set to ``value``."""

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: Any) -> None:
        self.key = key
        self.value = value

    def __repr__(self) -> str:
        return f"Note({self.key}={self.value!r})"


class CutOff:
    """Stop listening to the server (it broke a limit): stop it; what waits is answered
    when it is gone."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


Action = (
    ToServer
    | ToClient
    | StartCall
    | FinishCall
    | EndStartup
    | Abort
    | Offer
    | KeepAnswer
    | Note
    | CutOff
)
