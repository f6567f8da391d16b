"""Reading finished Inspect logs (``.eval`` and ``.json``) into episode streams.

Logs are read through ``inspect_ai.log`` only: an ``.eval`` log is a zip file with zstd
members, which the standard library cannot read. Samples are streamed one at a time
(``read_eval_log_samples``), attachments resolved, and those a log of an unfinished run
lacks are skipped rather than refused (``all_samples_required=False``). A file that is not
an Inspect log is one clear :class:`~litmus_sandbox.LitmusError`, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
from inspect_ai.log import EvalSample, EvalSpec, read_eval_log, read_eval_log_samples

from litmus_sandbox import LitmusError
from litmus_sandbox._core.redaction import DEFAULT_REDACTION, redact_records
from litmus_sandbox._model.codec import encode
from litmus_sandbox._store.files import replaced

from ._episodes import sample_episode

#: The log formats Inspect writes, by file suffix.
FORMATS = {".eval": "eval", ".json": "json"}


class ImportStats(msgspec.Struct, kw_only=True):
    """What an import wrote."""

    logs: int = 0
    episodes: int = 0
    steps: int = 0
    truncated: int = 0
    #: Samples found again in a later log (an ``.eval`` and its ``.json``, or the samples
    #: ``inspect eval-retry`` carries over): imported once, from the first log.
    repeated: int = 0


def _format(path: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise LitmusError(f"{path}: not an Inspect log (expected a .eval or .json file)")
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file or directory", path)
    if not os.path.isfile(path):
        raise LitmusError(f"{path}: not a regular file")
    return FORMATS[suffix]


def log_samples(path: str) -> Iterator[tuple[EvalSpec, EvalSample]]:
    """The eval spec and each sample (one per sample id and epoch) of the log at ``path``.

    Raises:
        LitmusError: ``path`` is not an Inspect log (or is one Inspect cannot read).
        OSError: ``path`` cannot be opened.
    """
    fmt = _format(path)
    try:
        header = read_eval_log(path, header_only=True, format=fmt)  # type: ignore[arg-type]
        samples = read_eval_log_samples(
            path,
            all_samples_required=False,
            resolve_attachments=True,
            format=fmt,  # type: ignore[arg-type]
        )
        first = next(samples, None)
    except OSError:
        raise
    except Exception as exc:  # zip, zstd, JSON or schema errors: all mean "not a log"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LitmusError(f"{path}: not an Inspect log ({reason[:200]})") from None
    if first is None:
        return
    yield header.eval, first
    for sample in samples:
        yield header.eval, sample


def import_logs(paths: Sequence[str], output: str | os.PathLike[str]) -> ImportStats:
    """Write one episode per (sample id, epoch) of each log in ``paths`` to ``output``.

    The stream is written beside ``output`` and moved into place once every log has been
    read: a log that cannot be read leaves ``output`` as it was.

    Raises:
        LitmusError: a file is not an Inspect log.
        OSError: a file cannot be read, or ``output`` cannot be written.
    """
    stats = ImportStats()
    seen: set[str] = set()
    with replaced(output) as out:
        for path in paths:
            stats.logs += 1
            for spec, sample in log_samples(path):
                episode = sample_episode(spec, sample, log=os.path.abspath(path))
                if episode.header.episode_id in seen:
                    stats.repeated += 1  # one episode id in a stream once
                    continue
                seen.add(episode.header.episode_id)
                records = redact_records(episode.records(), DEFAULT_REDACTION)
                out.write(b"".join(encode(r) for r in records))
                stats.episodes += 1
                stats.steps += len(episode.steps)
                stats.truncated += episode.header.recorder.truncated
    return stats
