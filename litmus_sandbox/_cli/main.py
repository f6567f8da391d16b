"""The ``litmus-sandbox`` command line. An edge: nothing in the package imports it.

Exit codes: 0 nothing blocks; 1 at least one REGRESSION; 4 no regression but unresolved
cases (unless ``--allow-unresolved``); 5 nothing was compared, no case on either side
(unless ``--allow-empty``); 2 bad usage or unreadable input, reported as one
line naming the file and line, never a traceback (an empty episode or verdict file too,
unless ``--allow-empty-input``: ``_cli/inputs.py``); 6 the judge gave no verdict for some
steps (``score``, ``rebaseline``, ``gate --candidate-episodes``: one line per failure
class). ``replay --check`` and ``diff`` (in ``_cli/replay.py``) exit 1 on a divergence or
a difference.

The parser of ``--help`` and ``--version`` names the commands only (:data:`COMMANDS`):
each command's modules (reports, judges, stores) are imported when it is parsed or run.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from litmus_sandbox._cli.parser import Parser
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.errors import LitmusError, missing_extra

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

# 1 (a regression), 4 (unresolved) and 5 (nothing compared) come from GateSummary.exit_code().
EXIT_OK, EXIT_USAGE = 0, 2
#: litmus-sandbox itself failed (a bug): distinct from 1, which always means a regression.
EXIT_INTERNAL = 3
#: Interrupted (Ctrl-C), as a shell reports a command SIGINT stopped.
EXIT_INTERRUPTED = 130
#: What ``litmus-sandbox --help`` says of the exit codes (each command's help says its own).
EXIT_CODES = (
    "exit codes: 0 nothing blocks; 1 a REGRESSION (gate), a divergence (replay --check), a "
    "difference (diff); 2 bad usage, unreadable input or an empty one (one line naming "
    "the file and line; --allow-empty-input accepts an empty one); 3 litmus-sandbox "
    "itself failed (a bug); 4 NEEDS_REBASELINE / NEEDS_RERUN cases and no regression "
    "(gate, unless --allow-unresolved); 5 nothing was compared (gate, "
    "unless --allow-empty); 6 the judge gave no verdict for some steps (score, rebaseline, "
    "gate --candidate-episodes); 130 interrupted (Ctrl-C), or stopped by a signal (proxy mcp)."
)
#: Each command and its one-line help, in the order ``--help`` lists them.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("score", "score episodes into a verdict stream"),
    ("gate", "compare candidate verdicts with a baseline"),
    ("rebaseline", "re-score baseline recordings like the candidate"),
    ("replay", "check that episodes followed a recording (divergence report)"),
    ("diff", "compare two episodes step by step"),
    ("show", "print an episode's timeline: steps, fidelity, refusals, effects, findings"),
    ("import", "turn other harnesses' logs into episode streams"),
    ("export", "write episodes in other tools' formats"),
    ("run", "run other harnesses' workloads, recorded"),
    ("proxy", "record the tool calls of existing MCP servers (proxy mcp --help)"),
    ("demo", "run the built-in adversarial demo (no network, no model)"),
)
_HELP = dict(COMMANDS)


def cmd_score(args: argparse.Namespace) -> int:
    from litmus_sandbox._cli.commands import cmd_score as run

    return run(args)


def cmd_gate(args: argparse.Namespace) -> int:
    from litmus_sandbox._cli.commands import cmd_gate as run

    return run(args)


def cmd_rebaseline(args: argparse.Namespace) -> int:
    from litmus_sandbox._cli.commands import cmd_rebaseline as run

    return run(args)


def _add_cache_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache",
        metavar="URL",
        help="step-verdict cache: a SQLite PATH or sqlite:///PATH, or redis://HOST:PORT/DB "
        "(extra redis) shared by a cluster; default $LITMUS_CACHE or "
        "~/.cache/litmus-sandbox/verdicts.sqlite",
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the cache")


def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="where to judge: in this process (default), or on a Ray cluster (extra ray), "
        "in tasks of --steps-per-task steps, through a cache every worker reaches",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --engine ray: the cluster (HOST:PORT of its head, or auto); default "
        "$RAY_ADDRESS, else the cluster running on this machine",
    )
    p.add_argument(
        "--steps-per-task",
        type=int,
        metavar="N",
        help="with --engine ray: recorded steps per Ray task (consecutive whole episodes; "
        "default 1000)",
    )


def _add_quiet_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar while judging (there is none unless stderr is a terminal)",
    )


# ---------------------------------------------------------------- main


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"litmus-sandbox {package_version()}")  # on stdout, as argparse's own
        parser.exit()


def build_parser(full: bool = True) -> argparse.ArgumentParser:
    """The command line's parser; with ``full=False`` the commands are only named (what
    ``--help`` and ``--version`` need), so their modules are not imported."""
    parser = Parser(
        prog="litmus-sandbox",
        description="Record agent runs honestly, score them, and gate only what is comparable.",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    if not full:
        for name, help_ in COMMANDS:
            sub.add_parser(name, help=help_)
        return parser
    from litmus_sandbox import reports
    from litmus_sandbox._cli.gate import EPILOG as GATE_EPILOG
    from litmus_sandbox._cli.gate import add_gate_flags
    from litmus_sandbox._cli.inputs import add_allow_empty_input
    from litmus_sandbox._cli.replay import add_parsers as add_replay_parsers
    from litmus_sandbox._cli.show import add_parser as add_show_parser

    p = sub.add_parser("score", help=_HELP["score"])
    p.add_argument("episodes", nargs="+", metavar="EPISODES", help="episode stream files (JSONL)")
    p.add_argument("--policy", required=True, metavar="POLICY.toml", help="scoring policy file")
    p.add_argument(
        "-o", "--output", required=True, metavar="VERDICTS.jsonl", help="verdict stream to write"
    )
    add_allow_empty_input(p, "an EPISODES file", " (with none at all, 0 episodes are scored)")
    _add_cache_flags(p)
    _add_engine_flags(p)
    _add_quiet_flag(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("gate", help=_HELP["gate"], epilog=GATE_EPILOG)
    p.add_argument(
        "--baseline", required=True, nargs="+", metavar="B", help="baseline verdict stream(s)"
    )
    p.add_argument("--candidate", nargs="+", metavar="C", help="candidate verdict stream(s)")
    p.add_argument(
        "--candidate-episodes",
        nargs="+",
        metavar="E",
        help="candidate recordings, scored now under --policy (through the cache) instead "
        "of --candidate",
    )
    p.add_argument(
        "--policy",
        metavar="POLICY.toml",
        help="the scoring policy of --candidate-episodes",
    )
    p.add_argument(
        "--format", choices=reports.FORMATS, default="table", help="report format (default table)"
    )
    p.add_argument("--exclude", metavar="FILE", help="case ids to exclude, each with a reason")
    p.add_argument(
        "--allow-unresolved",
        action="store_true",
        help="exit 0 (not 4) when cases are NEEDS_REBASELINE / NEEDS_RERUN but none regressed",
    )
    p.add_argument(
        "--strict-oracle",
        action="store_true",
        help="block (exit 1) on cases whose judge contradicts a forbidden oracle finding",
    )
    p.add_argument(
        "--baseline-episodes",
        nargs="+",
        metavar="E",
        help="baseline recordings, for exact re-score costs in the re-baseline plan",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of stdout")
    p.add_argument(
        "--html",
        metavar="REPORT.html",
        help="also write a self-contained HTML report here (with the timelines of "
        "--baseline-episodes / --candidate-episodes)",
    )
    add_gate_flags(p)
    add_allow_empty_input(
        p,
        "a verdict or episode file",
        " (then --allow-empty decides whether nothing compared passes)",
    )
    _add_cache_flags(p)
    _add_engine_flags(p)
    _add_quiet_flag(p)
    p.set_defaults(func=cmd_gate)

    p = sub.add_parser("rebaseline", help=_HELP["rebaseline"])
    p.add_argument(
        "--episodes", required=True, nargs="+", metavar="E", help="baseline episode streams"
    )
    p.add_argument(
        "--like",
        metavar="CANDIDATE_VERDICTS",
        help="score like this verdict stream (its policy record)",
    )
    p.add_argument(
        "--policy",
        metavar="POLICY.toml",
        help="policy file to score with; with --like it must match the candidate's fingerprints",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="NEW_BASELINE.jsonl",
        help="verdict stream to write",
    )
    add_allow_empty_input(p, "an --episodes file", " (--like never: its policy is read)")
    _add_cache_flags(p)
    _add_engine_flags(p)
    _add_quiet_flag(p)
    p.set_defaults(func=cmd_rebaseline)
    add_replay_parsers(sub)
    add_show_parser(sub)
    _add_import_parsers(sub)
    _add_adapter_group(sub, "export", _HELP["export"], EXPORTERS)
    _add_adapter_group(sub, "run", _HELP["run"], RUNNERS)
    # Listed for --help only: main() hands "proxy ..." to the adapter's own parser.
    p = sub.add_parser("proxy", help=_HELP["proxy"])
    p.add_argument("kind", choices=["mcp"], help="the kind of tool server")

    p = sub.add_parser(
        "demo",
        help=_HELP["demo"],
        description="Record a scripted agent's two versions against real tools, score and "
        "gate them, and name the HTML report to open. Each run replaces the files of the "
        "run before it in the folder it writes to.",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder for episodes, verdicts and reports (default: the demo's own, "
        "$XDG_CACHE_HOME/litmus-sandbox/demo or ~/.cache/litmus-sandbox/demo, the same at "
        "every run)",
    )
    p.set_defaults(func=cmd_demo)
    return parser


#: ``import KIND``: the adapter module that turns another harness's logs into episodes,
#: by kind, and what it reads. Each module has ``run(args)``; it is imported only when its
#: command runs, so other commands never load the harness.
IMPORTERS: dict[str, tuple[str, str]] = {
    "inspect": ("litmus_sandbox.adapters.inspect._cli", "Inspect AI logs (.eval or .json)"),
    "openai-chat": (
        "litmus_sandbox.adapters.openai._cli",
        "OpenAI chat transcripts (JSONL: case_id, messages)",
    ),
    "openai-responses": (
        "litmus_sandbox.adapters.openai._cli",
        "OpenAI Responses transcripts (JSONL: case_id, input)",
    ),
}


def _add_import_parsers(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser("import", help=_HELP["import"])
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND", parser_class=Parser)
    for kind, (module, what) in IMPORTERS.items():
        k = kinds.add_parser(kind, help=f"import {what}")
        k.add_argument("logs", nargs="+", metavar="LOG", help=what)
        k.add_argument(
            "-o",
            "--output",
            required=True,
            metavar="EPISODES.jsonl",
            help="episode stream to write",
        )
        _add_quiet_flag(k)
        k.set_defaults(func=cmd_import, importer=module)


#: ``export KIND``: the adapter module of each kind, and what it writes. Its
#: ``add_arguments(parser)`` adds the kind's flags (the module imports nothing heavy: it is
#: imported to build the parser) and ``run(args)`` runs it.
EXPORTERS: dict[str, tuple[str, str]] = {
    "otel": ("litmus_sandbox.adapters.otel._cli", "OpenTelemetry traces (OTLP/JSON)"),
}
#: ``run KIND``: as :data:`EXPORTERS`, for the workloads of other harnesses.
RUNNERS: dict[str, tuple[str, str]] = {
    "agentdojo": (
        "litmus_sandbox.adapters.agentdojo._cli",
        "AgentDojo suites, every call recorded",
    ),
}


def _add_adapter_group(
    sub: argparse._SubParsersAction[Parser],
    command: str,
    what: str,
    table: dict[str, tuple[str, str]],
) -> None:
    import importlib

    from litmus_sandbox._cli.inputs import add_allow_empty_input

    p = sub.add_parser(command, help=what)
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND", parser_class=Parser)
    for kind, (module, help_) in table.items():
        k = kinds.add_parser(kind, help=help_)
        importlib.import_module(module).add_arguments(k)
        if command == "export":  # they read episode (and verdict) streams: see cmd_import
            add_allow_empty_input(k, "an EPISODES or --verdicts file")
        k.set_defaults(func=cmd_import, importer=module)


def cmd_import(args: argparse.Namespace) -> int:
    import importlib

    module = importlib.import_module(args.importer)
    if args.command == "export":  # an exporter's streams are refused empty as every reader's
        from litmus_sandbox._cli.inputs import require_records

        allow = args.allow_empty_input
        require_records(getattr(args, "episodes", ()), "episodes", allow=allow)
        require_records(
            [getattr(args, "verdicts", None)], "verdicts", allow=allow, arg="--verdicts"
        )
    if args.command != "import":  # export, run: the adapter shows what it does
        code: int = module.run(args)
        return code
    from litmus_sandbox._cli.progress import status
    from litmus_sandbox.reports._shared import plural

    with status(f"importing {plural(len(args.logs), 'log')} ({args.kind})", quiet=args.quiet):
        code = module.run(args)
    return code


def _check_gate_candidate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``gate`` takes the candidate's verdicts, or its recordings and a policy to score them
    now. Recordings beside verdicts only show (the HTML report's timelines)."""
    if not args.candidate and not args.candidate_episodes:
        parser.error(
            "the following arguments are required: --candidate "
            "(or --candidate-episodes E... --policy P to score the candidate now)"
        )
    if args.candidate_episodes and not args.candidate and not args.policy:
        parser.error(
            "gate --candidate-episodes without --candidate needs --policy POLICY.toml to score them"
        )
    if args.policy and (args.candidate or not args.candidate_episodes):
        parser.error(
            "gate --policy scores --candidate-episodes when --candidate is not given; drop --policy"
        )


def cmd_demo(args: argparse.Namespace) -> int:
    from litmus_sandbox._cli.demo import main as demo_main

    return demo_main(args.out)


class _ReaderMayLeave(io.RawIOBase):
    """Standard output that outlives its reader: once the reader has gone (``| head``),
    what is written is dropped, so the command finishes and exits with its own code (a
    REGRESSION stays exit 1), instead of stopping at the first write that fails."""

    def __init__(self, fd: int, owner: object) -> None:
        self._fd = fd
        #: The stream that owns ``fd``: held, so that collecting it cannot close ``fd``
        #: (and a file opened later take its number) while this one still writes there.
        self._owner = owner
        self.gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: ReadableBuffer) -> int:
        size = memoryview(data).nbytes
        if self.gone:
            return size
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            self.gone = True
            return size


def _keep_going_without_a_reader() -> None:
    """Put standard output on :class:`_ReaderMayLeave` (same encoding and buffering)."""
    old = sys.stdout
    if old is None or not hasattr(old, "buffer"):
        return
    try:
        fd = old.fileno()
    except (OSError, ValueError):
        return  # not a real file (captured by a test harness): leave it
    old.flush()
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(_ReaderMayLeave(fd, old)),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=bool(old.line_buffering),
        write_through=False,
    )


def _quiet_broken_pipe() -> int:
    """The reader went away (e.g. piped into head): not an error of ours."""
    # Python flushes stdout at exit; point it at devnull so that flush cannot fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OK


def _parse(argv: list[str]) -> argparse.Namespace:
    if argv[:1] == ["proxy"]:
        # An edge may import adapters; only when used, so other commands never load them.
        from litmus_sandbox.adapters.mcp._cli import parse as parse_proxy

        proxy_args: argparse.Namespace = parse_proxy(argv[1:])
        return proxy_args
    # Only named commands for --help and --version: their modules are not loaded.
    parser = build_parser(full=not (not argv or argv[0] in ("-h", "--help", "--version")))
    args = parser.parse_args(argv)
    if args.command == "rebaseline" and not (args.like or args.policy):
        parser.error("rebaseline needs --like CANDIDATE_VERDICTS or --policy POLICY.toml")
    if args.command == "gate":
        _check_gate_candidate(parser, args)
    from litmus_sandbox._cli.inputs import expand_inputs

    expand_inputs(args)  # folders, prefixes and globs: the shards they name
    return args


def _error(message: str) -> None:
    """The one error line: recorded text in it (case ids, paths) is inert on a terminal."""
    from litmus_sandbox._model.safe_text import clip, for_terminal

    # Cut: an error may quote what it refused (a name, a value, a line), of any size.
    print(clip(for_terminal(f"litmus-sandbox: error: {message}"), 2000), file=sys.stderr)


def _internal_error(exc: BaseException) -> int:
    """A bug, not bad input: the traceback and exit 3, never the exit code of a regression."""
    from litmus_sandbox._model.safe_text import for_terminal

    sys.stderr.write(for_terminal(traceback.format_exc(), lines=True))
    _error(
        f"internal error (a bug; please report it with the lines above): "
        f"{type(exc).__name__}: {exc}"
    )
    return EXIT_INTERNAL


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["proxy"]:  # the proxy's standard output is the MCP stream itself
        _keep_going_without_a_reader()
    with _Interrupts() as interrupts:
        try:
            args = _parse(argv)
            code: int = args.func(args)
            sys.stdout.flush()  # inside the try: a reader that left shows up here, not at exit
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except Exception as exc:
            # A library that turns Ctrl-C into an error of its own (DuckDB's "Query
            # interrupted") was still interrupted: not a bug, and not bad input.
            return EXIT_INTERRUPTED if interrupts.seen else _failed(exc)
    return code


def _failed(exc: Exception) -> int:
    """What a command that raised ``exc`` says, and its exit code."""
    if isinstance(exc, LitmusError):
        _error(str(exc))
        return EXIT_USAGE
    if isinstance(exc, BrokenPipeError):
        return _quiet_broken_pipe()
    if isinstance(exc, ModuleNotFoundError):
        line = missing_extra(exc)
        if line is None:
            return _internal_error(exc)
        _error(line)
        return EXIT_USAGE
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        _error(f"{where}{exc.strerror or exc}")
        return EXIT_USAGE
    return _internal_error(exc)


class _Interrupts:
    """Notes a Ctrl-C (``SIGINT``) while a command runs, then raises KeyboardInterrupt as
    Python's own handler does; only in the main thread, and only where that handler is
    in place (a command or a caller with a handler of its own keeps it)."""

    def __init__(self) -> None:
        self.seen = False
        self._before: Any = None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def __enter__(self) -> _Interrupts:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._before = signal.signal(signal.SIGINT, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._before is not None and signal.getsignal(signal.SIGINT) == self._note:
            signal.signal(signal.SIGINT, self._before)


if __name__ == "__main__":
    sys.exit(main())
