"""Cassettes on disk: loading recorded episodes, and growing them (``record-new``).

A :class:`Cassette` holds the recorded episodes that serve tools in ``replay`` mode. The
matching itself is sans-io (``_replay_match.py``), and so is the choice of which recorded
episode replays which new one (``_divergence.py``); this module does the I/O around them:
reading episode streams, and appending the calls a ``record-new`` replay executed for
real to the cassette file, as a supplement episode per replayed episode (a header, one
step per new call, an end), which every episode-stream reader accepts.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from litmus_sandbox._core.divergence import META_KEY, session_for
from litmus_sandbox._core.redaction import DEFAULT_REDACTION, Redaction, stamp_header
from litmus_sandbox._core.replay_match import OptionsFor, ReplayOptions, ReplaySession, Served
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.lossless import restore_original
from litmus_sandbox._model.records import (
    SCHEMA_VERSION,
    Episode,
    EpisodeEnd,
    EpisodeHeader,
    ReplaySource,
    ToolCallStep,
)
from litmus_sandbox._runtime.tool_calls import write_step
from litmus_sandbox._store.streams import JsonlWriter, ReadWarning, RecordingWarning, read_episodes

_ANY = ReplayOptions()


class _Supplement:
    def __init__(self, episode_id: str) -> None:
        self.episode_id = episode_id
        self.steps = 0


class Cassette:
    """Recorded episodes that serve tool calls, and the file ``record-new`` grows.

    Args:
        episodes: the recorded episodes (file order matters: see ``_divergence.py``).
        record_to: the episode stream ``record-new`` appends to (None: ``record-new``
            is a configuration error).
        fsync: fsync every record appended.
    """

    def __init__(
        self,
        episodes: Iterable[Episode],
        *,
        record_to: str | os.PathLike[str] | None = None,
        fsync: bool = False,
    ) -> None:
        # As they were recorded: a call matches, and is served, the original values
        # (text holding lone surrogates, bytes), not their stand-ins.
        self.episodes: tuple[Episode, ...] = tuple(restore_original(ep) for ep in episodes)
        self.record_to = Path(record_to) if record_to is not None else None
        self.fsync = fsync
        self.size = sum(1 for ep in self.episodes for s in ep.steps if isinstance(s, ToolCallStep))
        self.warnings: list[ReadWarning] = []
        self._runs: dict[str, int] = {}
        self._default: ReplaySession | None = None
        self._writer: JsonlWriter | None = None
        self._supplements: dict[str, _Supplement] = {}
        self._index: dict[tuple[str, int], ToolCallStep] | None = None

    @classmethod
    def from_files(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        *,
        record_to: str | os.PathLike[str] | None = None,
        fsync: bool = False,
    ) -> Cassette:
        """Read recorded episode streams; ``record-new`` appends to ``record_to``, by
        default the first file.

        Raises:
            RecordDecodeError: a bad line (named ``file:line``) or an unreadable file.
            NewerVersionError: a record written by a newer schema version.
        """
        warnings: list[ReadWarning] = []
        episodes = read_episodes(paths, warnings, suite=False)  # a library of cases
        target = record_to if record_to is not None else (paths[0] if paths else None)
        cassette = cls(episodes, record_to=target, fsync=fsync)
        cassette.warnings = warnings
        return cassette

    @classmethod
    def load(
        cls, replay: Sequence[str | os.PathLike[str]] | Cassette, *, fsync: bool, stacklevel: int
    ) -> Cassette:
        """``replay`` itself if a cassette, else read from its files, each tolerated read
        problem issued as a :class:`RecordingWarning` (``stacklevel`` as for ``warn``)."""
        if isinstance(replay, Cassette):
            return replay
        cassette = cls.from_files(replay, fsync=fsync)
        for w in cassette.warnings:
            warnings.warn(str(w), RecordingWarning, stacklevel=stacklevel + 1)
        return cassette

    def step(self, episode_id: str, index: int) -> ToolCallStep | None:
        """The recorded tool call at ``episode_id``'s step ``index`` (a replay's source)."""
        if self._index is None:
            self._index = {
                (s.episode_id, s.index): s
                for ep in self.episodes
                for s in ep.steps
                if isinstance(s, ToolCallStep)
            }
        return self._index.get((episode_id, index))

    def tools(self) -> list[str]:
        """The tools the recording called, in the order first seen."""
        seen: dict[str, None] = {}
        for ep in self.episodes:
            for step in ep.steps:
                if isinstance(step, ToolCallStep):
                    seen.setdefault(step.tool)
        return list(seen)

    def session(
        self, case_id: str, options_for: OptionsFor, redaction: Redaction | None = None
    ) -> tuple[ReplaySession, tuple[str, ...]]:
        """A replay session for the next new episode of ``case_id``, and its source ids.

        The n-th session of a case replays the n-th recorded episode of that case
        (cycling); a case the cassette never recorded replays every episode as one pool.
        With ``redaction``, live and recorded arguments are compared redacted.
        """
        nth = self._runs.get(case_id, 0)
        self._runs[case_id] = nth + 1
        return session_for(self.episodes, case_id, nth, options_for, redaction)

    # ------------------------------------------------------------ the simple API

    def take(self, tool: str, args: Any) -> tuple[str, ToolCallStep] | None:
        """The next unused recorded call matching ``tool(**args)`` anywhere in the
        cassette (``any`` order, nothing ignored), or None."""
        if self._default is None:
            self._default = ReplaySession(
                [s for ep in self.episodes for s in ep.steps if isinstance(s, ToolCallStep)],
                lambda _tool: _ANY,
            )
        outcome = self._default.match(tool, args)
        if isinstance(outcome, Served):
            return outcome.recorded.episode_id, outcome.recorded
        return None

    def unused(self) -> list[tuple[str, ToolCallStep]]:
        """Recorded calls :meth:`take` never served, in recorded order."""
        steps = {
            (s.episode_id, s.index): s
            for ep in self.episodes
            for s in ep.steps
            if isinstance(s, ToolCallStep)
        }
        if self._default is None:
            return [(eid, s) for (eid, _), s in steps.items()]
        return [(r.episode_id, steps[(r.episode_id, r.step)]) for r in self._default.unused()]

    # ------------------------------------------------------------ record-new

    def record(
        self,
        live: EpisodeHeader,
        sources: Sequence[str],
        step: ToolCallStep,
        redaction: Redaction = DEFAULT_REDACTION,
    ) -> ReplaySource:
        """Append a call executed for real on a ``record-new`` miss; returns where it went.

        The first call of a live episode opens its supplement episode in the cassette
        file (see the module docstring); its arguments are redacted as the live
        episode's (``redaction``).

        Raises:
            ConfigError: the cassette has no file to grow.
            OSError: the file cannot be written.
        """
        if self.record_to is None:
            raise ConfigError(
                "replay on_miss = 'record-new' needs a cassette file to append to "
                "(Cassette.from_files(...) or Cassette(..., record_to=PATH))"
            )
        if self._writer is None:
            self._writer = JsonlWriter(self.record_to, fsync=self.fsync)
        sup = self._supplements.get(live.episode_id)
        if sup is None:
            sup = self._supplements[live.episode_id] = _Supplement(uuid.uuid4().hex)
            header = EpisodeHeader(
                v=SCHEMA_VERSION,
                episode_id=sup.episode_id,
                case_id=live.case_id,
                suite=live.suite,
                agent=live.agent,
                started_at=datetime.now(UTC).isoformat(),
                recorder=live.recorder,
                tool_modes=live.tool_modes,
                meta={META_KEY: {"supplements": list(sources), "recorded_by": live.episode_id}},
            )
            self._writer.write(stamp_header(header, redaction))
        index = sup.steps
        # Its meta as recorded live (what an adapter kept of the answer, repr_only...),
        # without the live episode's replay facts.
        meta = {k: v for k, v in step.meta.items() if k != META_KEY}
        write_step(
            self._writer.append,
            msgspec.structs.replace(step, episode_id=sup.episode_id, index=index, meta=meta),
            redaction=redaction,
        )
        sup.steps += 1
        return ReplaySource(episode_id=sup.episode_id, step=index)

    def finish(self, live_episode_id: str) -> None:
        """End the supplement episode of a live episode, if it has one."""
        sup = self._supplements.pop(live_episode_id, None)
        if sup is None or self._writer is None:
            return
        self._writer.write(
            EpisodeEnd(
                v=SCHEMA_VERSION,
                episode_id=sup.episode_id,
                status="complete",
                steps=sup.steps,
                at=datetime.now(UTC).isoformat(),
            )
        )

    def close(self) -> None:
        """End every open supplement and close the cassette file."""
        for live in list(self._supplements):
            self.finish(live)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
