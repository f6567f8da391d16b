"""The sandbox's probes around each call, and the attribution of what they saw.

Theory of operation
-------------------
:class:`Observers` holds the probes of one sandbox, what each of them can do (found once,
from the optional-feature protocols of ``oracles/_probe.py``), and the
:class:`~litmus_sandbox._runtime.ledger.CallLedger` that all its episodes share (their
probes watch one world). Each episode gets a :class:`Watch` from it, which observes each of
its calls - through the probes' coroutines (:meth:`Watch.before`, :meth:`Watch.after`), or
through their plain windows for a call an adapter runs inline (:meth:`Watch.open_windows`,
:meth:`Watch.close_windows`) - and attributes what each probe saw:

* to the call, when evidence ties an effect to it (its ``attribution``: ``audit``,
  ``process``, ``context``), or the probe attributes exactly, or the call overlapped
  nothing;
* else (and always for an effect a probe ties to no call: ``none``) to the episode's
  unattributed effects, reported at its end (:meth:`Watch.finish`) once, with what the
  probes' final pass found.

A call whose step is never recorded (misconfigured) has its windows closed all the same
(:meth:`Watch.abandon`): what the probes saw is unattributed rather than lost.

The probes watch one world: the first of the episodes open at once starts them
(:meth:`Observers.enter`), and so does an adapter holding them across a tool server's
life (``phases.py``), whose start-up and shutdown the episode's end then lists apart.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import anyio
import msgspec

from litmus_sandbox._core.findings import (
    call_findings,
    distinct,
    merge,
    split,
)
from litmus_sandbox._model.records import Effects, ToolCallStep
from litmus_sandbox._runtime.ledger import CallLedger
from litmus_sandbox._runtime.phases import Ending, ServerPhases
from litmus_sandbox.oracles._probe import (
    AttributingProbe,
    DescribedProbe,
    FilteringProbe,
    Probe,
    WindowedProbe,
)


def description(probe: Probe) -> Any:
    """What the episode header says of how ``probe`` watches (``{}`` if it does not say)."""
    return probe.describe() if isinstance(probe, DescribedProbe) else {}


class Observers:
    """The probes of one sandbox, and the ledger of its calls in flight."""

    def __init__(self, probes: Sequence[Probe]) -> None:
        self.probes: tuple[Probe, ...] = tuple(probes)
        self.ledger = CallLedger()
        #: Per probe, whether what it sees is kept when calls overlapped.
        self.exact: tuple[bool, ...] = tuple(
            isinstance(p, AttributingProbe) and bool(p.exact_attribution) for p in self.probes
        )
        windowed = tuple(p for p in self.probes if isinstance(p, WindowedProbe))
        #: The probes as windows, when every probe has them (else None).
        self.windows: tuple[WindowedProbe, ...] | None = (
            windowed if len(windowed) == len(self.probes) else None
        )
        #: Episodes (and a server's phases) open now, and the lock the first starts under.
        self._open = 0
        self._lock = anyio.Lock()
        #: The phases of the tool server an adapter watches (``phases.py``), if any.
        self.phases: ServerPhases | None = None

    def __bool__(self) -> bool:
        return bool(self.probes)

    @property
    def windowed(self) -> bool:
        """Whether every probe observes a call by its window alone (true of none)."""
        return self.windows is not None

    def ignore(self, path: str | os.PathLike[str]) -> None:
        """Our own files are not the tools' effects: probes that watch paths skip them."""
        for probe in self.probes:
            if isinstance(probe, FilteringProbe):
                probe.ignore(path)

    async def start(self) -> None:
        """The first of concurrent episodes starts: every probe takes its baseline."""
        for probe in self.probes:
            await probe.start()

    async def enter(self) -> None:
        """An episode (or a server's phases) opens: the first of those open at once
        starts the probes."""
        async with self._lock:
            if not self._open:
                await self.start()
            self._open += 1

    def leave(self) -> None:
        """It has ended (after the probes' last pass): the next first one restarts them."""
        self._open -= 1

    async def unexplained(self) -> Effects:
        """What the probes saw that no call explains since they started, or since the
        last such pass (their ``finish``)."""
        return merge([await p.finish() for p in self.probes])

    async def close(self) -> None:
        for probe in self.probes:
            await probe.close()

    def watch(self) -> Watch:
        """A watch over the calls of one episode (of the server whose phases are held)."""
        return Watch(self, self.phases)


class Watch:
    """The probes' view of one episode's calls, and the effects no call explains."""

    def __init__(self, observers: Observers, phases: ServerPhases | None = None) -> None:
        self._observers = observers
        self._phases = phases
        self._ledger = observers.ledger
        self._unattributed: list[Effects] = []

    async def before(self, call_id: str) -> None:
        """Call ``call_id`` is about to run."""
        self._ledger.enter(call_id)
        for probe in self._observers.probes:
            await probe.before_call(call_id)

    async def after(self, call_id: str, step: ToolCallStep) -> ToolCallStep:
        """The call has ended: ``step`` with the effects attributed to it, and findings."""
        observed = [await p.after_call(call_id) for p in self._observers.probes]
        return self._attributed(call_id, step, observed)

    def open_windows(self, call_id: str) -> None:
        """Like :meth:`before`, for a call its caller runs (every probe is windowed)."""
        windows = self._observers.windows
        if windows is None:
            raise RuntimeError("a probe of this sandbox has no window: await before()")
        self._ledger.enter(call_id)
        for probe in windows:
            probe.open_window(call_id)

    def close_windows(self, call_id: str, step: ToolCallStep) -> ToolCallStep:
        """Like :meth:`after`, for a call opened with :meth:`open_windows`."""
        windows = self._observers.windows
        if windows is None:
            raise RuntimeError("a probe of this sandbox has no window: await after()")
        return self._attributed(call_id, step, [p.close_window(call_id) for p in windows])

    async def abandon(self, call_id: str) -> None:
        """The call ended with no step: what the probes saw during it is unattributed."""
        for probe in self._observers.probes:
            if effects := await probe.after_call(call_id):
                self._unattributed.append(effects)
        self._ledger.leave(call_id)

    def _attributed(
        self, call_id: str, step: ToolCallStep, observed: list[Effects]
    ) -> ToolCallStep:
        overlapped = self._ledger.leave(call_id)
        if not step.effects and not step.findings and not any(observed):
            return step  # nothing seen (the hot path): merging nothing changes nothing
        attributed: list[Effects] = []
        for exact, effects in zip(self._observers.exact, observed, strict=True):
            kept, left = split(effects, exact or not overlapped)
            attributed.append(kept)
            if left:
                self._unattributed.append(left)
        step = msgspec.structs.replace(step, effects=merge(attributed))
        return msgspec.structs.replace(step, findings=call_findings(step))

    async def finish(self) -> Ending:
        """The episode ends: the effects no call explains, and their findings (and, with
        a server's phases, its start-up and shutdown apart)."""
        # Overlapping calls saw each other's changes: each change is reported once (egress
        # carries its call's id and never comes from overlap: every request counts).
        overlap = distinct(merge(self._unattributed)) if self._unattributed else Effects()
        rest = await self._observers.unexplained()
        if self._phases is not None:
            return self._phases.ending(overlap, rest)
        return Ending.of(merge([overlap, rest]))
