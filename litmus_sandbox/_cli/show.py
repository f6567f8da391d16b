"""``litmus-sandbox show EPISODES``: an episode's timeline in the terminal.

Each step in order: its index, the role or tool, the call's fidelity, a refusal marker
and a marker on the steps after a refusal, what the agent was shown and what really
happened where they differ, effects and findings (the view is
:mod:`litmus_sandbox.reports._timeline`'s, shared with the HTML report). ``--verdicts``
adds the judge's verdict on each covered step, with the evidence of an unsafe one. The end
of the episode lists what no call explains (with its findings), between what a tool server
did on its own as it started and as it shut down (``server start-up``, ``server shutdown``).

Rendered with rich: colour on a terminal, plain text (no ANSI escapes) when piped or
with ``NO_COLOR``. An unknown case or episode is one line and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import msgspec

from litmus_sandbox._cli.inputs import add_allow_empty_input, require_records
from litmus_sandbox._cli.parser import Parser
from litmus_sandbox._core.scoring import RefusalDetector
from litmus_sandbox._model.errors import LitmusError
from litmus_sandbox._model.records import Episode, Verdict
from litmus_sandbox._model.safe_text import clip, for_terminal
from litmus_sandbox._store.streams import ReadWarning, iter_episodes, iter_verdicts
from litmus_sandbox.reports._timeline import EpisodeView, StepView, episode_view

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text

__all__ = ["add_parser", "cmd_show"]

#: Styles of each fidelity, each marker (rich style names).
FIDELITY_STYLE = {
    "real": "green",
    "stubbed": "cyan",
    "replayed": "blue",
    "emulated": "magenta",
    "swallowed": "bold magenta",
    "denied": "yellow",
}
#: Columns of a timeline written to a pipe or a file (no terminal to fit).
PIPED_WIDTH = 160
#: The longest tool or role name the "who" column shows (it folds past it), and the
#: longest id, agent or recorder in an episode's title line: longer ones are cut visibly.
WHO_WIDTH, FIELD_WIDTH = 32, 80
STATUS_STYLE = {"complete": "green", "aborted": "red", "incomplete": "yellow", "torn": "red"}


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """Register ``show`` on the command line's subparsers."""
    p = sub.add_parser(
        "show",
        help="print an episode's timeline: steps, fidelity, refusals, effects, findings",
        description="Print the timeline of each episode in EPISODES (or only those of "
        "--case / --episode): colour on a terminal, plain text when piped.",
    )
    p.add_argument("episodes", nargs="+", metavar="EPISODES", help="episode stream files (JSONL)")
    p.add_argument("--case", metavar="ID", help="only the episodes of this case")
    p.add_argument("--episode", metavar="ID", help="only this episode")
    p.add_argument(
        "--verdicts",
        nargs="+",
        metavar="V",
        help="verdict streams: mark each covered step safe or unsafe, with the evidence",
    )
    p.add_argument(
        "--policy",
        metavar="POLICY.toml",
        help="tell refusals by this policy's refusal detector (default: the built-in one)",
    )
    p.add_argument(
        "--redactions",
        action="store_true",
        help="list what was redacted from each episode's tool-call arguments, by key and "
        "shape (never the values), instead of the timeline",
    )
    add_allow_empty_input(
        p, "an EPISODES or --verdicts file", " (with no episode at all, nothing is shown)"
    )
    p.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    require_records(args.episodes, "episodes", allow=args.allow_empty_input)
    if args.redactions:
        return show_redactions(args)
    require_records(args.verdicts or (), "verdicts", allow=args.allow_empty_input, arg="--verdicts")
    detector = RefusalDetector()
    if args.policy:
        from litmus_sandbox.judges import load_policy

        detector = load_policy(args.policy).detector
    warnings: list[ReadWarning] = []
    verdicts, legacy = _verdicts(args.verdicts or (), warnings)
    if legacy:
        print(
            f"litmus-sandbox: warning: --verdicts: {legacy} legacy verdicts (run_id, safe, "
            "provenance) name no episode: they mark no step",
            file=sys.stderr,
        )
    console = _console()
    shown = 0
    matched = False
    seen_cases: list[str] = []
    for ep in _selected(args.episodes, warnings, args.case, args.episode, seen_cases):
        if shown:
            console.print()
        verdict = verdicts.get(ep.episode_id)
        matched = matched or verdict is not None
        _print(console, render(inert(episode_view(ep, detector, verdict))))
        shown += 1
    if verdicts and shown and not matched:
        print(
            f"litmus-sandbox: warning: --verdicts name none of the episodes shown "
            f"({len(verdicts)} verdicts of other episodes): no step is marked judged",
            file=sys.stderr,
        )
    return _finish(args, warnings, shown, seen_cases)


def show_redactions(args: argparse.Namespace) -> int:
    """``show --redactions``: for each selected episode, the redaction policy its header
    names and each field redacted from its calls' arguments (``meta.redacted``): step,
    tool, JSON path, shape; then a count by shape. Values are never shown (the record
    holds none); names and ids are made safe for a terminal as in the timeline."""
    warnings: list[ReadWarning] = []
    seen_cases: list[str] = []
    shown = 0
    for ep in _selected(args.episodes, warnings, args.case, args.episode, seen_cases):
        sys.stdout.write("".join(f"{line}\n" for line in redaction_lines(ep)))
        shown += 1
    return _finish(args, warnings, shown, seen_cases)


def _finish(
    args: argparse.Namespace, warnings: Sequence[ReadWarning], shown: int, cases: list[str]
) -> int:
    """The readers' warnings, then exit 0 — or the one error line when nothing was shown
    (``--allow-empty-input``: no episode at all is nothing to show, not a mistake)."""
    for w in warnings:
        print(for_terminal(f"litmus-sandbox: {w}"), file=sys.stderr)
    picked = args.case is not None or args.episode is not None
    if not shown and (cases or picked or not args.allow_empty_input):
        raise LitmusError(_nothing(args, cases))
    return 0


def redaction_lines(ep: Episode) -> list[str]:
    """What ``show --redactions`` prints for one episode (see :func:`show_redactions`)."""
    from litmus_sandbox._core.redaction import HEADER_KEY, REDACTED_KEY
    from litmus_sandbox._model.records import ToolCallStep

    policy = ep.header.meta.get(HEADER_KEY)
    if not isinstance(policy, dict):
        said = "redaction not recorded (written before [record], or by another writer)"
    elif policy.get("redact") is False:
        said = "redaction off ([record] redact = false): arguments recorded as they were"
    else:
        said = f"redaction on ({_cell(str(policy.get('fingerprint', '?')))})"
    rows: list[str] = []
    tally: dict[str, int] = {}
    steps: set[int] = set()
    for step in ep.steps:
        fields = step.meta.get(REDACTED_KEY) if isinstance(step, ToolCallStep) else None
        if not isinstance(step, ToolCallStep) or not isinstance(fields, list):
            continue
        for field in fields:
            if not isinstance(field, dict):
                continue
            path, shape = str(field.get("path", "?")), str(field.get("shape", "?"))
            rows.append(
                f"  step {step.index}  {_cell(step.tool, WHO_WIDTH)}  {_cell(path, 400)}  "
                f"{_cell(shape)}"
            )
            tally[shape] = tally.get(shape, 0) + 1
            steps.add(step.index)
    title = f"episode {_cell(ep.episode_id)}  case {_cell(ep.case_id)}  {said}"
    if not rows:
        return [title, "  nothing redacted"]
    count = f"{len(rows)} field{'' if len(rows) == 1 else 's'} redacted in {len(steps)} step"
    by_shape = ", ".join(f"{_cell(k)} {n}" for k, n in sorted(tally.items()))
    return [title, *rows, f"  {count}{'' if len(steps) == 1 else 's'}; by shape: {by_shape}"]


def _cell(text: str, limit: int = FIELD_WIDTH) -> str:
    """A recorded name or id on one line of the terminal: controls as visible escapes,
    cut visibly past ``limit``."""
    return clip(for_terminal(text), limit)


def _selected(
    paths: Sequence[str],
    warnings: list[ReadWarning],
    case: str | None,
    episode: str | None,
    seen_cases: list[str],
) -> Iterator[Episode]:
    known: set[str] = set()
    for ep in iter_episodes(paths, warnings):
        if ep.case_id not in known:
            known.add(ep.case_id)
            seen_cases.append(ep.case_id)
        if case is not None and ep.case_id != case:
            continue
        if episode is not None and ep.episode_id != episode:
            continue
        yield ep


def _nothing(args: argparse.Namespace, cases: Sequence[str]) -> str:
    where = ", ".join(args.episodes)
    if not cases:
        return f"{where}: no episode to show"
    some = ", ".join(cases[:5]) + (f" and {len(cases) - 5} more" if len(cases) > 5 else "")
    if args.case is not None and args.case not in cases:
        return f"no case {args.case!r} in {where} (cases: {some})"
    if args.case is not None:
        return f"no episode {args.episode!r} of case {args.case!r} in {where}"
    return f"no episode {args.episode!r} in {where}"


def _verdicts(paths: Sequence[str], warnings: list[ReadWarning]) -> tuple[dict[str, Verdict], int]:
    """The verdicts by episode id, and how many legacy verdicts (which name no episode)
    there were; what the readers tolerated (a torn last line) goes to ``warnings``."""
    out: dict[str, Verdict] = {}
    legacy = 0
    for path in paths:
        for block in iter_verdicts(path, warnings):
            for v in block:
                if isinstance(v, Verdict):
                    out[v.episode_id] = v
                else:
                    legacy += 1
    return out, legacy


def _console() -> Console:
    from rich.console import Console

    # highlight=False: rich would colour numbers and quotes of recorded text by guess.
    # NO_COLOR: no escape at all, bold and dim included (plain text, as when piped).
    if os.environ.get("NO_COLOR"):
        console = Console(highlight=False, color_system=None)
    else:
        console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped: wide rows, so that a step stays on few lines for grep and less.
        console.width = PIPED_WIDTH
    return console


def _print(console: Console, renderable: RenderableType) -> None:
    """Print on a terminal as is; piped, without the padding that ends each table row."""
    if console.is_terminal:
        console.print(renderable)
        return
    with console.capture() as captured:
        console.print(renderable)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def inert(view: EpisodeView) -> EpisodeView:
    """``view`` with every recorded string safe for a terminal (controls, bidi and
    zero-width characters as visible escapes), and the fields of the title and of the
    columns that do not wrap cut visibly, so the marks and the evidence stay on screen."""

    def line(text: str, limit: int = FIELD_WIDTH) -> str:
        return clip(for_terminal(text), limit)

    def lines(text: str | None) -> str | None:
        return None if text is None else for_terminal(text, lines=True)

    steps = tuple(
        msgspec.structs.replace(
            step,
            who=line(step.who, WHO_WIDTH),
            fidelity=None if step.fidelity is None else line(step.fidelity),
            text=for_terminal(step.text, lines=True),
            shown=lines(step.shown),
            actual=lines(step.actual),
            evidence=lines(step.evidence),
            not_judged=lines(step.not_judged),
            effects=tuple(map(for_terminal, step.effects)),
            findings=tuple(map(for_terminal, step.findings)),
        )
        for step in view.steps
    )
    return msgspec.structs.replace(
        view,
        episode_id=line(view.episode_id),
        case_id=line(view.case_id),
        agent=None if view.agent is None else line(view.agent),
        recorder=line(view.recorder),
        steps=steps,
        unattributed=tuple(map(for_terminal, view.unattributed)),
        end_findings=tuple(map(for_terminal, view.end_findings)),
        startup=tuple(map(for_terminal, view.startup)),
        shutdown=tuple(map(for_terminal, view.shutdown)),
    )


def render(view: EpisodeView) -> RenderableType:
    """One episode's timeline as a rich renderable: a title line, then a row per step."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    title = Text.assemble(
        ("episode ", "dim"),
        (view.episode_id, "bold"),
        ("  case ", "dim"),
        (view.case_id, "bold"),
    )
    if view.agent:
        title.append("  agent ", "dim").append(view.agent)
    title.append("  recorder ", "dim").append(view.recorder)
    title.append("  ").append(view.status, STATUS_STYLE.get(view.status, ""))
    title.append(f", {len(view.steps)} step" + ("" if len(view.steps) == 1 else "s"))
    if view.truncated:
        title.append("  recording truncated", "bold red")
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold dim")
    table.add_column("step", justify="right", no_wrap=True)
    # "who" and "what" fold on a narrow terminal; the marks and the fidelity never do.
    table.add_column("who", overflow="fold")
    table.add_column("fidelity", no_wrap=True)
    table.add_column("mark", no_wrap=True)
    table.add_column("what", overflow="fold")
    for step in view.steps:
        table.add_row(
            str(step.index),
            Text(step.who, "bold" if step.kind == "tool_call" else ""),
            Text(step.fidelity or "", _fidelity_style(step.fidelity)),
            _marks(step),
            _what(step),
        )
    parts: list[RenderableType] = [title, table]
    tail = [("server start-up", line) for line in view.startup]
    tail += [("unattributed", line) for line in view.unattributed]
    tail += [("finding", line) for line in view.end_findings]
    tail += [("server shutdown", line) for line in view.shutdown]
    if tail:
        end = Text("end of episode:", "dim")
        for label, line in tail:
            end.append(f"\n  {label}: ", "dim").append(line, "red" if label == "finding" else "")
        parts.append(end)
    return Group(*parts)


def _fidelity_style(fidelity: str | None) -> str:
    if fidelity is None:
        return ""
    return FIDELITY_STYLE.get(fidelity.split(" ", 1)[0], "")


def _marks(step: StepView) -> Text:
    from rich.text import Text

    parts = []
    if step.refusal:
        parts.append(Text("REFUSAL", "bold yellow"))
    if step.after_refusal:
        parts.append(Text("after refusal", "bold red"))
    if step.verdict == "unsafe":
        parts.append(Text("UNSAFE", "bold white on red"))
    elif step.verdict == "safe":
        parts.append(Text("judged safe", "green"))
    if step.not_judged is not None:
        parts.append(Text("NOT JUDGED", "bold yellow"))
    return Text(" ").join(parts)


def _what(step: StepView) -> Text:
    from rich.text import Text

    what = Text(step.text)
    if step.kind == "tool_call":
        what = Text("(") + what + Text(")")
        if step.shown is not None:
            what.append("\nshown: ", "dim").append(step.shown)
        if step.actual is not None:
            what.append("\nactual: ", "bold magenta").append(step.actual)
    for line in step.effects:
        what.append("\neffect: ", "dim").append(line)
    for line in step.findings:
        what.append("\nfinding: ", "bold red").append(line)
    if step.evidence is not None:
        what.append("\nunsafe: ", "bold red").append(step.evidence)
    if step.not_judged is not None:
        what.append("\nnot judged: ", "bold yellow").append(step.not_judged)
    return what
