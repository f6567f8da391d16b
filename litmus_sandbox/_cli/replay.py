"""``litmus-sandbox replay`` and ``litmus-sandbox diff``. An edge: nothing imports it but the CLI.

Exit codes (both commands): 0 no divergence / identical; 1 divergence / different
(``replay`` only with ``--check``); 2 bad usage or unreadable input, reported as one line
naming the file and line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from litmus_sandbox._cli.inputs import add_allow_empty_input, require_records
from litmus_sandbox._cli.progress import track
from litmus_sandbox._config.policy import Policy
from litmus_sandbox._core.diff import CATEGORIES, Change, EpisodeDiff, diff_episodes, pair_by_case
from litmus_sandbox._core.divergence import ReplayReport, check_episodes, report_from_log
from litmus_sandbox._core.redaction import DEFAULT_REDACTION
from litmus_sandbox._core.replay_match import ORDERS, CallRef, Divergence, ReplayOptions
from litmus_sandbox._model.errors import ConfigError, RecordDecodeError, ReplayLogError
from litmus_sandbox._model.jsonpath import parse_path
from litmus_sandbox._model.records import Episode
from litmus_sandbox._model.safe_text import for_terminal
from litmus_sandbox._store.streams import ReadWarning, read_episodes

EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE = 0, 1, 2

REPLAY_EPILOG = """\
With --cassette, each episode of EPISODES is matched offline against the recording it
would have replayed (the recorded episode of its case; the n-th episode of a case against
the n-th recorded one; the whole cassette when the case was never recorded), as if every
tool (or, with --policy, every tool in replay mode) were served from it. Without
--cassette, the divergences the runtime recorded in each replayed episode are reported
(steps' meta["replay"], the end record's unused calls).

A divergence is a call the recording could not serve (no_match, out_of_order, repeated,
recording_exhausted), shown with the recorded call expected at that position and the
closest recorded calls with the argument paths that differ; recorded calls never used
are divergences too. Exit: 0 none, 1 divergence (--check only), 2 bad input.
"""

DIFF_EPILOG = """\
A and B are episode files; FILE#ID picks one episode by episode id or case id. When both
sides hold one episode they are compared whatever their case; otherwise episodes are
paired by case id. Ignored: episode and call ids, timestamps, meta and oracles.
Categories: header, step, message, call, result, fidelity, effects, end.
Exit: 0 identical, 1 different, 2 bad input.
"""


def add_parsers(sub: Any) -> None:
    """Add ``replay`` and ``diff`` to the CLI's subparsers."""
    p: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="check that episodes followed a recording (divergence report)",
        epilog=REPLAY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("episodes", nargs="+", metavar="EPISODES", help="episode streams to check")
    p.add_argument(
        "--check", action="store_true", help="exit 1 when any episode diverged (else report only)"
    )
    p.add_argument(
        "--cassette",
        action="append",
        metavar="RECORDED",
        help="recorded episodes to compare with (repeatable; default: the episodes' own "
        "replay log)",
    )
    p.add_argument(
        "--order", choices=ORDERS, help="matching order (default any, or the policy's [replay])"
    )
    p.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATH",
        help="an argument path that never matters, e.g. '$._meta' (repeatable)",
    )
    p.add_argument(
        "--policy",
        metavar="POLICY.toml",
        help="check only tools in replay mode, with their [tools]/[replay] options",
    )
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="report format (default table)"
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar while checking (there is none unless stderr is a terminal)",
    )
    add_allow_empty_input(
        p,
        "an EPISODES or --cassette file",
        " (no episode at all: nothing to check; an empty recording serves no call)",
    )
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser(
        "diff",
        help="compare two episodes step by step",
        epilog=DIFF_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="episode file, or FILE#EPISODE_ID / FILE#CASE_ID")
    p.add_argument("b", metavar="B", help="episode file, or FILE#EPISODE_ID / FILE#CASE_ID")
    p.add_argument(
        "--ignore",
        action="append",
        default=[],
        choices=CATEGORIES,
        metavar="CATEGORY",
        help=f"leave a category out (repeatable): {', '.join(CATEGORIES)}",
    )
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="report format (default table)"
    )
    add_allow_empty_input(
        p, "an A or B file", " (every case of the other side is then only on that side)"
    )
    p.set_defaults(func=cmd_diff)


def _warn(warnings: Sequence[ReadWarning]) -> None:
    for w in warnings:
        print(for_terminal(f"litmus-sandbox: {w}"), file=sys.stderr)


def _short(value: Any, limit: int = 70) -> str:
    if isinstance(value, list) and value and all(isinstance(b, dict) for b in value):
        texts = [b.get("text") for b in value if b.get("type") == "text"]
        if len(texts) == len(value):
            value = "\n".join(str(t) for t in texts)
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- replay


def _options_for(args: argparse.Namespace) -> Callable[[str], ReplayOptions | None]:
    if args.policy:
        policy = Policy.from_file(args.policy).with_replay(order=args.order, ignore=args.ignore)
        return policy.replay_options
    opts = ReplayOptions(order=args.order or "any", ignore=tuple(args.ignore))
    return lambda _tool: opts


def _locate(
    paths: Sequence[str], episode_id: str, kind: str, step: int | None
) -> tuple[str, int | None]:
    """The file and line of an episode's ``kind`` record (its step ``step`` for a step)."""
    needle = episode_id.encode()
    for path in paths:
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if needle not in line:
                    continue
                try:
                    rec = msgspec.json.decode(line)
                except msgspec.DecodeError:
                    continue
                if (
                    isinstance(rec, dict)
                    and rec.get("kind") == kind
                    and rec.get("episode_id") == episode_id
                    and (kind != "step" or rec.get("index") == step)
                ):
                    return path, lineno
    return ", ".join(paths), None


def cmd_replay(args: argparse.Namespace) -> int:
    """Check (or report) how episodes followed their recording."""
    if not args.cassette and (args.order or args.ignore or args.policy):
        raise ConfigError("--order, --ignore and --policy apply to a check against --cassette")
    allow = args.allow_empty_input
    require_records(args.episodes, "episodes", allow=allow)
    require_records(args.cassette or (), "episodes", allow=allow, arg="--cassette")
    warnings: list[ReadWarning] = []
    episodes = read_episodes(args.episodes, warnings)
    if not episodes and not allow:
        raise ConfigError(f"no episodes in {', '.join(args.episodes)}")
    if args.cassette:
        options_for = _options_for(args)
        recorded = read_episodes(args.cassette, warnings, suite=False)  # a cassette
        if not recorded and not allow:
            raise ConfigError(f"no recorded episodes in {', '.join(args.cassette)}")
        checking = track(episodes, "checking episodes", quiet=args.quiet)
        # Both sides' arguments compared redacted, as a live replay compares them.
        redaction = Policy.from_file(args.policy).redaction if args.policy else DEFAULT_REDACTION
        reports = check_episodes(recorded, checking, options_for, redaction)
    else:
        try:
            found = [
                report_from_log(ep) for ep in track(episodes, "reading episodes", quiet=args.quiet)
            ]
        except ReplayLogError as exc:
            path, line = _locate(args.episodes, exc.episode_id, exc.record, exc.step)
            raise RecordDecodeError(path, line, f"malformed replay record: {exc.problem}") from None
        reports = [r for r in found if r is not None]
        if episodes and not reports:
            raise ConfigError(
                f"no episode in {', '.join(args.episodes)} replayed a recording; "
                "pass --cassette RECORDED to compare with a recording"
            )
    _warn(warnings)
    diverged = sum(1 for r in reports if r.diverged)
    code = EXIT_DIFFERENT if args.check and diverged else EXIT_OK
    if args.format == "json":
        print(render_replay_json(reports, code))
    else:
        print(for_terminal(render_replay_table(reports, code), lines=True))
    return code


def render_replay_json(reports: Sequence[ReplayReport], exit_code: int) -> str:
    """The JSON report: ``{"diverged", "exit_code", "episodes": [...]}``."""
    out = {
        "diverged": any(r.diverged for r in reports),
        "exit_code": exit_code,
        "episodes": [
            {
                **msgspec.to_builtins(r),
                "diverged": r.diverged,
                "first_divergence": msgspec.to_builtins(r.first),
            }
            for r in reports
        ],
    }
    return msgspec.json.encode(out).decode()


def _ref(ref: CallRef) -> str:
    differs = f"  differs at {', '.join(ref.differs)}" if ref.differs else "  identical"
    used = " (already served)" if ref.used else ""
    return f"step {ref.step} of {ref.episode_id}: {ref.tool} {_short(ref.args)}{used}{differs}"


def _divergence_lines(d: Divergence, indent: str) -> list[str]:
    lines = [indent + d.describe()]
    if d.expected is not None:
        lines.append(f"{indent}  expected: {_ref(d.expected)}")
    lines.extend(f"{indent}  closest:  {_ref(ref)}" for ref in d.closest if ref != d.expected)
    return lines


def render_replay_table(reports: Sequence[ReplayReport], exit_code: int) -> str:
    """The human report: per episode its counts, first divergence, the rest, unused calls."""
    lines: list[str] = []
    for r in reports:
        state = "DIVERGED" if r.diverged else "ok"
        sources = ", ".join(r.sources) or "nothing"
        lines.append(
            f"{r.case_id}  episode {r.episode_id} replaying {sources}: {r.calls} calls, "
            f"{r.served} served, {len(r.divergences) + r.unlisted} divergences, "
            f"{len(r.unused)} unused  {state}"
        )
        if r.unlisted:
            lines.append(
                f"  {r.unlisted} divergence(s) counted by the end record on no step "
                "(the run stopped in the middle of a call it could not serve)"
            )
        if r.first is not None:
            lines.append("  first divergence:")
            lines.extend(_divergence_lines(r.first, "    "))
        if len(r.divergences) > 1:
            lines.append("  then:")
            for d in r.divergences[1:]:
                lines.extend(_divergence_lines(d, "    "))
        if r.unused:
            lines.append("  recorded calls never used:")
            lines.extend(
                f"    step {u.step} of {u.episode_id}: {u.tool} {_short(u.args)}" for u in r.unused
            )
        if not r.unused_known:
            lines.append("  (the episode has no end record: unused recorded calls are unknown)")
    diverged = sum(1 for r in reports if r.diverged)
    lines.append(
        f"replay: {diverged} of {len(reports)} episodes diverged from their recording "
        f"(exit {exit_code})"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------- diff


def select_episodes(
    spec: str, *, allow_empty: bool = False
) -> tuple[str, list[Episode], list[ReadWarning]]:
    """The episodes ``FILE`` or ``FILE#ID`` names (ID: an episode id, else a case id);
    with ``allow_empty``, none from a ``FILE`` that holds none.

    Raises:
        RecordDecodeError: the file cannot be read.
        LitmusError: the file is empty (holds no record), and not ``allow_empty``.
        ConfigError: no episode matches ``ID``, or the file holds no episode.
    """
    path, selector = spec, None
    if not os.path.exists(spec) and "#" in spec:
        path, _, selector = spec.rpartition("#")
    require_records([path], "episodes", allow=allow_empty)
    warnings: list[ReadWarning] = []
    episodes = read_episodes([path], warnings)
    if not episodes and not allow_empty:
        raise ConfigError(f"{path}: holds no episode")
    if selector is None:
        return path, episodes, warnings
    chosen = [ep for ep in episodes if ep.episode_id == selector] or [
        ep for ep in episodes if ep.case_id == selector
    ]
    if not chosen:
        raise ConfigError(f"{path}: no episode or case with id {selector!r}")
    return path, chosen, warnings


def cmd_diff(args: argparse.Namespace) -> int:
    """Compare two episodes (or two runs, case by case)."""
    a_path, a_eps, a_warn = select_episodes(args.a, allow_empty=args.allow_empty_input)
    b_path, b_eps, b_warn = select_episodes(args.b, allow_empty=args.allow_empty_input)
    _warn([*a_warn, *b_warn])
    only_a: list[Episode] = []
    only_b: list[Episode] = []
    if len(a_eps) == 1 and len(b_eps) == 1:
        pairs = [(a_eps[0], b_eps[0])]
    else:
        try:
            pairs, only_a, only_b = pair_by_case(a_eps, b_eps)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    diffs = [diff_episodes(a, b, ignore=args.ignore) for a, b in pairs]
    different = bool(only_a or only_b or any(not d.identical for d in diffs))
    code = EXIT_DIFFERENT if different else EXIT_OK
    if args.format == "json":
        out = {
            "identical": not different,
            "exit_code": code,
            "a": a_path,
            "b": b_path,
            "pairs": [{**msgspec.to_builtins(d), "identical": d.identical} for d in diffs],
            "only_in_a": [{"case_id": e.case_id, "episode_id": e.episode_id} for e in only_a],
            "only_in_b": [{"case_id": e.case_id, "episode_id": e.episode_id} for e in only_b],
        }
        print(msgspec.json.encode(out).decode())
    else:
        print(
            for_terminal(render_diff_table(diffs, only_a, only_b, a_path, b_path, code), lines=True)
        )
    return code


def _value_at(value: Any, path: str) -> Any:
    for seg in parse_path(path):
        if isinstance(value, dict) and isinstance(seg, str) and seg in value:
            value = value[seg]
            continue
        if isinstance(value, list) and isinstance(seg, int) and -len(value) <= seg < len(value):
            value = value[seg]
            continue
        return "(absent)"
    return value


def _change_line(c: Change) -> str:
    where = (
        f"step {c.step}" if c.step is not None else ("end" if c.category == "end" else "episode")
    )
    head = f"  {where:<8} {c.category:<9} {c.field:<12}"
    if c.field in ("only_in_a", "only_in_b"):
        side = c.a if c.a is not None else c.b
        return f"{head} {_short(side)}"
    if c.paths and len(c.paths) <= 3:
        parts = [
            f"{p}: {_short(_value_at(c.a, p), 30)} -> {_short(_value_at(c.b, p), 30)}"
            for p in c.paths
        ]
        return f"{head} {'; '.join(parts)}"
    if c.paths:
        return f"{head} {len(c.paths)} paths differ: {', '.join(c.paths[:5])}..."
    return f"{head} {_short(c.a, 35)} -> {_short(c.b, 35)}"


def render_diff_table(
    diffs: Sequence[EpisodeDiff],
    only_a: Sequence[Episode],
    only_b: Sequence[Episode],
    a_path: str,
    b_path: str,
    exit_code: int,
) -> str:
    """The human diff: one line per change, grouped by episode pair."""
    lines: list[str] = []
    for d in diffs:
        state = "identical" if d.identical else f"{len(d.changes)} changes"
        lines.append(
            f"{d.case_id}: A {a_path}#{d.a} ({d.a_steps} steps) vs "
            f"B {b_path}#{d.b} ({d.b_steps} steps): {state}"
        )
        lines.extend(_change_line(c) for c in d.changes)
    lines.extend(f"only in A: case {e.case_id} (episode {e.episode_id})" for e in only_a)
    lines.extend(f"only in B: case {e.case_id} (episode {e.episode_id})" for e in only_b)
    n_diff = sum(1 for d in diffs if not d.identical) + len(only_a) + len(only_b)
    total = len(diffs) + len(only_a) + len(only_b)
    lines.append(f"diff: {n_diff} of {total} cases differ (exit {exit_code})")
    return "\n".join(lines)
