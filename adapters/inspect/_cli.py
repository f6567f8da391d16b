"""``litmus-sandbox import inspect LOG... -o EPISODES.jsonl``: finished Inspect logs as episodes.

The package's CLI adds the parser (``import KIND``, ``litmus_sandbox._cli.main``) and calls
:func:`run`, importing this module only when the command runs. Inspect itself is imported
only inside :func:`run`, so a missing extra is one line, not a traceback.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from litmus_sandbox import LitmusError


def _refuse_input_as_output(output: str, inputs: Sequence[str]) -> None:
    """Writing ``output`` must not destroy a log it reads.

    Raises:
        LitmusError: ``output`` is a directory, or the same file as one of ``inputs``.
    """
    if os.path.isdir(output):
        raise LitmusError(f"-o {output}: is a directory (give a file to write)")
    for path in inputs:
        same = os.path.abspath(path) == os.path.abspath(output)
        if not same and os.path.exists(output):
            try:
                same = os.path.samefile(output, path)
            except OSError:
                continue  # reported when it is read
        if same:
            raise LitmusError(
                f"-o {output} is also an input ({path}): writing it would destroy that "
                "input; write somewhere else"
            )


def run(args: argparse.Namespace) -> int:
    """Import ``args.logs`` into ``args.output``; print one summary line.

    Raises:
        ModuleNotFoundError: the extra is missing (the CLI names it in one line).
        LitmusError: ``-o`` names an input, or a file is not an Inspect log.
    """
    _refuse_input_as_output(args.output, args.logs)
    from ._logs import import_logs

    stats = import_logs(args.logs, args.output)
    truncated = f", {stats.truncated} truncated by a limit" if stats.truncated else ""
    repeated = (
        f", {stats.repeated} found again in a later log (imported once)" if stats.repeated else ""
    )
    print(
        f"imported {stats.episodes} episodes ({stats.steps} steps) from {stats.logs} "
        f"Inspect logs{truncated}{repeated} -> {args.output}"
    )
    return 0
