"""Serving tool results from recorded episodes (the ``replay`` fidelity mode).

A :class:`Cassette` holds the tool calls of recorded episodes. A call matches a recorded
call with the same tool name and the same arguments compared as JSON values (key order is
irrelevant); repeated identical calls are served in recorded order, each at most once.
"""

from __future__ import annotations

import os
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from typing import Any

from ._codec import canonical_json
from ._records import Episode, ToolCallStep
from ._store import read_episodes


def call_key(tool: str, args: Any) -> tuple[str, bytes]:
    """The identity a replay matches on: tool name and canonical JSON of the arguments."""
    return tool, canonical_json(args)


class Cassette:
    """Recorded tool calls, served at most once each, in recorded order."""

    def __init__(self, episodes: Iterable[Episode]) -> None:
        self._queues: dict[tuple[str, bytes], deque[tuple[str, ToolCallStep]]] = defaultdict(deque)
        self.size = 0
        for ep in episodes:
            for step in ep.steps:
                if isinstance(step, ToolCallStep):
                    self._queues[call_key(step.tool, step.args)].append((ep.episode_id, step))
                    self.size += 1

    @classmethod
    def from_files(cls, paths: Sequence[str | os.PathLike[str]]) -> Cassette:
        return cls(read_episodes(paths))

    def take(self, tool: str, args: Any) -> tuple[str, ToolCallStep] | None:
        """The next unused recorded call matching ``tool(**args)``, or None."""
        queue = self._queues.get(call_key(tool, args))
        if not queue:
            return None
        return queue.popleft()

    def unused(self) -> list[tuple[str, ToolCallStep]]:
        """Recorded calls never served, in no particular order."""
        return [item for q in self._queues.values() for item in q]
