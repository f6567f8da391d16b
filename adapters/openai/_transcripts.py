"""``import openai-chat|openai-responses``: transcripts (JSON Lines) as episode streams.

One line per case: ``{"case_id", "agent"?, "suite"?, "messages": [...]}`` (chat) or
``{"case_id", ..., "input": [...]}`` (Responses). Lines are read through the stores'
bounded reader (a regular file, a cap on a line); a line that is not a transcript of the
kind asked for is one :class:`~litmus_sandbox.RecordDecodeError` naming ``file:line``
and, where it can, the JSON path. The stream is written beside the output and moved into
place once every file has been read: a bad line leaves the output as it was.

An episode's id is derived from the line's bytes and number, so importing the same file
again gives the same ids.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import msgspec

from litmus_sandbox._core.redaction import DEFAULT_REDACTION, redact_records
from litmus_sandbox._model.codec import encode
from litmus_sandbox._model.errors import RecordDecodeError
from litmus_sandbox._store.files import decode_utf8, iter_lines, open_input, replaced

from ._shapes import ShapeError, chat_conversation, response_conversation
from ._steps import TranscriptEpisode, transcript_episode

#: ``import KIND`` -> the API whose transcripts it reads.
APIS = {"openai-chat": "chat", "openai-responses": "responses"}


class _Line(msgspec.Struct):
    case_id: str | int
    agent: str | None = None
    suite: str | None = None
    messages: list[Any] | None = None
    input: list[Any] | str | None = None


_decoder = msgspec.json.Decoder(_Line)


class ImportStats(msgspec.Struct, kw_only=True):
    """What an import wrote."""

    files: int = 0
    episodes: int = 0
    steps: int = 0
    truncated: int = 0


def line_episode(path: str, lineno: int, raw: bytes, api: str) -> TranscriptEpisode:
    """The episode of one transcript line.

    Raises:
        RecordDecodeError: the line is not a transcript of ``api`` (names ``path:lineno``).
    """
    decode_utf8(raw, path, lineno)
    try:
        line = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise RecordDecodeError(path, lineno, f"not a transcript: {exc}") from None
    field = "messages" if api == "chat" else "input"
    other = "input" if api == "chat" else "messages"
    value = line.messages if api == "chat" else line.input
    if value is None:
        hint = ""
        if getattr(line, other) is not None:
            kind = "openai-responses" if api == "chat" else "openai-chat"
            hint = f" (a line with {other!r} is imported by 'import {kind}')"
        raise RecordDecodeError(path, lineno, f"no {field!r} in the transcript{hint}")
    skipped: dict[str, int] = {}
    digest = hashlib.sha256(b"%d\n" % lineno + raw.rstrip(b"\r\n")).hexdigest()[:32]
    try:
        turns = (
            chat_conversation(value)
            if api == "chat"
            else response_conversation(value, skipped=skipped)
        )
        return transcript_episode(
            f"openai-{digest}",
            str(line.case_id),
            turns,
            api=api,
            agent=line.agent,
            suite=line.suite,
            source={"file": os.path.abspath(path), "line": lineno},
            skipped=skipped,
        )
    except ShapeError as exc:
        raise RecordDecodeError(path, lineno, str(exc)) from None


def import_transcripts(
    paths: Sequence[str], output: str | os.PathLike[str], *, api: str
) -> ImportStats:
    """Write one episode per transcript line of each file in ``paths`` to ``output``.

    Args:
        paths: JSON Lines files of transcripts.
        output: the episode stream to write (replaced once everything was read).
        api: ``chat`` (lines with ``messages``) or ``responses`` (lines with ``input``).

    Raises:
        RecordDecodeError: a file is not a regular file, or a line is not a transcript.
        OSError: ``output`` cannot be written.
    """
    if api not in APIS.values():
        raise ValueError(f"api is 'chat' or 'responses', not {api!r}")
    stats = ImportStats()
    with replaced(output) as out:
        for path in paths:
            stats.files += 1
            with open_input(path) as f:
                for lineno, raw, _ in iter_lines(f, path):
                    if not raw.strip():
                        continue
                    episode = line_episode(path, lineno, raw, api)
                    records = redact_records(episode.records(), DEFAULT_REDACTION)
                    out.write(b"".join(encode(r) for r in records))
                    stats.episodes += 1
                    stats.steps += len(episode.steps)
                    stats.truncated += episode.header.recorder.truncated
    return stats
