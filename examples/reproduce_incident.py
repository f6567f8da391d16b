"""Reproduce the reference incident on a synthetic suite and show what this gate changes.

    python examples/reproduce_incident.py                 # the reference's counts
    python examples/reproduce_incident.py --runs 300 --refusal-artifacts 40 --json

It writes a suite (complete baseline and candidate recordings), scores the baseline the
old way (cut at the first refusal and at the first empty tool result) and the candidate
uncut, and prints three gates side by side: the naive gate that compares raw ``safe``
flags, this project's gate, and this gate after the baseline is re-scored from its
recordings. Episodes, verdicts and the manifest (case id -> kind, the ground truth) stay
in the output directory so every figure can be checked by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # also importable when run from elsewhere or with -P
    sys.path.insert(0, str(_HERE))

try:
    import incident_suite as suite
except ModuleNotFoundError as exc:  # the project is not installed in this interpreter
    sys.exit(
        f"reproduce_incident: cannot import {exc.name!r}; run it with the project's "
        "environment, e.g. .venv/bin/python examples/reproduce_incident.py"
    )


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    ref = suite.SuiteParams()
    p = argparse.ArgumentParser(
        prog="reproduce_incident.py",
        description=(
            "Reproduce the reference incident (a naive gate flagging truncation artifacts "
            "as regressions) on a synthetic suite, and show this gate's answer before and "
            "after a rebaseline. Defaults are the reference's counts."
        ),
    )
    p.add_argument("--runs", type=_count, default=ref.runs, help="cases in the suite")
    p.add_argument(
        "--refusal-artifacts",
        type=_count,
        default=ref.refusal_artifacts,
        help="cases that refuse then continue harmfully on both sides",
    )
    p.add_argument(
        "--empty-artifacts",
        type=_count,
        default=ref.empty_artifacts,
        help="cases that continue harmfully after an empty tool result on both sides",
    )
    p.add_argument(
        "--regressions",
        type=_count,
        default=ref.regressions,
        help="cases whose post-refusal continuation turned harmful",
    )
    p.add_argument(
        "--improvements",
        type=_count,
        default=ref.improvements,
        help="cases that now refuse and stop instead of continuing harmfully",
    )
    p.add_argument("--seed", type=int, default=ref.seed, help="seed of the suite's content")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to leave episodes and verdicts (default: a new temporary directory)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    return p


def _n(value: int) -> str:
    return f"{value:,}"


def _table(incident: suite.Incident) -> list[str]:
    cols = incident.columns
    rows: list[tuple[str, ...]] = [("", *(c.title for c in cols))]
    rows += [(o, *(_n(c.counts[o]) for c in cols)) for o in suite.OUTCOMES]
    rows += [
        (
            "flagged REGRESSION (share of suite)",
            *(f"{_n(c.flagged)} ({suite.percent(c.flagged_share)})" for c in cols),
        ),
        ("  genuine", *(_n(c.genuine) for c in cols)),
        ("  false", *(_n(c.false) for c in cols)),
        (
            f"improvements found (of {_n(incident.params.improvements)})",
            *(_n(c.improvements) for c in cols),
        ),
        ("release decision", *(c.decision for c in cols)),
    ]
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            [r[0].ljust(width[0]), *(v.rjust(w + 2) for v, w in zip(r[1:], width[1:], strict=True))]
        )
        for r in rows
    ]


def _report(incident: suite.Incident) -> str:
    p = incident.params
    out = incident.paths.directory
    lines = [
        f"The reference incident, reproduced on a synthetic suite (seed {p.seed})",
        "",
        f"suite: {_n(p.runs)} runs = {_n(p.plain)} plain + {_n(p.refusal_artifacts)} "
        f"refusal-cut artifacts + {_n(p.empty_artifacts)} empty-tool-result-cut artifacts",
        f"       + {_n(p.regressions)} genuine regressions + {_n(p.improvements)} genuine "
        "refuse-and-stop improvements",
        "baseline: complete recordings scored the old way (cut at the first refusal and at the",
        "          first empty tool result); candidate: scored uncut; the same rules judge.",
        "",
        *_table(incident),
        "",
    ]
    for reason, n in incident.reason_codes().items():
        code, _, remedy = reason.partition(" -> ")
        lines.append(f"this gate: {_n(n)} cases carry {code} (remedy: {remedy})")
    plan = incident.gate_report.rebaseline_plan
    r, again = incident.rebaseline, incident.repeat
    paths = incident.paths
    lines += [
        f"rebaseline: re-scored {_n(r.episodes)} baseline recordings ({_n(r.steps_covered)} "
        "steps) under the candidate's policy,",
        f"  rebuilt from the policy record of {paths.candidate_verdicts.relative_to(out)}:",
        f"  {_n(r.judge_calls)} judge calls made, {_n(r.cache_hits)} step verdicts served "
        "from the cache",
        f"  (the gate's plan: {_n(len(plan.rescore))} baselines to re-score, at most "
        f"{_n(plan.judge_calls)} judge calls without a cache)",
        f"  a second pass: {_n(again.judge_calls)} judge calls, {_n(again.cache_hits)} "
        "served from the cache",
        "",
        f"episodes and verdicts are in {out}",
    ]
    files = paths.outputs().values()
    width = max(len(str(path.relative_to(out))) for path, _ in files)
    lines += [f"  {str(path.relative_to(out)).ljust(width)}  {what}" for path, what in files]
    lines += [
        "to check by hand:",
        f"  litmus-sandbox gate --baseline {paths.baseline_verdicts} "
        f"--candidate {paths.candidate_verdicts}",
        f"  litmus-sandbox gate --baseline {paths.rebaselined_verdicts} "
        f"--candidate {paths.candidate_verdicts}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        params = suite.SuiteParams(
            runs=args.runs,
            refusal_artifacts=args.refusal_artifacts,
            empty_artifacts=args.empty_artifacts,
            regressions=args.regressions,
            improvements=args.improvements,
            seed=args.seed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    out: Path = (
        args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="litmus-incident-"))
    )
    incident = suite.run_incident(params, out)
    if args.json:
        print(json.dumps(incident.to_json(), indent=2))
    else:
        print(_report(incident))
    return 0


if __name__ == "__main__":
    sys.exit(main())
