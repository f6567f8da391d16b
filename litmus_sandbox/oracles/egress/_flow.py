"""Egress flows and sinks: the types every observer of network traffic shares.

Theory of operation
-------------------
Every request or tunnel in progress is an :class:`EgressFlow`. The layer that sees the
traffic (an in-process transport, the forward proxy) creates it *before* any connection
is made, hands it to a *sink* (a callable), and updates its byte counters while the
bodies stream through; it calls the sink again when the flow closes (``flow.done``),
once: :func:`close_flow` does both.

In-process flows carry the tool call that was current when they started:
:data:`current_call`, a contextvar the egress probe sets around each call (and
:func:`calling` sets for a block). anyio copies the context into child tasks and worker
threads, so concurrent calls in separate tasks are told apart exactly.

This module imports nothing of the egress package: the transports, the proxy, replay and
the probe all import it, never the other way round.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

import msgspec

from litmus_sandbox._model.records import EgressDecision, EgressEvent

#: The tool call in flight in this context (set by ``EgressProbe.before_call``).
current_call: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "litmus_egress_call", default=None
)

_DEFAULT_PORTS = {"http": 80, "https": 443}


class EgressFlow:
    """One request (or tunnel) in progress; :meth:`event` snapshots it as an :class:`EgressEvent`.

    The layer that sees the traffic owns the counters; sinks only read them. ``started``
    is :func:`time.monotonic` when the request was seen, before any connection.
    """

    __slots__ = (
        "call_id",
        "decision",
        "done",
        "error",
        "host",
        "method",
        "path",
        "port",
        "request_bytes",
        "response_bytes",
        "scheme",
        "sni",
        "started",
        "status",
    )

    def __init__(
        self,
        *,
        method: str,
        scheme: str,
        host: str,
        port: int | None,
        path: str = "",
        decision: str = "allow",
        call_id: str | None = None,
        started: float | None = None,
    ) -> None:
        self.method = method
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
        self.decision = decision
        self.call_id = call_id
        self.started = time.monotonic() if started is None else started
        self.request_bytes = 0
        self.response_bytes = 0
        self.status: int | None = None
        self.sni: str | None = None
        #: Why no response came (refused, reset, timed out); None while none is known.
        self.error: str | None = None
        self.done = False

    def event(self) -> EgressEvent:
        return EgressEvent(
            method=self.method,
            scheme=self.scheme,
            host=self.host,
            port=self.port,
            path=self.path,
            request_bytes=self.request_bytes,
            response_bytes=self.response_bytes,
            status=self.status,
            # Set only from closed vocabularies: a rule's mode, or what replay or strict mode did.
            decision=cast("EgressDecision", self.decision),
            sni=self.sni,
            url=self.url,
            error=msgspec.UNSET if self.error is None else self.error,
        )

    @property
    def url(self) -> str | None:
        """``scheme://host[:port]path`` of an HTTP(S) request or tunnel, the port left out
        when it is the scheme's default; None for other traffic (a DNS query, raw TCP)."""
        default = _DEFAULT_PORTS.get(self.scheme)
        if default is None:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if self.port is None or self.port == default else f":{self.port}"
        return f"{self.scheme}://{host}{port}{self.path}"

    def __repr__(self) -> str:
        state = "done" if self.done else "open"
        return f"<EgressFlow {self.method} {self.scheme}://{self.host}:{self.port}{self.path} {self.decision} {state}>"


#: Called with a flow when it opens (``flow.done`` is False) and again when it closes.
#: It may be called from worker threads (sync tools), so it must not block or await.
EgressSink = Callable[[EgressFlow], None]


def ignore(flow: EgressFlow) -> None:
    """The sink of an observer nobody listens to."""


def close_flow(flow: EgressFlow, sink: EgressSink) -> None:
    """Mark ``flow`` done and tell ``sink``, once (streams may be closed more than once)."""
    if not flow.done:
        flow.done = True
        sink(flow)


@contextmanager
def calling(call_id: str | None) -> Iterator[None]:
    """Attribute in-process requests made inside this block (and its child tasks) to ``call_id``."""
    token = current_call.set(call_id)
    try:
        yield
    finally:
        current_call.reset(token)
