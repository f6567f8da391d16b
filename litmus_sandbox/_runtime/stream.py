"""The episode stream a sandbox appends to, and the episode ids it holds.

Records are written whole, one JSON line each, flushed before the write returns (and
fsynced with ``fsync``: then off the event loop, for the writes that may wait). A tool
call's step whose arguments JSON cannot hold is kept, with their ``repr``; arguments over
``max_result_bytes`` are recorded capped; secrets in them are redacted first (the
policy's ``[record]``).

Episode ids are unique in a stream, as written: a second episode of one id would make it
unreadable (an id holding lone surrogates is written with U+FFFD for each, so two ids
that differ only there are one). The ids already in the file are read once, when first
asked; those this sandbox starts are claimed before anything yields.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import anyio
import msgspec

from litmus_sandbox._core.redaction import DEFAULT_REDACTION, Redaction
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.lossless import stand_in_text
from litmus_sandbox._model.records import ToolCallStep
from litmus_sandbox._runtime.tool_calls import write_step
from litmus_sandbox._store.streams import JsonlWriter

#: The episode id of a record as this library writes it (compact JSON).
_EPISODE_ID = re.compile(rb'"episode_id":("(?:[^"\\]|\\.)*")')


class EpisodeStream:
    """Appends records to the episode stream at ``path``.

    Args:
        path: the episode stream (JSON Lines).
        fsync: fsync every record (slower, survives power loss).
        cap: ``max_result_bytes``: a step's arguments larger than this as JSON are
            recorded capped (``write_step``; None: never).
        redaction: what is redacted from a step's arguments before it is written.
    """

    def __init__(
        self,
        path: Path,
        *,
        fsync: bool = False,
        cap: int | None = None,
        redaction: Redaction = DEFAULT_REDACTION,
    ) -> None:
        self.path = path
        self.fsync = fsync
        self.cap = cap
        self.redaction = redaction
        self._writer: JsonlWriter | None = None
        self._ids: set[str] = set()
        self._file_ids: set[str] | None = None  # read from the file when first needed

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    def open(self) -> None:
        """Open the stream for appending.

        Raises:
            ConfigError: the path is a directory, or cannot be opened.
        """
        if self.path.is_dir():
            raise ConfigError(f"episodes {str(self.path)!r} is a directory (give a file)")
        try:
            self._writer = JsonlWriter(self.path, fsync=False)
        except OSError as exc:
            raise ConfigError(f"episodes {str(self.path)!r}: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def write_now(self, record: msgspec.Struct) -> msgspec.Struct:
        """Write ``record`` (fsynced with ``fsync``, blocking); returns it as written (a
        step's arguments redacted, by ``repr`` when JSON cannot hold them, or capped).

        Raises:
            ConfigError: the stream is not open (the sandbox is not).
        """
        if self._writer is None:
            raise ConfigError("the sandbox is not open: use 'async with Sandbox(...)'")
        if isinstance(record, ToolCallStep):
            record = write_step(self._writer.append, record, self.cap, self.redaction)
        else:
            self._writer.write(record)
        if self.fsync:
            self._writer.sync()
        return record

    async def write(self, record: msgspec.Struct) -> msgspec.Struct:
        """Write ``record``; with ``fsync``, in a worker thread (the loop does not block)."""
        if self.fsync:
            return await anyio.to_thread.run_sync(self.write_now, record)
        return self.write_now(record)

    def holds(self, episode_id: str) -> bool:
        """Whether ``episode_id`` is taken: claimed here, or in the file when first asked
        (written by this library)."""
        written = stand_in_text(episode_id)
        return written in self._ids or self._in_file(written)

    def claim(self, episode_id: str) -> None:
        """Take ``episode_id`` for an episode starting now."""
        self._ids.add(stand_in_text(episode_id))

    def release(self, episode_id: str) -> None:
        """Give back ``episode_id``: its episode never started."""
        self._ids.discard(stand_in_text(episode_id))

    def _in_file(self, episode_id: str) -> bool:
        if self._file_ids is None:
            self._file_ids = set()
            try:
                with open(self.path, "rb") as f:
                    for line in f:
                        if (m := _EPISODE_ID.search(line)) is not None:
                            with contextlib.suppress(msgspec.DecodeError):
                                self._file_ids.add(msgspec.json.decode(m.group(1), type=str))
            except OSError:
                pass
        return episode_id in self._file_ids
