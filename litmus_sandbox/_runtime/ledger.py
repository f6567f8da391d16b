"""Which tool calls are in flight, and which of them overlapped: what attribution rests on.

Theory of operation
-------------------
Probes that observe the world (the filesystem, an in-memory state) see every change made
while a call ran, whoever made it. When calls are in flight at once, or a sync tool
abandoned at its timeout still runs in its thread, what such a probe saw during a call
cannot be pinned on that call: the call is *overlapped*, and the sandbox records what the
probe saw as unattributed. (Probes with exact attribution, such as egress, whose every
request names its call, are not concerned.)

A call :meth:`~CallLedger.enter`\\ s before it runs and :meth:`~CallLedger.leave`\\ s once
its effects are taken; ``leave`` says whether it overlapped.

=========================================  ==========================================
when a call enters and ...                 overlapped from then on
=========================================  ==========================================
no other call is in flight, no thread      nothing
other calls are in flight                  the entering call and every call in flight
a thread left running is still running     the entering call
=========================================  ==========================================

Leaving forgets the call, so the ledger holds only calls in flight. Plain data: no I/O,
no clock, no lock (the sandbox uses it from its event loop). One ledger serves all the
episodes of a sandbox, since their probes watch one world.
"""

from __future__ import annotations

from typing import Protocol


class ThreadEnd(Protocol):
    """Tells whether a thread has ended (a :class:`threading.Event` set when it does)."""

    def is_set(self) -> bool: ...


class CallLedger:
    """The calls in flight, those that overlapped, and threads that may outlive a call."""

    __slots__ = ("_in_flight", "_overlapped", "_threads")

    def __init__(self) -> None:
        self._in_flight: set[str] = set()
        self._overlapped: set[str] = set()
        self._threads: list[ThreadEnd] = []

    def enter(self, call_id: str) -> None:
        """Call ``call_id`` starts: it overlaps every call in flight, and any live thread."""
        if self._in_flight:
            # Calls that overlap cannot be told apart by probes that only see the world.
            self._overlapped.update(self._in_flight)
            self._overlapped.add(call_id)
        if self._threads:
            self._threads[:] = [t for t in self._threads if not t.is_set()]
            if self._threads:
                # A sync tool abandoned at its timeout still runs: what it does now would
                # land on this call.
                self._overlapped.add(call_id)
        self._in_flight.add(call_id)

    def leave(self, call_id: str) -> bool:
        """Call ``call_id`` has ended: forget it; whether it overlapped while in flight."""
        self._in_flight.discard(call_id)
        if call_id in self._overlapped:
            self._overlapped.discard(call_id)
            return True
        return False

    def track_thread(self, ended: ThreadEnd) -> None:
        """A tool runs in a thread that ``ended`` tells the end of: while it runs, the
        calls that start overlap it (it may be abandoned at a timeout and run on)."""
        self._threads.append(ended)

    def overlapped(self, call_id: str) -> bool:
        """Whether call ``call_id``, in flight, has overlapped another call or a thread."""
        return call_id in self._overlapped

    @property
    def in_flight(self) -> frozenset[str]:
        """The calls entered and not yet left."""
        return frozenset(self._in_flight)
