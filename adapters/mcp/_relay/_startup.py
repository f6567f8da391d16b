"""When a server the proxy launched has finished starting, as the client's messages tell.

A server's start-up (its runtime writing logs and caches, a package runner unpacking it)
is its own, not the agent's: the probes see it from before the server was launched, and
it lasts until the client's first message that is not the handshake, :data:`HANDSHAKE`
(``initialize``, ``notifications/initialized``; ``server/discover`` in the 2026-07-28
era). Any other message ends it, conservatively: a ``ping`` or a listing as much as a
``resources/read`` or a ``tools/call`` that may act, and a reply to a request of the
server's own (roots, sampling) too. The core then returns ``EndStartup`` before the
actions of that message: the driver takes the probes' pass (``_runtime/phases.py``)
before the message reaches the server.
"""

from __future__ import annotations

from .._jsonrpc import Message

#: (kind, method) of the messages a client sends while the server starts.
HANDSHAKE = frozenset(
    {
        ("request", "initialize"),
        ("notification", "notifications/initialized"),
        ("request", "server/discover"),
    }
)


class Startup:
    """Whether the server is still starting (only for a driver that asked: stdio)."""

    #: The client has sent nothing past the handshake yet (set by ``Relay(startup=True)``).
    starting = False

    def _ends_startup(self, msg: Message) -> bool:
        """Whether ``msg``, from the client while the server starts, ends the start-up
        (then it is over)."""
        if (msg.kind, msg.method) in HANDSHAKE:
            return False
        self.starting = False
        return True
