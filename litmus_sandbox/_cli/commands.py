"""The commands that score, gate and re-baseline (``score``, ``gate``, ``rebaseline``).

Imported only when one of them runs (``main.py`` builds the parser without them), so
``litmus-sandbox --help`` loads no report, judge or store module.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from litmus_sandbox._cli.gate import candidate_policies, run_gate
from litmus_sandbox._cli.inputs import refuse_same_file, require_records
from litmus_sandbox._cli.progress import EXIT_JUDGE, report_failures, score_progress
from litmus_sandbox._model.errors import LitmusError
from litmus_sandbox._model.records import AnyVerdict, Verdict
from litmus_sandbox._model.safe_text import for_terminal
from litmus_sandbox._runtime.rebaseline import (
    Rebaselined,
    plan_config,
    rebaseline,
    rebaseline_config,
    rescore_costs,
)
from litmus_sandbox._runtime.scorer import (
    Engine,
    ScoreStats,
    ScoringFailed,
    local_engine,
    score_files,
    scored,
)
from litmus_sandbox._store.exclusions import load_exclusions
from litmus_sandbox._store.files import check_output
from litmus_sandbox._store.locations import display, is_remote, on_disk
from litmus_sandbox._store.step_cache import StepCache, open_cache
from litmus_sandbox._store.streams import ReadWarning, VerdictStream, iter_episodes
from litmus_sandbox.judges import ScoringConfig, load_policy
from litmus_sandbox.reports._shared import plural

if TYPE_CHECKING:
    from litmus_sandbox._runtime.ray_engine import RayEngine

EXIT_OK = 0


def default_cache_path() -> str:
    """``$LITMUS_CACHE`` (a path or a URL), else
    ``$XDG_CACHE_HOME/litmus-sandbox/verdicts.sqlite``."""
    if env := os.environ.get("LITMUS_CACHE"):
        return env
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "litmus-sandbox" / "verdicts.sqlite")


def _open_cache(args: argparse.Namespace) -> StepCache | None:
    if args.no_cache:
        return None
    return open_cache(args.cache or default_cache_path())


def _ray_engine(args: argparse.Namespace) -> RayEngine | None:
    """The Ray engine ``--engine ray`` asks for (None: score here), with the cache every
    worker opens: ``--cache``, else the default one (a SQLite file: then only a cluster
    on this machine can share it).

    Raises:
        ModuleNotFoundError: the ``ray`` extra is not installed (looked for first).
        LitmusError: Ray flags without ``--engine ray``; ``--no-cache`` with it.
    """
    if args.engine != "ray":
        if args.ray_address is not None or args.steps_per_task is not None:
            raise LitmusError("--ray-address and --steps-per-task need --engine ray")
        return None
    from litmus_sandbox._runtime.ray_engine import STEPS_PER_TASK, RayEngine

    if args.no_cache:
        raise LitmusError(
            "--engine ray needs a cache every worker reaches (a retried task would pay its "
            "steps again): drop --no-cache, give --cache redis://HOST:PORT/DB"
        )
    return RayEngine(
        cache=args.cache or default_cache_path(),
        address=args.ray_address,
        steps_per_task=STEPS_PER_TASK if args.steps_per_task is None else args.steps_per_task,
    )


def _warn(warnings: Sequence[ReadWarning | str]) -> None:
    for w in warnings:
        print(for_terminal(f"litmus-sandbox: {w}"), file=sys.stderr)


def _check_output(output: str, inputs: Sequence[str | None], *, flag: str = "-o") -> None:
    """Refuse an output path that would destroy an input or that is a directory.

    Raises:
        LitmusError: ``output`` is a directory, or the same file as one of ``inputs``.
        ModuleNotFoundError: a URL without its storage library (said before any work).
    """
    check_output(output)
    if is_remote(output):
        if output in inputs:
            raise LitmusError(f"{flag} {display(output)} is also an input: write somewhere else")
        return
    target = on_disk(output)  # a file:// URL is the file it names
    if os.path.isdir(target):
        raise LitmusError(f"{flag} {output}: is a directory (give a file to write)")
    if not os.path.exists(target):
        return
    for path in inputs:
        if path is None:
            continue
        try:
            same = os.path.samefile(target, on_disk(path))
        except OSError:
            continue  # an input that cannot be opened is reported when it is read
        if same:
            raise LitmusError(
                f"{flag} {output} is also an input ({path}): writing it would destroy that "
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
            st = os.stat(on_disk(path))
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
    ray = _ray_engine(args)
    _check_distinct(args.episodes)
    _check_verdicts_output(args.output, [*args.episodes, args.policy])
    require_records(args.episodes, "episodes", allow=args.allow_empty_input)
    config = load_policy(args.policy)
    cache = _open_cache(args) if ray is None else None
    failed = False
    try:
        with score_progress(args.episodes, config, quiet=args.quiet) as progress:
            stats = score_files(
                args.episodes, config, args.output, cache=cache, progress=progress, engine=ray
            )
    except ScoringFailed as exc:
        stats, failed = exc.stats, True
    finally:
        if cache is not None:
            cache.close()
        if ray is not None:
            ray.close()
    _warn(stats.warnings)
    print(
        for_terminal(
            f"scored {plural(stats.episodes, 'episode')} ({plural(stats.steps_covered, 'step')} "
            f"covered): {plural(stats.judge_calls, 'judge call')}, {stats.cache_hits} served "
            "from cache"
            + (f", {stats.incomplete} incomplete" if stats.incomplete else "")
            + (f", {stats.failed_episodes} without a verdict" if stats.failed_episodes else "")
            + f" -> {args.output}"
        )
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
    if not on_the_fly and args.engine == "ray":
        raise LitmusError("--engine ray scores --candidate-episodes; --candidate is scored already")
    _check_distinct(args.baseline)
    _check_distinct(args.candidate or args.candidate_episodes)
    _check_distinct(args.candidate_episodes or [])
    _check_distinct(args.baseline_episodes or [])
    refuse_same_file("--baseline", args.baseline, "--candidate", args.candidate or ())
    refuse_same_file(
        "--baseline-episodes",
        args.baseline_episodes or (),
        "--candidate-episodes",
        args.candidate_episodes or (),
    )
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
            flag="--html",
        )
    _require_gate_records(args)
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


def _require_gate_records(args: argparse.Namespace) -> None:
    """Refuse an empty input of ``gate`` (unless ``--allow-empty-input``), saying what a
    lone empty file on a side would do to every case of the other."""
    allow = args.allow_empty_input

    def then(paths: Sequence[str], outcome: str) -> str:
        return outcome if len(paths) == 1 else ""

    require_records(
        args.baseline,
        "verdicts",
        allow=allow,
        arg="--baseline",
        then=then(args.baseline, "every candidate case would be baseline_missing"),
    )
    candidate_missing = "every baseline case would be candidate_missing"
    if args.candidate:
        require_records(
            args.candidate,
            "verdicts",
            allow=allow,
            arg="--candidate",
            then=then(args.candidate, candidate_missing),
        )
    scored_now = args.candidate is None and args.candidate_episodes
    require_records(
        args.candidate_episodes or (),
        "episodes",
        allow=allow,
        arg="--candidate-episodes",
        then=then(args.candidate_episodes, candidate_missing) if scored_now else "",
    )
    require_records(
        args.baseline_episodes or (), "episodes", allow=allow, arg="--baseline-episodes"
    )


def _score_candidate(
    args: argparse.Namespace, config: ScoringConfig
) -> tuple[list[Verdict], ScoreStats]:
    """``gate --candidate-episodes``: the candidate scored now, through the cache, as
    ``score`` would (its read warnings on stderr, as ``score`` prints them)."""
    stats = ScoreStats()
    ray = _ray_engine(args)
    cache = _open_cache(args) if ray is None else None
    engine: Engine = ray if ray is not None else local_engine(cache)
    try:
        with score_progress(args.candidate_episodes, config, quiet=args.quiet) as progress:
            episodes = iter_episodes(args.candidate_episodes, stats.warnings)
            verdicts = engine(episodes, config, stats, progress)
    finally:
        if cache is not None:
            cache.close()
        if ray is not None:
            ray.close()
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
    ray = _ray_engine(args)
    _check_distinct(args.episodes)
    _check_verdicts_output(args.output, [*args.episodes, args.like, args.policy])
    require_records(args.episodes, "episodes", allow=args.allow_empty_input, arg="--episodes")
    require_records(
        [args.like],
        "verdicts",
        arg="--like",
        then="rebaseline reads the candidate's scoring policy from it",
        flag=False,
    )
    config, record = rebaseline_config(like=args.like, policy=args.policy)
    if record is None:
        print(
            f"litmus-sandbox: warning: {args.policy} not checked against any candidate (no --like)",
            file=sys.stderr,
        )
    cache = _open_cache(args) if ray is None else None
    failed = False
    try:
        with score_progress(
            args.episodes, config, quiet=args.quiet, what="re-scoring", skip_unscorable=True
        ) as progress:
            done = rebaseline(
                args.episodes, config, args.output, cache=cache, progress=progress, engine=ray
            )
    except ScoringFailed as exc:
        done = exc.result if isinstance(exc.result, Rebaselined) else Rebaselined(exc.stats)
        failed = True
    finally:
        if cache is not None:
            cache.close()
        if ray is not None:
            ray.close()
    stats = done.stats
    _warn(stats.warnings)
    print(
        for_terminal(
            f"re-scored {plural(len(done.verdicts), 'baseline episode')} "
            f"({plural(stats.steps_covered, 'step')}): "
            f"{plural(stats.judge_calls, 'judge call')} made, {stats.cache_hits} served from "
            "cache"
            + (f", {stats.failed_episodes} without a verdict" if stats.failed_episodes else "")
            + f" -> {args.output}"
        )
    )
    if done.rerun:
        needs = "case needs" if len(done.rerun) == 1 else "cases need"
        print(f"{len(done.rerun)} {needs} a re-run of the baseline instead:")
        for case_id, why in done.rerun:
            print(for_terminal(f"  {case_id}: {why}"))
    if failed:
        report_failures(stats)
        return EXIT_JUDGE
    return EXIT_OK
