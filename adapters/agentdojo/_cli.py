"""``litmus-sandbox run agentdojo --suite SUITE ... -o EPISODES.jsonl``: AgentDojo as a workload.

The package's CLI builds the parser from :func:`add_arguments` (this module imports
nothing heavy) and calls :func:`run`; AgentDojo is imported only then, so a missing extra
is one line, not a traceback. Episodes are appended to ``-o``, as a sandbox appends to its
stream: a case that fails is recorded (``aborted``) before the error is reported.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from litmus_sandbox._model.errors import ConfigError, LitmusError, UpstreamError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``run agentdojo``."""
    p.add_argument(
        "--suite", required=True, metavar="SUITE", help="banking, slack, travel, workspace"
    )
    p.add_argument(
        "--benchmark-version",
        default="v1.2.2",
        metavar="VERSION",
        help="the AgentDojo benchmark version (default v1.2.2)",
    )
    p.add_argument(
        "--user-task",
        action="append",
        metavar="ID",
        help="a user task to run (repeatable; default every one)",
    )
    p.add_argument(
        "--injection-task",
        action="append",
        metavar="ID|all|none",
        help="an injection task to pair each user task with (repeatable): 'all' every one, "
        "'none' the user task alone (default all)",
    )
    p.add_argument(
        "--pipeline",
        default="ground-truth",
        metavar="ground-truth|hijacked-ground-truth|FILE.py:FACTORY",
        help="the agent (default ground-truth)",
    )
    p.add_argument(
        "--policy",
        metavar="POLICY.toml",
        help="tool modes ([tools]: real, stub, swallow, deny, emulate with its [emulator])",
    )
    p.add_argument(
        "--cache",
        metavar="PATH|URL",
        help="where emulated tools' results are kept (default $LITMUS_CACHE, else the "
        "user's cache folder)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="EPISODES.jsonl",
        help="episode stream to append to",
    )


def _pairs(
    suite: Any, users: list[str] | None, injections: list[str] | None
) -> list[tuple[str, str | None]]:
    user_ids = users or list(suite.user_tasks)
    chosen: list[str | None] = []
    for value in injections or ["all"]:
        if value == "all":
            chosen.extend(suite.injection_tasks)
        elif value == "none":
            chosen.append(None)
        elif value in suite.injection_tasks:
            chosen.append(value)
        else:
            raise ConfigError(
                f"--injection-task {value!r}: not in {suite.name} (one of "
                f"{', '.join(suite.injection_tasks)}, all, none)"
            )
    for uid in user_ids:
        if uid not in suite.user_tasks:
            raise ConfigError(f"--user-task {uid!r}: not in {suite.name}")
    unique = list(dict.fromkeys(chosen))
    return [(u, i) for u in user_ids for i in unique]


def run(args: argparse.Namespace) -> int:
    """Run the chosen cases, one episode each; print one summary line.

    Raises:
        ModuleNotFoundError: the extra is missing (the CLI names it in one line).
        LitmusError: a suite, task, pipeline or policy is wrong.
        UpstreamError: a pipeline failed (its episode is recorded as aborted).
    """
    from ._emulation import opened
    from ._pipelines import pipeline_factory
    from ._run import policy_of, run_case, suite_of

    suite = suite_of(args.suite, args.benchmark_version)
    pairs = _pairs(suite, args.user_task, args.injection_task)
    policy = policy_of(args.policy)
    factory = pipeline_factory(args.pipeline)  # a file is loaded once, not once a case
    environment = suite.load_and_inject_default_environment({})
    utility = attacks = attacked = truncated = 0
    with opened(policy, None, args.cache) as emulator:  # one emulator for every case
        for user_task, injection_task in pairs:
            try:
                result = run_case(
                    suite,
                    factory,
                    user_task,
                    injection_task,
                    episodes=args.output,
                    policy=policy,
                    benchmark_version=args.benchmark_version,
                    environment=environment,
                    emulator=emulator,
                )
            except LitmusError:
                raise
            except Exception as exc:  # the pipeline's (a model API, an agent's bug), not ours
                case = user_task if injection_task is None else f"{user_task}/{injection_task}"
                raise UpstreamError(
                    f"{case}: the pipeline failed ({type(exc).__name__}: {exc}); its episode "
                    f"is recorded as aborted in {args.output}"
                ) from exc
            utility += result.utility
            truncated += result.truncated
            if result.attack_success is not None:
                attacked += 1
                attacks += result.attack_success
    where = f"agentdojo/{suite.name}@{args.benchmark_version}"
    cut = f", {truncated} truncated" if truncated else ""
    against = f", {attacks}/{attacked} attacks succeeded" if attacked else ""
    print(
        f"ran {len(pairs)} cases of {where}: utility {utility}/{len(pairs)}{against}{cut} "
        f"-> {args.output}",
        file=sys.stdout,
    )
    return 0
