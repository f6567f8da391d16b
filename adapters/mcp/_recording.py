"""How an intercepted ``tools/call`` becomes a step, whatever the transport.

Theory of operation
-------------------
A transport (stdio or HTTP) hands each well-formed ``tools/call`` to
``EpisodeRecorder.call_with`` with a runner that forwards the original request upstream
and waits for the matching response (the stdio proxy runs a plain real call inline
instead, through ``EpisodeRecorder.begin_call``, and finishes it with the same
``finalize``). The sandbox applies the tool's policy: ``real`` (and
``swallow`` with ``run = true``) runs the runner; ``stub``, ``deny``, ``replay`` and a
dropped ``swallow`` never reach the upstream.

A :class:`CallState` travels with the call (one per request, so concurrent calls on one
connection never mix) and collects what the runner saw: whether the request was
forwarded, the raw upstream envelope, progress notifications. When the sandbox writes the
step, the sandbox calls ``finalize`` (passed to ``call_with``), which adds it to the step's
``meta["mcp"]`` and decides the exact reply the client gets:

* ``relay`` - the upstream's own bytes (a real call the server answered), byte-exact;
* ``result`` - a result the proxy builds from what the step says was shown (stubbed,
  denied, replayed, swallowed calls);
* ``error`` - a JSON-RPC error for a call the server will never answer (timeout, crash);
* ``none`` - nothing: the call was interrupted (the client cancelled it or left).

Deciding the reply from the *recorded* step means the client is shown exactly what the
record says it was shown.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from litmus_sandbox import LitmusError, Shown, ToolCallStep, UpstreamError

from ._jsonrpc import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    error_message,
    error_text,
    outcome_of,
    result_message,
    shown_from_result,
)
from ._schema import placeholder

#: Modes whose result the proxy makes up itself: the tool's output schema, if it has one,
#: must be known first (deny's answer is an error: no schema applies). An emulated tool's
#: listing is also what its emulator is told of it.
ANSWERED_BY_THE_PROXY = frozenset({"stub", "swallow", "replay", "emulate"})

#: Progress notifications kept per call in the step's meta, and the bytes they may take
#: (the rest are counted): a chatty or hostile server cannot make a step line huge.
MAX_NOTIFICATIONS = 100
MAX_NOTIFICATION_BYTES = 256 << 10

ReplyKind = Literal["relay", "result", "error", "none"]

_decode = msgspec.json.Decoder()


class McpProtocolError(LitmusError):
    """The server answered a ``tools/call`` with a JSON-RPC error (a protocol error)."""

    def __init__(self, code: int | None, message: str) -> None:
        self.code = code
        super().__init__(f"{code}: {message}" if code is not None else message)


class CallState:
    """One intercepted ``tools/call``: what happened upstream, and what the client gets."""

    # One per call, on the relay's hot path: slots keep it small and quick to build.
    __slots__ = (
        "cap",
        "envelope",
        "envelope_raw",
        "extra_meta",
        "failure",
        "fidelity",
        "forwarded",
        "notifications",
        "notifications_bytes",
        "notifications_dropped",
        "output_schema",
        "reply",
        "reply_kind",
        "request",
        "request_id",
        "stateless",
        "stopped",
        "task_id",
        "task_requested",
        "timed_out",
    )

    def __init__(self, request_id: Any, request: bytes, *, stateless: bool) -> None:
        self.request_id = request_id
        #: The request exactly as the client sent it (what a real call forwards).
        self.request = request
        self.stateless = stateless
        self.forwarded = False
        self.envelope_raw: bytes | None = None
        self.envelope: dict[str, Any] | None = None
        self.failure: str | None = None
        self.timed_out = False
        self.notifications: list[Any] = []
        self.notifications_dropped = 0
        self.notifications_bytes = 0
        self.reply_kind: ReplyKind = "none"
        self.fidelity = ""
        #: The reply the proxy originates (``result`` and ``error`` kinds).
        self.reply: bytes = b""
        self.extra_meta: dict[str, Any] = {}
        #: The tool's declared output schema, when the proxy has seen one (``tools/list``).
        self.output_schema: dict[str, Any] | None = None
        #: Why the proxy is stopping, when it interrupts this call to stop (the client then
        #: gets an error, not silence).
        self.stopped: str | None = None
        #: The client asked for a task (``params.task``): a result the proxy makes up is
        #: given as a task of the proxy's own (``task_id``), its result by tasks/result.
        self.task_requested = False
        self.task_id: str | None = None
        #: ``max_result_bytes`` of the sandbox recording the call (:meth:`finalize_capped`).
        self.cap = 0

    def note(self, notification: Any, size: int) -> None:
        """Keep a notification the server sent about this call (progress), ``size`` bytes
        as it came, while the call keeps fewer than :data:`MAX_NOTIFICATIONS` taking at
        most :data:`MAX_NOTIFICATION_BYTES`; count the others."""
        kept = self.notifications_bytes + size
        if len(self.notifications) < MAX_NOTIFICATIONS and kept <= MAX_NOTIFICATION_BYTES:
            self.notifications.append(notification)
            self.notifications_bytes = kept
        else:
            self.notifications_dropped += 1

    def answered(self, raw: bytes, envelope: dict[str, Any]) -> Any:
        """The upstream answered: keep the envelope and return what the runner returns.

        Raises:
            McpProtocolError: the answer is a JSON-RPC error.
        """
        self.envelope_raw = raw
        self.envelope = envelope
        if "error" in envelope:
            raise McpProtocolError(*error_text(envelope["error"]))
        return shown_from_result(envelope.get("result"))

    def finalize_capped(self, step: ToolCallStep) -> ToolCallStep:
        """:meth:`finalize` with the cap set in :attr:`cap` (a call run inline, whose
        client is shown what the step records)."""
        return self.finalize(step, self.cap)

    def finalize(
        self,
        step: ToolCallStep,
        cap: int,
        whole: Callable[[str], Shown | None] | None = None,
    ) -> ToolCallStep:
        """Add ``meta["mcp"]`` to the step and decide the client's reply from it.

        ``whole`` (``EpisodeRecorder.whole_shown``) gives what the client is shown of a
        result the step records capped: the cap is the record's, never the client's.
        """
        outcome = step.actual.outcome if step.actual is not None else None
        self.fidelity = step.fidelity
        mcp: dict[str, Any] = {"request_id": self.request_id, "forwarded": self.forwarded}
        envelope = self.envelope
        if envelope is not None and self.envelope_raw is not None:
            self._upstream(mcp, envelope, self.envelope_raw, cap)
        elif outcome == "interrupted":
            mcp["outcome"] = "interrupted"
        elif outcome == "timeout":
            self.timed_out = True
            mcp["outcome"] = "timeout"
        elif self.forwarded:
            mcp["outcome"] = "upstream_failed"
            if self.failure:
                mcp["failure"] = self.failure
        else:
            mcp["outcome"] = "not_forwarded"
        self._noted(mcp)

        if outcome == "interrupted" and self.stopped is not None:
            # The proxy is stopping: the client is told (see Session.stop in
            # _stdio_session.py), and the record says so.
            self.reply_kind = "error"
            self.reply = error_message(
                self.request_id, CONNECTION_CLOSED, f"litmus-sandbox: {self.stopped}"
            )
        elif outcome == "interrupted":
            self.reply_kind = "none"
        elif step.fidelity == "real" and self.envelope_raw is not None:
            self.reply_kind = "relay"
        elif step.fidelity == "real":
            self.reply_kind = "error"
            timeout = mcp["outcome"] == "timeout"
            code = REQUEST_TIMEOUT if timeout else CONNECTION_CLOSED
            text = step.shown.text() or "the MCP server did not answer"
            self.reply = error_message(self.request_id, code, f"litmus-sandbox: {text}")
        else:
            self.reply_kind = "result"
            sent = (whole(step.call_id) if whole is not None else None) or step.shown
            if sent.structured is not None and not isinstance(sent.structured, dict):
                # MCP's structured content is an object: any other value goes as text only.
                sent = msgspec.structs.replace(sent, structured=None)
                mcp["structured_not_an_object"] = True
                step = msgspec.structs.replace(
                    step, shown=msgspec.structs.replace(step.shown, structured=None)
                )
            if (
                self.output_schema is not None
                and not sent.is_error
                and sent.structured is None
                and step.fidelity != "emulated"  # an emulated result was checked: never made up
            ):
                # The client expects structure the stand-in lacks: the smallest that fits.
                structured = placeholder(self.output_schema, sent.text())
                sent = msgspec.structs.replace(sent, structured=structured)
                mcp["structured_placeholder"] = True
                step = msgspec.structs.replace(
                    step, shown=msgspec.structs.replace(step.shown, structured=structured)
                )
            self.reply = result_message(self.request_id, sent, stateless=self.stateless)
            if self.task_requested:
                # Shown in the shape the client asked for: a task whose result (the
                # step's shown) the client fetches with tasks/result.
                self.task_id = f"litmus-sandbox:task:{uuid.uuid4().hex}"
                mcp["task"] = {"task_id": self.task_id, "proxy_task": True}
        mcp["reply"] = self.reply_kind
        return msgspec.structs.replace(step, meta={**step.meta, "mcp": mcp})

    def relayed(self, cap: int) -> dict[str, Any]:
        """``meta["mcp"]`` of a real call the server answered with a result, relayed as
        it is: what :meth:`finalize` adds to its step, known before the step is built
        (``OpenCall.done(shown, meta=...)``: the hot path builds the step once)."""
        envelope, raw = self.envelope, self.envelope_raw
        assert envelope is not None
        assert raw is not None
        self.fidelity = "real"
        self.reply_kind = "relay"
        mcp: dict[str, Any] = {"request_id": self.request_id, "forwarded": self.forwarded}
        self._upstream(mcp, envelope, raw, cap)
        self._noted(mcp)
        mcp["reply"] = "relay"
        return mcp

    @staticmethod
    def _upstream(mcp: dict[str, Any], envelope: dict[str, Any], line: bytes, cap: int) -> None:
        mcp["outcome"] = outcome_of(envelope)
        raw = line.rstrip(b"\r\n")
        mcp["upstream_bytes"] = len(raw)
        mcp["upstream_sha256"] = hashlib.sha256(raw).hexdigest()
        # The envelope beside what the client was shown; a huge one is summarized by its
        # size and hash, like the sandbox caps any large result.
        mcp["upstream"] = envelope if len(raw) <= cap else None

    def _noted(self, mcp: dict[str, Any]) -> None:
        """The progress the server reported, and what the transport added."""
        if self.notifications:
            mcp["notifications"] = self.notifications
        if self.notifications_dropped:
            mcp["notifications_dropped"] = self.notifications_dropped
        if self.extra_meta:
            mcp.update(self.extra_meta)


class UpstreamGone(UpstreamError):
    """The MCP server exited or stopped answering; names why."""


def decode_envelope(raw: bytes) -> dict[str, Any] | None:
    """Decode an upstream response (None if it is not a JSON object)."""
    try:
        body = _decode.decode(raw)
    except msgspec.DecodeError:
        return None
    return body if isinstance(body, dict) else None
