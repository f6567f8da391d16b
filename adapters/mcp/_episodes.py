"""Episode boundaries for an MCP session: opened lazily, closed complete or aborted.

One MCP session is one episode. It is opened at the session's first ``tools/call`` (or,
if the session made none, when it ends: a session that called no tool is still a
recorded run, with zero steps), so that the case id can come from the client:

1. ``case_id`` given to the proxy (``--case-id``) wins;
2. else the first ``_meta["litmus/case_id"]`` the client sent on any request before the
   episode opened (``initialize``, ``server/discover``, ``tools/list``, the first
   ``tools/call``);
3. else :data:`DEFAULT_CASE_ID`.

The header's ``meta["mcp"]["case_id_source"]`` says which (``option``, ``meta:<method>``
or ``default``).

The episode's ``async with`` block lives in its own *owner* task, started in a task
group that outlives the session's relay tasks: the episode is entered and exited by the
same task, and cancelling the relay never ends it as ``cancelled`` by accident. An
abort reason (server crash or hang) makes the owner leave the block by raising, so the
sandbox ends the episode ``aborted`` with that reason.
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from litmus_sandbox import EpisodeRecorder, Sandbox

from ._recording import UpstreamGone

DEFAULT_CASE_ID = "mcp-session"


class EpisodeSlot:
    """The (at most one) episode of one MCP session.

    Args:
        sandbox: the open sandbox to record into.
        tg: a task group that outlives the session's relay (hosts the owner task).
        case_id: the case id given by the operator (wins over ``_meta``).
        agent: recorded as the header's ``agent``.
        meta: the header's ``meta["mcp"]`` (transport, server...).
    """

    def __init__(
        self,
        sandbox: Sandbox,
        tg: TaskGroup,
        *,
        case_id: str | None = None,
        agent: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self._sandbox = sandbox
        self._tg = tg
        self._case_id = case_id
        self._source = "option" if case_id else "default"
        self._agent = agent
        self._meta: dict[str, Any] = dict(meta or {})
        self._lock = anyio.Lock()
        self._recorder: EpisodeRecorder | None = None
        self._close = anyio.Event()
        self._closed = anyio.Event()
        self._abort: str | None = None
        self._end_notes: dict[str, Any] = {}
        self.touched = False

    @property
    def opened(self) -> bool:
        return self._recorder is not None

    @property
    def recorder_now(self) -> EpisodeRecorder | None:
        """The episode's recorder if the episode is open (no waiting), else None."""
        return self._recorder

    def offer_case_id(self, case_id: str | None, method: str | None, *, touch: bool = True) -> None:
        """A case id the client sent in ``_meta``; used if none is fixed yet. ``touch``:
        the request makes the session one to record (else :meth:`touch` says so)."""
        if touch:
            self.touched = True
        if case_id and self._case_id is None and self._recorder is None:
            self._case_id = case_id
            self._source = f"meta:{method}"

    def note(self, key: str, value: Any) -> None:
        """Set a fact of the header's ``meta["mcp"]`` (before the episode opens).

        The last value wins: a client that probes ``server/discover`` (2026-07-28) and
        falls back to ``initialize`` (2025-11-25) speaks the latter.
        """
        if self._recorder is None:
            self._meta[key] = value

    def touch(self) -> None:
        """The session is a run to record, even if it calls no tool."""
        self.touched = True

    def end_note(self, key: str, value: Any) -> None:
        """Set a fact of the end record's ``meta["mcp"]`` (the last value wins)."""
        self._end_notes[key] = value

    def count(self, key: str, amount: int = 1) -> int:
        """Add ``amount`` to a count of the end record's ``meta["mcp"]``; the new total."""
        total: int = self._end_notes.get(key, 0) + amount
        self._end_notes[key] = total
        return total

    def abort(self, reason: str) -> None:
        """End the episode ``aborted`` with this reason when it closes (first reason wins)."""
        if self._abort is None:
            self._abort = reason

    async def recorder(self) -> EpisodeRecorder:
        """The episode's recorder, opening the episode on first use."""
        if self._recorder is not None:
            return self._recorder  # the hot path takes no lock (a lock yields to the loop)
        async with self._lock:
            if self._recorder is None:
                self._recorder = await self._tg.start(self._own)
            return self._recorder

    async def close(self) -> None:
        """End the episode (``complete`` unless aborted) and wait until its end is written.

        A session that sent anything is recorded even if it never called a tool.
        """
        with anyio.CancelScope(shield=True):
            if self._recorder is None and (self.touched or self._abort):
                await self.recorder()
            self._close.set()
            if self._recorder is not None:
                await self._closed.wait()

    async def _own(self, *, task_status: TaskStatus[EpisodeRecorder]) -> None:
        meta = {"mcp": {**self._meta, "case_id_source": self._source}}
        try:
            async with self._sandbox.episode(
                self._case_id or DEFAULT_CASE_ID, agent=self._agent, meta=meta
            ) as ep:
                task_status.started(ep)
                await self._close.wait()
                if self._end_notes:
                    ep.end_meta.setdefault("mcp", {}).update(self._end_notes)
                if self._abort is not None:
                    raise UpstreamGone(self._abort)
        except UpstreamGone:
            pass  # recorded as the episode's end reason; the session already reported it
        finally:
            self._closed.set()
