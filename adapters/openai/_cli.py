"""``litmus-sandbox import openai-chat|openai-responses FILE... -o EPISODES.jsonl``.

The package's CLI adds the parsers (``import KIND``, ``litmus_sandbox._cli.main``) and
calls :func:`run`, importing this module only when the command runs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from litmus_sandbox._model.errors import LitmusError

from ._transcripts import APIS, import_transcripts


def _refuse_input_as_output(output: str, inputs: Sequence[str]) -> None:
    """Writing ``output`` must not destroy a transcript it reads.

    Raises:
        LitmusError: ``output`` is a directory, or the same file as one of ``inputs``.
    """
    if os.path.isdir(output):
        raise LitmusError(f"-o {output}: is a directory (give a file to write)")
    for path in inputs:
        same = os.path.abspath(path) == os.path.abspath(output)
        if not same and os.path.exists(output) and os.path.exists(path):
            same = os.path.samefile(output, path)
        if same:
            raise LitmusError(
                f"-o {output} is also an input ({path}): writing it would destroy that "
                "input; write somewhere else"
            )


def run(args: argparse.Namespace) -> int:
    """Import ``args.logs`` (transcripts of the API ``args.kind`` names) into
    ``args.output``; print one summary line.

    Raises:
        LitmusError: ``-o`` names an input, or a line is not a transcript (``file:line``).
    """
    _refuse_input_as_output(args.output, args.logs)
    api = APIS[args.kind]
    stats = import_transcripts(args.logs, args.output, api=api)
    truncated = f", {stats.truncated} truncated (calls without a result)" if stats.truncated else ""
    print(
        f"imported {stats.episodes} episodes ({stats.steps} steps) from {stats.files} "
        f"{'chat' if api == 'chat' else 'Responses'} transcript files{truncated} -> {args.output}"
    )
    return 0
