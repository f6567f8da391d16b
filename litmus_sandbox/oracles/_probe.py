"""The probe protocol: how the sandbox observes side effects, whatever tools claim.

A probe is told when an episode starts and ends and when each tool call starts and ends.
It returns the effects it observed over each call's window; the sandbox attributes them to
the call (or, when calls overlapped, records them as unattributed). Effects a probe finds
at the end of the episode that no call explains come back from :meth:`Probe.finish`.

Adding a probe never touches the recorder: implement :class:`Probe`'s five coroutines.

A probe may also offer optional features, each a protocol of its own that the sandbox
tests once, with ``isinstance``, when it is made:

* :class:`WindowedProbe` - observes a call by its time window alone, with nothing to
  await (the egress probe: flows are attributed by when they started):
  ``open_window(call_id)`` and ``close_window(call_id) -> Effects`` do what
  ``before_call`` and ``after_call`` do. Calls that adapters run inline
  (``EpisodeRecorder.begin_call``, no task per call) are observed through them; a sandbox
  with any probe lacking them runs every call through the coroutines.
* :class:`AttributingProbe` - ``exact_attribution``: True when every effect the probe
  sees names its call, so it is kept even when calls overlapped (without it, or False,
  what the probe saw during overlapping calls is recorded as unattributed).
* :class:`DescribedProbe` - ``describe()``: how the probe watches, for the episode
  header's ``oracles`` (without it: ``{}``).
* :class:`FilteringProbe` - ``ignore(path)``: leave a path out of what is observed (the
  sandbox's own files: the episode stream, a cassette it grows, the proxy's socket).
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class WindowedProbe(Probe, Protocol):
    """A probe that observes a call by its time window alone (no awaiting)."""

    def open_window(self, call_id: str) -> None:
        """What :meth:`Probe.before_call` does, for a call run out of the sandbox's task."""

    def close_window(self, call_id: str) -> Effects:
        """What :meth:`Probe.after_call` does: the effects seen since :meth:`open_window`."""
        ...


@runtime_checkable
class AttributingProbe(Probe, Protocol):
    """A probe that says whether each effect it sees names the call that made it."""

    #: True: what this probe attributes is kept even when calls overlapped.
    exact_attribution: bool


@runtime_checkable
class DescribedProbe(Probe, Protocol):
    """A probe that says how it watches, in the episode header."""

    def describe(self) -> Any:
        """How this probe watches (JSON-able, a table as a rule), for ``oracles``."""


@runtime_checkable
class FilteringProbe(Probe, Protocol):
    """A probe that observes paths and can be told to leave one out."""

    def ignore(self, path: str | os.PathLike[str]) -> None:
        """Leave ``path`` out of what is observed (it is the sandbox's own file)."""
