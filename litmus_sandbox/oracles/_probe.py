"""The probe protocol: how the sandbox observes side effects, whatever tools claim.

A probe is told when an episode starts and ends and when each tool call starts and ends.
It returns the effects it observed over each call's window; the sandbox attributes them to
the call (or, when calls overlapped, records them as unattributed). Effects a probe finds
at the end of the episode that no call explains come back from :meth:`Probe.finish`.

Adding a probe never touches the recorder: implement these five coroutines.

A probe that observes a call by its time window alone, with nothing to await (the egress
probe: flows are attributed by when they started), may also offer two plain methods,
``open_window(call_id)`` and ``close_window(call_id) -> Effects``, doing what
``before_call`` and ``after_call`` do. Calls that adapters run inline
(``EpisodeRecorder.begin_call``, no task per call) are then observed through them; a
sandbox with any probe lacking them runs every call through the coroutines.
"""

from __future__ import annotations

from typing import Protocol

from litmus_sandbox._model.records import Effects


class Probe(Protocol):
    """Observes one kind of side effect (filesystem, network egress, in-memory state...)."""

    name: str

    async def start(self) -> None:
        """The episode starts: take the baseline observation."""

    async def before_call(self, call_id: str) -> None:
        """A tool call is about to run."""

    async def after_call(self, call_id: str) -> Effects:
        """The call finished: the effects observed since :meth:`before_call`."""
        ...

    async def finish(self) -> Effects:
        """The episode ends: effects no call explains (a full verification pass)."""
        ...

    async def close(self) -> None:
        """Release watchers, sockets and threads."""
