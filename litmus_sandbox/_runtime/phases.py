"""A tool server's start-up and shutdown, watched apart from the agent's session.

Theory of operation
-------------------
An adapter that launches a tool server itself (the MCP stdio proxy) holds the sandbox's
probes across the server's whole life: ``async with sandbox.server_phases() as phases``
before it starts the server, until the server has exited. The probes take their
baseline on entering (unless an episode of the sandbox already holds them), so what the
server does before the agent's first call is seen, not baked into a baseline. The
adapter marks two points of the server's life, which cut it in three phases:

1. **start-up**, from the baseline to :meth:`ServerPhases.end_startup`, which the
   adapter awaits before the first message of the client's that is not the handshake
   reaches the server: the probes' pass taken there (their ``finish``: what no call
   explains) is the server's start-up;
2. **the session**, the agent's: effects land on calls by evidence, or are unattributed,
   as in any episode;
3. **shutdown**, from :meth:`ServerPhases.end_session` (the client ended the session
   cleanly, nothing of its pending): the pass taken there closes the session's
   unattributed effects; what the probes see after it, until the episode ends, is the
   server's shutdown.

The episode opened meanwhile (one per server: the stdio proxy's) gets the phases from
its watch (``Observers.watch``): its ``end`` record lists ``startup`` and ``shutdown``
beside ``unattributed`` (:meth:`ServerPhases.ending`). They make no findings, and are
never dropped. A session that did not end cleanly (the server died, a signal, requests
pending) has no shutdown: what no call explains after its start-up is unattributed, as
before. The marks are awaited from one task (the client's pump), each once; the passes
are shielded from cancellation, so nothing taken is lost half-way.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import anyio

from litmus_sandbox._core.findings import merge, unattributed_findings
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Effects, Finding


class _Watch(Protocol):
    """What the phases need of the sandbox's observers (``_runtime/observers.py``)."""

    phases: ServerPhases | None

    async def enter(self) -> None: ...

    def leave(self) -> None: ...

    async def unexplained(self) -> Effects: ...


_NOTHING = Effects()


class Ending(NamedTuple):
    """The effects an episode's ``end`` record lists: those no call explains (with their
    findings), and the server's own start-up and shutdown (no findings)."""

    unattributed: Effects
    findings: tuple[Finding, ...]
    startup: Effects = _NOTHING
    shutdown: Effects = _NOTHING

    @classmethod
    def of(
        cls, unattributed: Effects, startup: Effects = _NOTHING, shutdown: Effects = _NOTHING
    ) -> Ending:
        return cls(unattributed, unattributed_findings(unattributed), startup, shutdown)


class ServerPhases:
    """The probes held across one tool server's life, and the points that cut it.

    Made by ``Sandbox.server_phases()``; see the module's theory of operation.
    """

    def __init__(self, observers: _Watch) -> None:
        self._observers = observers
        #: What the probes saw before the session began (None: it has not begun yet).
        self.startup: Effects | None = None
        #: What no call explains, seen in the session (None: it has not ended cleanly).
        self.session: Effects | None = None

    async def __aenter__(self) -> ServerPhases:
        observers = self._observers
        if observers.phases is not None:
            raise ConfigError("a sandbox watches the phases of one tool server at a time")
        await observers.enter()  # the baseline, before the server starts
        observers.phases = self
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._observers.phases = None
        self._observers.leave()

    async def end_startup(self) -> None:
        """The session begins: what the probes saw until now is the server's start-up.
        Await it before the client's first message past the handshake reaches the
        server (later calls do nothing)."""
        if self.startup is None:
            self.startup = _NOTHING  # taken: a second mark does not wait for the first
            with anyio.CancelScope(shield=True):
                self.startup = await self._observers.unexplained()

    async def end_session(self) -> None:
        """The client ended the session cleanly: what no call explains up to now is the
        session's; what follows is the server's shutdown (later calls do nothing)."""
        await self.end_startup()  # a client that never got past the handshake
        if self.session is None:
            self.session = _NOTHING
            with anyio.CancelScope(shield=True):
                self.session = await self._observers.unexplained()

    def ending(self, overlap: Effects, rest: Effects) -> Ending:
        """How the episode ends: ``overlap``, what calls in flight at once saw (never
        theirs alone), and ``rest``, the probes' last pass (what no call explains)."""
        if self.startup is None:
            # The client sent nothing past the handshake: no call, nothing of the agent's
            # reached the server; all of it was the server starting (and dying).
            return Ending.of(overlap, startup=rest)
        if self.session is None:
            return Ending.of(merge([overlap, rest]), startup=self.startup)
        return Ending.of(merge([overlap, self.session]), startup=self.startup, shutdown=rest)
