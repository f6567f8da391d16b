"""What a hostile or broken peer cannot do through the relay (the core's guard).

Theory of operation: see ``_core.py`` ("Hostile peers"). A client's message over the
size or depth limit, or anything that could invoke a tool but cannot be recorded as a
call, is answered with a JSON-RPC error and recorded as refused (the end record's
``meta["mcp"]["refused"]``, at most :data:`MAX_REFUSED` kept, the rest counted). A server
that breaks a limit is cut off; a line from it that is not JSON is dropped and counted
(``meta["mcp"]["dropped_from_server"]``), and an answer in invalid UTF-8 fails the
request that waits for it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec

from .._jsonrpc import error_message, id_key
from ._actions import Abort, Action, CutOff, FinishCall, Note, ToClient, ToServer
from ._states import Event, Key, Pending, State, advance

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
PARSE_ERROR = -32700
#: Refusals kept in the end record (the rest are counted).
MAX_REFUSED = 100

_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


def valid_id(request_id: Any) -> bool:
    """Whether JSON-RPC allows ``request_id`` on a request (a string or a number)."""
    return isinstance(request_id, str | int | float) and not isinstance(request_id, bool)


class Guard:
    """The refusals and drops of a :class:`~._core.Relay` (its base class)."""

    max_message_bytes: int
    max_depth: int
    pending: dict[Key, Pending]
    engaged: bool
    sent_anything: bool
    server_gone: bool
    gone_reason: str
    _refused: list[dict[str, Any]]
    _refused_more: int
    _dropped: dict[str, int]

    def _up(self, line: bytes) -> list[Action]:
        return [] if self.server_gone else [ToServer(line)]

    def client_too_long(self, size: int) -> list[Action]:
        """The client sent a line over ``max_message_bytes`` (``size`` bytes were read
        of it, and dropped)."""
        self.sent_anything = True
        why = f"a message over {self.max_message_bytes} bytes"
        record = {"request_id": None, "reason": why, "bytes": size}
        return [
            *self._refused_record(record, None, INVALID_REQUEST, why),
            Abort(f"the client sent {why}"),
        ]

    def _other_from_client(self, line: bytes) -> list[Action]:
        """Not one JSON-RPC message: a batch, junk, a line that cannot be decoded."""
        text = line.strip()
        if text.startswith(b"["):
            try:
                batch = _decode.decode(line)
            except (msgspec.DecodeError, RecursionError):
                batch = None
            if isinstance(batch, list):
                calls = [
                    m for m in batch if isinstance(m, dict) and m.get("method") == "tools/call"
                ]
                if not calls:
                    return self._up(line)  # batches left MCP in 2025-06-18; relayed as they are
                ids = [m.get("id") for m in batch if isinstance(m, dict) and valid_id(m.get("id"))]
                why = "a tools/call inside a JSON-RPC batch cannot be recorded"
                return self._refuse(line, ids or None, INVALID_REQUEST, why)
        if b"tools/call" in line:
            # A lenient server might still read a tool call out of it: it never gets it.
            why = "a message naming tools/call that is not valid JSON cannot be recorded"
            return self._refuse(line, None, PARSE_ERROR, why)
        return self._up(line)

    def _refuse(
        self, line: bytes, rid: Any, code: int, why: str, *, answer: bool = True
    ) -> list[Action]:
        raw = line.rstrip(b"\r\n")
        record = {
            "request_id": rid,
            "reason": why,
            "bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
        }
        return self._refused_record(record, rid, code, why, answer=answer)

    def _refused_record(
        self, record: dict[str, Any], rid: Any, code: int, why: str, *, answer: bool = True
    ) -> list[Action]:
        self.engaged = True
        if len(self._refused) < MAX_REFUSED:
            self._refused.append(record)
        else:
            self._refused_more += 1
        actions: list[Action] = [Note("refused", list(self._refused))]
        if self._refused_more:
            actions.append(Note("refused_more", self._refused_more))
        if answer:
            if isinstance(rid, list):  # a batch: one error per request in it
                errors = [_decode.decode(self._error(i, code, why).data) for i in rid]
                actions.append(ToClient(_encode.encode(errors) + b"\n"))
            else:
                actions.append(self._error(rid, code, why))
        return actions

    def server_too_long(self, size: int) -> list[Action]:
        """The server wrote a line over ``max_message_bytes``: it is cut off."""
        why = f"the MCP server sent a message over {self.max_message_bytes} bytes"
        return [CutOff(why), Abort(f"{why}: cut off")]

    def _other_from_server(self, line: bytes) -> list[Action]:
        try:
            _decode.decode(line)
        except (msgspec.DecodeError, RecursionError):
            pass
        else:
            return [ToClient(line)]  # JSON (a batch...): a whole message, the client's to read
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            pending = self._pending_of_undecodable(line)
            if pending is not None:
                return self._undecodable_answer(pending)
            return self._drop("invalid_utf8")
        return self._drop("not_json")

    def _pending_of_undecodable(self, line: bytes) -> Pending | None:
        try:
            loose = json.loads(line.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return None
        rid = loose.get("id") if isinstance(loose, dict) else None
        pending = self.pending.get(id_key(rid)) if valid_id(rid) else None
        if pending is None or pending.state is not State.AT_SERVER:
            return None
        return pending

    def _undecodable_answer(self, pending: Pending) -> list[Action]:
        why = "the MCP server answered in invalid UTF-8"
        if pending.kind == "call":
            assert pending.call is not None
            advance(pending, Event.ANSWER)
            pending.call.failure = why
            pending.call.extra_meta["invalid_utf8"] = True
            return [FinishCall(pending, "failed", reason=why)]
        advance(pending, Event.END)
        del self.pending[pending.key]
        if pending.kind == "own":
            return [FinishCall(pending, "failed", reason=why)]
        return [*self._drop("invalid_utf8"), self._error(pending.id, INTERNAL_ERROR, why)]

    def _drop(self, why: str) -> list[Action]:
        self._dropped[why] = self._dropped.get(why, 0) + 1
        return [Note("dropped_from_server", dict(self._dropped))]

    def _error(self, rid: Any, code: int, text: str) -> ToClient:
        return ToClient(error_message(rid, code, f"litmus-sandbox: {text}") + b"\n")
