"""``litmus-sandbox export otel EPISODES... -o SPANS.otlp.jsonl``: episodes as OTLP traces.

The package's CLI builds the parser from :func:`add_arguments` (this module imports nothing
heavy) and calls :func:`run`; OpenTelemetry is imported only then, so a missing extra is
one line, not a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from litmus_sandbox._model.errors import LitmusError
from litmus_sandbox._model.safe_text import for_terminal


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``export otel``."""
    p.add_argument("episodes", nargs="+", metavar="EPISODES", help="episode streams (JSONL)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="SPANS.otlp.jsonl",
        help="OTLP/JSON to write: one ExportTraceServiceRequest (one trace) per episode",
    )
    p.add_argument(
        "--verdicts",
        metavar="VERDICTS.jsonl",
        help="a verdict stream: each scored step gets a gen_ai.evaluation.result event",
    )
    p.add_argument(
        "--include-content",
        action="store_true",
        help="add gen_ai.tool.call.arguments and gen_ai.tool.call.result (opt-in: may hold "
        "sensitive data)",
    )
    p.add_argument(
        "--service-name",
        default="litmus-sandbox",
        metavar="NAME",
        help="the resource's service.name (default litmus-sandbox)",
    )


def run(args: argparse.Namespace) -> int:
    """Export ``args.episodes`` to ``args.output``; print one summary line.

    Raises:
        ModuleNotFoundError: the extra is missing (the CLI names it in one line).
        LitmusError: ``-o`` names an input, or an input is unreadable.
    """
    inputs = [*args.episodes, *([args.verdicts] if args.verdicts else [])]
    target = Path(args.output)
    if target.is_dir():
        raise LitmusError(f"-o {args.output}: is a directory (give a file to write)")
    for path in inputs:
        if target.exists() and os.path.exists(path) and os.path.samefile(target, path):
            raise LitmusError(f"-o {args.output} is also an input ({path}); write elsewhere")
    from litmus_sandbox._model.records import Verdict
    from litmus_sandbox._store.files import replaced
    from litmus_sandbox._store.streams import ReadWarning, iter_episodes, read_verdicts

    from ._spans import trace_lines

    verdicts: dict[str, Verdict] = {}
    if args.verdicts:
        stream = read_verdicts(args.verdicts)
        verdicts = {v.episode_id: v for v in stream.verdicts if isinstance(v, Verdict)}
    warnings: list[ReadWarning] = []
    traces = 0
    with replaced(args.output) as out:
        for line in trace_lines(
            iter_episodes(args.episodes, warnings),
            verdicts,
            include_content=args.include_content,
            service_name=args.service_name,
        ):
            out.write(line)
            traces += 1
    for w in warnings:
        print(for_terminal(f"litmus-sandbox: {w}"), file=sys.stderr)
    scored = f", {len(verdicts)} verdicts" if args.verdicts else ""
    print(f"exported {traces} traces (one per episode{scored}) -> {args.output}")
    return 0
