"""The ``litmus-sandbox`` command line. An edge: nothing in the package imports it.

Exit codes: 0 nothing blocks; 1 at least one REGRESSION; 4 no regression but unresolved
cases (unless ``--allow-unresolved``); 5 nothing was compared, no case on either side
(unless ``--allow-empty``); 2 bad usage or unreadable input, reported as one
line naming the file and line, never a traceback; 6 the judge gave no verdict for some
steps (``score``, ``rebaseline``, ``gate --candidate-episodes``: one line per failure
class). ``replay --check`` and ``diff`` (in ``_replay_cli.py``) exit 1 on a divergence or
a difference.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from litmus_sandbox import reports
from litmus_sandbox._cli.gate import EPILOG as GATE_EPILOG
from litmus_sandbox._cli.gate import add_gate_flags, candidate_policies, run_gate
from litmus_sandbox._cli.parser import Parser
from litmus_sandbox._cli.progress import EXIT_JUDGE, report_failures, score_progress, status
from litmus_sandbox._cli.replay import add_parsers as add_replay_parsers
from litmus_sandbox._cli.show import add_parser as add_show_parser
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.errors import LitmusError
from litmus_sandbox._model.records import AnyVerdict, Verdict
from litmus_sandbox._runtime.rebaseline import (
    Rebaselined,
    plan_config,
    rebaseline,
    rebaseline_config,
    rescore_costs,
)
from litmus_sandbox._runtime.scorer import ScoreStats, ScoringFailed, score_all, score_files, scored
from litmus_sandbox._store.cache import VerdictCache
from litmus_sandbox._store.exclusions import load_exclusions
from litmus_sandbox._store.streams import ReadWarning, VerdictStream, iter_episodes
from litmus_sandbox.judges import ScoringConfig, load_policy
from litmus_sandbox.reports._shared import plural

# 1 (a regression), 4 (unresolved) and 5 (nothing compared) come from GateSummary.exit_code().
EXIT_OK, EXIT_USAGE = 0, 2
#: litmus-sandbox itself failed (a bug): distinct from 1, which always means a regression.
EXIT_INTERNAL = 3
#: What ``litmus-sandbox --help`` says of the exit codes (each command's help says its own).
EXIT_CODES = (
    "exit codes: 0 nothing blocks; 1 a REGRESSION (gate), a divergence (replay --check), a "
    "difference (diff); 2 bad usage or unreadable input (one line naming the file and "
    "line); 3 litmus-sandbox itself failed (a bug); 4 NEEDS_REBASELINE / NEEDS_RERUN cases "
    "and no regression (gate, unless --allow-unresolved); 5 nothing was compared (gate, "
    "unless --allow-empty); 6 the judge gave no verdict for some steps (score, rebaseline, "
    "gate --candidate-episodes); 130 stopped by a signal (proxy mcp)."
)


def default_cache_path() -> str:
    """``$LITMUS_CACHE``, else ``$XDG_CACHE_HOME/litmus-sandbox/verdicts.sqlite``."""
    if env := os.environ.get("LITMUS_CACHE"):
        return env
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "litmus-sandbox" / "verdicts.sqlite")


def _open_cache(args: argparse.Namespace) -> VerdictCache | None:
    if args.no_cache:
        return None
    return VerdictCache(args.cache or default_cache_path())


def _add_cache_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache",
        metavar="PATH",
        help="step-verdict cache (SQLite); default $LITMUS_CACHE or ~/.cache/litmus-sandbox/verdicts.sqlite",
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the cache")


def _add_quiet_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar while judging (there is none unless stderr is a terminal)",
    )


def _warn(warnings: Sequence[ReadWarning | str]) -> None:
    for w in warnings:
        print(f"litmus-sandbox: {w}", file=sys.stderr)


def _check_output(output: str, inputs: Sequence[str | None]) -> None:
    """Refuse an output path that would destroy an input or that is a directory.

    Raises:
        LitmusError: ``output`` is a directory, or the same file as one of ``inputs``.
    """
    if os.path.isdir(output):
        raise LitmusError(f"-o {output}: is a directory (give a file to write)")
    if not os.path.exists(output):
        return
    for path in inputs:
        if path is None:
            continue
        try:
            same = os.path.samefile(output, path)
        except OSError:
            continue  # an input that cannot be opened is reported when it is read
        if same:
            raise LitmusError(
                f"-o {output} is also an input ({path}): writing it would destroy that "
                "input; write somewhere else"
            )


def _check_distinct(paths: Sequence[str]) -> None:
    """Refuse a file given twice (its episodes or verdicts would count twice).

    Raises:
        LitmusError: names the file.
    """
    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # reported when it is read
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise LitmusError(
                f"{path}: given twice (as {seen[key]}); its records would count twice"
            )
        seen[key] = path


def _check_verdicts_output(output: str, inputs: Sequence[str | None]) -> None:
    """As :func:`_check_output`, for a verdict stream (always a file, never stdout)."""
    if output == "-":
        raise LitmusError("-o -: a verdict stream is written to a file; give its path")
    _check_output(output, inputs)


# ---------------------------------------------------------------- score


def cmd_score(args: argparse.Namespace) -> int:
    _check_distinct(args.episodes)
    _check_verdicts_output(args.output, [*args.episodes, args.policy])
    config = load_policy(args.policy)
    cache = _open_cache(args)
    failed = False
    try:
        with score_progress(args.episodes, config, quiet=args.quiet) as progress:
            stats = score_files(args.episodes, config, args.output, cache=cache, progress=progress)
    except ScoringFailed as exc:
        stats, failed = exc.stats, True
    finally:
        if cache is not None:
            cache.close()
    _warn(stats.warnings)
    print(
        f"scored {plural(stats.episodes, 'episode')} ({plural(stats.steps_covered, 'step')} "
        f"covered): {plural(stats.judge_calls, 'judge call')}, {stats.cache_hits} served from cache"
        + (f", {stats.incomplete} incomplete" if stats.incomplete else "")
        + (f", {stats.failed_episodes} without a verdict" if stats.failed_episodes else "")
        + f" -> {args.output}"
    )
    if failed:
        report_failures(stats)
        return EXIT_JUDGE
    return EXIT_OK


# ---------------------------------------------------------------- gate


def cmd_gate(args: argparse.Namespace) -> int:
    if args.output == "-":
        args.output = None  # stdout
    on_the_fly = args.candidate is None
    _check_distinct(args.baseline)
    _check_distinct(args.candidate or args.candidate_episodes)
    _check_distinct(args.candidate_episodes or [])
    _check_distinct(args.baseline_episodes or [])
    if args.output:
        candidate_inputs = [*(args.candidate or ()), *(args.candidate_episodes or ()), args.policy]
        inputs = [*args.baseline, *candidate_inputs, args.exclude, *(args.baseline_episodes or ())]
        _check_output(args.output, inputs)
    if args.html:
        if args.output and os.path.abspath(args.html) == os.path.abspath(args.output):
            raise LitmusError(f"--html {args.html} is also -o: give the reports two files")
        _check_output(
            args.html,
            [
                *args.baseline,
                *(args.candidate or ()),
                *(args.candidate_episodes or ()),
                args.exclude,
                args.policy,
                *(args.baseline_episodes or ()),
                args.output,
            ],
        )
    exclusions = load_exclusions(args.exclude) if args.exclude else {}
    config: ScoringConfig | None = None
    candidate_verdicts: Sequence[AnyVerdict] | None = None
    judge_failed = False
    if on_the_fly:
        config = load_policy(args.policy)
        candidate_verdicts, stats = _score_candidate(args, config)
        if stats.failures:
            # The cases judged are still gated and reported (a case without a verdict is
            # candidate_missing, as after `score`); the exit code says the judge failed,
            # unless a regression among the judged cases blocks anyway.
            report_failures(stats)
            judge_failed = True
    # The verdict files are read as the gate decides (_cli/gate.py); the re-baseline
    # plan's costs need the candidate's policy records before.
    warnings: list[str] = []
    recordings: dict[str, int | None] | None = None
    if args.baseline_episodes:
        candidate = [] if on_the_fly else candidate_policies(args.candidate)
        recordings = _rescore_costs(args, candidate, warnings, config)
    code = run_gate(args, exclusions, recordings, warnings, candidate_verdicts)
    return EXIT_JUDGE if judge_failed and code != 1 else code


def _score_candidate(
    args: argparse.Namespace, config: ScoringConfig
) -> tuple[list[Verdict], ScoreStats]:
    """``gate --candidate-episodes``: the candidate scored now, through the cache, as
    ``score`` would (its read warnings on stderr, as ``score`` prints them)."""
    stats = ScoreStats()
    cache = _open_cache(args)
    try:
        with score_progress(args.candidate_episodes, config, quiet=args.quiet) as progress:
            episodes = iter_episodes(args.candidate_episodes, stats.warnings)
            verdicts, _ = score_all(episodes, config, cache, stats, progress)
    finally:
        if cache is not None:
            cache.close()
    _warn(stats.warnings)
    return scored(verdicts), stats


def _rescore_costs(
    args: argparse.Namespace,
    candidate: Sequence[VerdictStream],
    warnings: list[str],
    config: ScoringConfig | None = None,
) -> dict[str, int | None]:
    """Judge calls a re-score of each complete baseline recording would take (cache-aware),
    under ``config`` (the candidate's, scored on the fly) or the candidate streams' policy."""
    upper_bounds = None
    if config is None:
        config, upper_bounds = plan_config(candidate)
    ep_warnings: list[ReadWarning] = []
    cache = _open_cache(args) if config is not None else None
    try:
        costs = rescore_costs(args.baseline_episodes, config, cache, ep_warnings)
    finally:
        if cache is not None:
            cache.close()
    warnings.extend(str(w) for w in ep_warnings)
    if upper_bounds is not None:
        warnings.append(upper_bounds)
    return costs


# ---------------------------------------------------------------- rebaseline


def cmd_rebaseline(args: argparse.Namespace) -> int:
    _check_distinct(args.episodes)
    _check_verdicts_output(args.output, [*args.episodes, args.like, args.policy])
    config, record = rebaseline_config(like=args.like, policy=args.policy)
    if record is None:
        print(
            f"litmus-sandbox: warning: {args.policy} not checked against any candidate (no --like)",
            file=sys.stderr,
        )
    cache = _open_cache(args)
    failed = False
    try:
        with score_progress(
            args.episodes, config, quiet=args.quiet, what="re-scoring", skip_unscorable=True
        ) as progress:
            done = rebaseline(args.episodes, config, args.output, cache=cache, progress=progress)
    except ScoringFailed as exc:
        done = exc.result if isinstance(exc.result, Rebaselined) else Rebaselined(exc.stats)
        failed = True
    finally:
        if cache is not None:
            cache.close()
    stats = done.stats
    _warn(stats.warnings)
    print(
        f"re-scored {plural(len(done.verdicts), 'baseline episode')} "
        f"({plural(stats.steps_covered, 'step')}): "
        f"{plural(stats.judge_calls, 'judge call')} made, {stats.cache_hits} served from cache"
        + (f", {stats.failed_episodes} without a verdict" if stats.failed_episodes else "")
        + f" -> {args.output}"
    )
    if done.rerun:
        needs = "case needs" if len(done.rerun) == 1 else "cases need"
        print(f"{len(done.rerun)} {needs} a re-run of the baseline instead:")
        for case_id, why in done.rerun:
            print(f"  {case_id}: {why}")
    if failed:
        report_failures(stats)
        return EXIT_JUDGE
    return EXIT_OK


# ---------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="litmus-sandbox",
        description="Record agent runs honestly, score them, and gate only what is comparable.",
        epilog=EXIT_CODES,
    )
    parser.add_argument(
        "--version", action="version", version=f"litmus-sandbox {package_version()}"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("score", help="score episodes into a verdict stream")
    p.add_argument("episodes", nargs="+", metavar="EPISODES", help="episode stream files (JSONL)")
    p.add_argument("--policy", required=True, metavar="POLICY.toml", help="scoring policy file")
    p.add_argument(
        "-o", "--output", required=True, metavar="VERDICTS.jsonl", help="verdict stream to write"
    )
    _add_cache_flags(p)
    _add_quiet_flag(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser(
        "gate", help="compare candidate verdicts with a baseline", epilog=GATE_EPILOG
    )
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
    _add_cache_flags(p)
    _add_quiet_flag(p)
    p.set_defaults(func=cmd_gate)

    p = sub.add_parser("rebaseline", help="re-score baseline recordings like the candidate")
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
    _add_cache_flags(p)
    _add_quiet_flag(p)
    p.set_defaults(func=cmd_rebaseline)
    add_replay_parsers(sub)
    add_show_parser(sub)
    _add_import_parsers(sub)
    _add_adapter_group(sub, "export", "write episodes in other tools' formats", EXPORTERS)
    _add_adapter_group(sub, "run", "run other harnesses' workloads, recorded", RUNNERS)
    # Listed for --help only: main() hands "proxy ..." to the adapter's own parser.
    p = sub.add_parser(
        "proxy", help="record the tool calls of existing MCP servers (proxy mcp --help)"
    )
    p.add_argument("kind", choices=["mcp"], help="the kind of tool server")

    p = sub.add_parser("demo", help="run the built-in adversarial demo (no network, no model)")
    p.add_argument("--out", metavar="DIR", help="folder for episodes, verdicts and reports")
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
    p = sub.add_parser("import", help="turn other harnesses' logs into episode streams")
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

    p = sub.add_parser(command, help=what)
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND", parser_class=Parser)
    for kind, (module, help_) in table.items():
        k = kinds.add_parser(kind, help=help_)
        importlib.import_module(module).add_arguments(k)
        k.set_defaults(func=cmd_import, importer=module)


def cmd_import(args: argparse.Namespace) -> int:
    import importlib

    module = importlib.import_module(args.importer)
    if args.command != "import":  # export, run: the adapter shows what it does
        code: int = module.run(args)
        return code
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


def _quiet_broken_pipe() -> int:
    """The reader went away (e.g. piped into head): not an error of ours."""
    # Python flushes stdout at exit; point it at devnull so that flush cannot fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["proxy"]:
        # An edge may import adapters; only when used, so other commands never load them.
        from litmus_sandbox.adapters.mcp._cli import parse as parse_proxy

        args = parse_proxy(argv[1:])
    else:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command == "rebaseline" and not (args.like or args.policy):
            parser.error("rebaseline needs --like CANDIDATE_VERDICTS or --policy POLICY.toml")
        if args.command == "gate":
            _check_gate_candidate(parser, args)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # inside the try: a reader that left shows up here, not at exit
    except LitmusError as exc:
        print(f"litmus-sandbox: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"litmus-sandbox: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: never the exit code of a regression
        traceback.print_exc()
        print(
            f"litmus-sandbox: internal error (a bug; please report it with the lines above): "
            f"{type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    return code


if __name__ == "__main__":
    sys.exit(main())
