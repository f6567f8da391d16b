"""The egress probe: what the tools tried to reach on the network, whatever they told the agent.

Theory of operation
-------------------
An :class:`~litmus_sandbox.EgressPolicy` maps hosts (exact names or globs, optionally
with a port) to a decision: ``allow`` (forward), ``deny`` (answer 403, connect nothing)
or ``stub`` (answer a configured response, connect nothing). Deciding is a pure function
of host and port.

Two layers see traffic and report every request or tunnel to one sink as an
:class:`~._flow.EgressFlow`:

* in process, the httpx transports of :mod:`._transport` (tools that take an ``httpx``
  client are observed without leaving the process); they can also record response
  bodies to an egress cassette and serve allowed requests from one (:mod:`._replay`);
* out of process, the loopback :class:`~._forward_proxy.ForwardProxy` for subprocess
  tools pointed at it by :func:`~._http_wire.proxy_env`, and strict mode
  (:func:`~._strict.run_strict`: an empty network namespace whose only way out is that
  proxy).

:class:`EgressProbe` implements the sandbox's probe protocol over that sink. Attribution
to tool calls, and how it copes with concurrency:

1. ``before_call`` sets :data:`~._flow.current_call` (a contextvar) in the task that runs
   the tool; in-process flows carry the call id that was current when they started, so
   concurrent calls in separate tasks are told apart exactly (anyio copies the context
   into child tasks and worker threads).
2. Flows without a call id (everything the forward proxy sees, and in-process requests
   made outside any call's context) are attributed by time: to the one call whose window
   (``before_call`` .. ``after_call``) contains the flow's start. A flow that started while
   two or more calls were in flight is ambiguous: no call claims it, and it is reported by
   ``finish`` as unattributed.
3. A flow still open when its call ends (a response the tool left unread, a tunnel whose
   close the proxy has not seen yet) is reported with the bytes counted so far.

Each event says how it was tied to its call (``attribution``): ``context`` (it carried
the call's id), ``window`` (by time), ``none`` (reported by ``finish``).
"""

from __future__ import annotations

import contextvars
import threading
import time
from typing import Any

import httpx
import msgspec

from litmus_sandbox._config.egress import EgressPolicy
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Attribution, Effects, EgressEvent
from litmus_sandbox.oracles.egress._flow import EgressFlow, current_call
from litmus_sandbox.oracles.egress._replay import HttpCassette, HttpRecorder, Replaying
from litmus_sandbox.oracles.egress._transport import EgressTransport, SyncEgressTransport

#: The end of a window still open.
_OPEN = float("inf")
#: What a call that reached nothing gets (frozen: one object serves every call).
_NO_EFFECTS = Effects()

#: Client options httpx applies to its default transport only.
_TRANSPORT_OPTIONS = ("verify", "cert", "http1", "http2", "limits", "trust_env")


class EgressProbe:
    """The egress side-effect probe (``name = "egress"``): one sink, many observers.

    Hand tools an observed client (:meth:`client`, :meth:`transport`,
    :meth:`sync_transport`) and/or start a :class:`ForwardProxy` with this probe's policy
    and sink (``ForwardProxy(probe.policy, probe.sink)``). See the module docstring for
    how flows are attributed to calls, concurrent ones included.

    Args:
        policy: the egress policy (everything allowed when None).
        replay: an egress cassette its in-process transports serve from (the forward
            proxy for subprocesses does not replay).
        on_miss: ``error`` or ``forward`` (see :class:`EgressTransport`).
        record: records the responses its in-process transports forward.

    Raises:
        ConfigError: an unknown ``on_miss``.
    """

    name = "egress"
    #: Flows carry their call's id, or are attributed by time window only when one call
    #: alone was in flight (ambiguous ones stay unattributed): overlapping calls are told
    #: apart here, so the sandbox keeps what this probe attributes.
    exact_attribution = True

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        *,
        replay: HttpCassette | None = None,
        on_miss: str = "error",
        record: HttpRecorder | None = None,
    ) -> None:
        self.policy = policy or EgressPolicy()
        Replaying(replay, on_miss, record)  # validates on_miss now, not at first use
        self.replay, self.on_miss, self.record = replay, on_miss, record
        self._lock = threading.Lock()
        self._flows: list[EgressFlow] = []
        self._windows: dict[str, list[float]] = {}  # call id -> [start, end or +inf]
        self._tokens: dict[str, contextvars.Token[str | None]] = {}

    # -- sink and observers

    def sink(self, flow: EgressFlow) -> None:
        """Receives flows from transports and proxies (from any thread)."""
        # Flows are tracked from their opening; the closing call needs nothing more, as
        # the probe reads the flow's counters when it reports it.
        if not flow.done:
            with self._lock:
                self._flows.append(flow)

    def transport(self, inner: httpx.AsyncBaseTransport | None = None) -> EgressTransport:
        """An async transport that reports to this probe."""
        return EgressTransport(
            self.policy,
            self.sink,
            transport=inner,
            replay=self.replay,
            on_miss=self.on_miss,
            record=self.record,
        )

    def sync_transport(self, inner: httpx.BaseTransport | None = None) -> SyncEgressTransport:
        """A sync transport that reports to this probe."""
        return SyncEgressTransport(
            self.policy,
            self.sink,
            transport=inner,
            replay=self.replay,
            on_miss=self.on_miss,
            record=self.record,
        )

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` whose traffic this probe sees (``transport=`` is wrapped).

        Connection options httpx gives only its own default transport (``verify``,
        ``cert``, ``http1``, ``http2``, ``limits``, ``trust_env``) apply to the transport
        this client sends through, as they would without the probe.
        """
        if "proxy" in kwargs or "mounts" in kwargs:
            # httpx would send through transports of its own, past this probe's policy.
            raise ConfigError(
                "an observed client sends through the egress transport: proxy= and mounts= "
                "would bypass it (wrap your own transport with transport= instead)"
            )
        inner = kwargs.pop("transport", None)
        if inner is None:
            options = {k: kwargs[k] for k in _TRANSPORT_OPTIONS if k in kwargs}
            if options:
                inner = httpx.AsyncHTTPTransport(**options)
        return httpx.AsyncClient(transport=self.transport(inner), **kwargs)

    def describe(self) -> dict[str, Any]:
        """What this probe enforces, for the episode header's ``oracles``."""
        out: dict[str, Any] = {"policy": self.policy.describe()}
        if self.replay is not None:
            out["replay"] = {"on_miss": self.on_miss}
        if self.record is not None:
            out["record"] = str(self.record.path)
        return out

    # -- the probe protocol

    async def start(self) -> None:
        with self._lock:
            self._flows.clear()
            self._windows.clear()

    async def before_call(self, call_id: str) -> None:
        """Open the call's window; set :data:`current_call` in the calling task's context.

        Call it from the task that will run the tool (the sandbox does): a contextvar set
        here is seen by that task, the tasks it starts and the worker threads it uses.
        """
        self.open_window(call_id)
        self._tokens[call_id] = current_call.set(call_id)

    async def after_call(self, call_id: str) -> Effects:
        """The flows of this call: those carrying its id, and those (without an id) that
        started in its window while no other call was in flight."""
        token = self._tokens.pop(call_id, None)
        if token is not None:
            try:
                current_call.reset(token)
            except ValueError:  # after_call ran in another context than before_call
                current_call.set(None)
        return self.close_window(call_id)

    def open_window(self, call_id: str) -> None:
        """Open the call's time window (no context set: for calls run out of process)."""
        with self._lock:
            self._windows[call_id] = [time.monotonic(), float("inf")]

    def close_window(self, call_id: str) -> Effects:
        """Close the call's window: the flows carrying its id or started in it alone."""
        end = time.monotonic()
        with self._lock:
            window = self._windows.setdefault(call_id, [end, end])
            window[1] = end
            mine: list[EgressFlow] = []
            if self._flows:
                rest: list[EgressFlow] = []
                for flow in self._flows:
                    (mine if self._belongs(flow, call_id, window) else rest).append(flow)
                self._flows = rest
            if len(self._windows) > 1:
                self._forget_windows(end)
        if not mine:
            return _NO_EFFECTS
        mine.sort(key=lambda f: f.started)
        # The request carried the call's id (in process), or started in its window alone.
        return Effects(
            egress=tuple(
                _tied(f.event(), "context" if f.call_id is not None else "window") for f in mine
            )
        )

    def _forget_windows(self, now: float) -> None:
        """Drop the closed windows no flow can be tied to any more (caller holds the lock).

        A closed window only counts for the flows a call still in flight or yet to come
        claims by time, which start after that call's window opens: one that closed
        before every open window opened (before ``now``, with none open) can no longer
        make a flow ambiguous, nor be claimed by id. Without this, a long session would
        keep a window a call, and look through them all for every flow. (Plain loops: this
        runs once a call, on a relay's hot path.)
        """
        horizon = now
        for start, end in self._windows.values():
            if end == _OPEN and start < horizon:
                horizon = start
        stale = [call_id for call_id, (_, end) in self._windows.items() if end < horizon]
        for call_id in stale:
            del self._windows[call_id]

    def _claimable(self, flow: EgressFlow) -> bool:
        """Whether a call still in flight may yet claim ``flow`` (caller holds the lock)."""
        if flow.call_id is not None:
            return flow.call_id in self._windows and self._windows[flow.call_id][1] == float("inf")
        return any(w[1] == float("inf") and w[0] <= flow.started for w in self._windows.values())

    def _belongs(self, flow: EgressFlow, call_id: str, window: list[float]) -> bool:
        if flow.call_id is not None:
            return flow.call_id == call_id
        t = flow.started
        if not window[0] <= t <= window[1]:
            return False
        # Ambiguous when another call's window also covers the start: leave it unattributed.
        return not any(other != call_id and w[0] <= t <= w[1] for other, w in self._windows.items())

    async def finish(self) -> Effects:
        """Flows no call claimed: outside every window, ambiguous, or late. Flows a call
        still in flight may claim stay (it may belong to another episode)."""
        with self._lock:
            flows: list[EgressFlow] = []
            kept: list[EgressFlow] = []
            for flow in self._flows:
                (kept if self._claimable(flow) else flows).append(flow)
            self._flows = kept
        flows.sort(key=lambda f: f.started)
        return Effects(egress=tuple(_tied(f.event(), "none") for f in flows))

    async def close(self) -> None:
        with self._lock:
            self._flows.clear()
            self._windows.clear()
        self._tokens.clear()
        if self.record is not None:
            self.record.close()


def _tied(event: EgressEvent, how: Attribution) -> EgressEvent:
    return msgspec.structs.replace(event, attribution=how)
