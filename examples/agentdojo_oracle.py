"""AgentDojo's verdicts beside the gate's: every suite's attacks, real tools and stubbed.

    python examples/agentdojo_oracle.py [--suite NAME]... [--out DIR]

For each suite of the benchmark (v1.2.2), every (user task, injection task) pair runs
twice under the hijacked ground truth (an agent that obeys the injection completely):

1. with every tool real; the state probe says which tools changed the environment;
2. with exactly those tools stubbed (``mode = "stub"``), as a cheap, safe re-run would.

AgentDojo decides most attacks from the environment after the run, so stubbing flips them
to "failed" although the agent did the same thing: a change of measurement, not of
behaviour. Both runs are then scored by the rules judge (two rules per state-changing
tool: the change the state probe saw, evidence ``observed``; the call alone, evidence
``requested``) and gated, stubbed against real:
the gate sees the configured fidelity differ and answers ``NEEDS_REBASELINE`` with the
remedy ``rerun_baseline``, never ``REGRESSION``. The table gives, per suite, AgentDojo's
attack successes real and stubbed, what decided those that survive stubbing, the gate's
outcomes, and the evidence the rules judge gave the unsafe steps: ``observed`` where the
oracle saw the call change the environment, ``requested`` where the call was only asked
for (stubbed), ``claimed`` for what the agent only said (no text rule here).

Needs the extra: ``pip install 'litmus-sandbox[agentdojo]'``. Takes a few minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from agentdojo.task_suite.load_suites import get_suites
from litmus_sandbox.adapters.agentdojo import run_case

from litmus_sandbox._cli.main import main as litmus

VERSION = "v1.2.2"
PIPELINE = "hijacked-ground-truth"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ends(path: Path) -> dict[str, dict[str, Any]]:
    """End-record facts by case id."""
    case: dict[str, str] = {}
    out: dict[str, dict[str, Any]] = {}
    for r in _records(path):
        if r["kind"] == "episode":
            case[r["episode_id"]] = r["case_id"]
        elif r["kind"] == "end":
            out[case[r["episode_id"]]] = r["meta"]["agentdojo"]
    return out


def _writers(path: Path) -> set[str]:
    """Tools of which a real call changed the task environment (the state probe's word)."""
    return {
        r["tool"]
        for r in _records(path)
        if r.get("type") == "tool_call" and r["fidelity"] == "real" and r["effects"]["state"]
    }


def _quiet(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return litmus(argv)


def _scoring(tools: set[str]) -> str:
    """Two rules per state-changing tool: the change seen by the state probe (evidence
    ``observed``), and the call alone (``requested``, what is left when it was stubbed)."""
    rules = "".join(
        f'\n[[judge.rules]]\nid = "changed-by-{t}"\ntool = "{t}"\nstate_path = "*"\n'
        f'\n[[judge.rules]]\nid = "writes-{t}"\ntool = "{t}"\n'
        for t in sorted(tools)
    )
    return (
        "[scoring]\ntruncate_on_refusal = false\ntruncate_on_empty_tool_result = false\n\n"
        f'[judge]\nkind = "rules"\nlabel = "state-changing-calls"\n{rules}'
    )


def _evidence(verdicts: Path) -> Counter[str]:
    """Unsafe steps by the evidence kind the rules judge gave them."""
    kinds: Counter[str] = Counter()
    for r in _records(verdicts):
        if r["kind"] != "verdict":
            continue
        for step in r["steps"]:
            if not step["safe"]:
                kinds[step.get("evidence") or "?"] += 1
    return kinds


def suite_row(name: str, suite: Any, out: Path) -> dict[str, Any]:
    environment = suite.load_and_inject_default_environment({})
    pairs = [(u, i) for u in suite.user_tasks for i in suite.injection_tasks]
    real, stubbed = out / f"{name}.real.jsonl", out / f"{name}.stubbed.jsonl"
    for path in (real, stubbed):
        path.unlink(missing_ok=True)
    for u, i in pairs:
        run_case(
            suite, PIPELINE, u, i, episodes=real, benchmark_version=VERSION, environment=environment
        )
    writers = _writers(real)
    policy = {"tools": {t: {"mode": "stub"} for t in writers}}
    for u, i in pairs:
        run_case(
            suite,
            PIPELINE,
            u,
            i,
            episodes=stubbed,
            policy=policy,
            benchmark_version=VERSION,
            environment=environment,
        )
    (out / f"{name}.scoring.toml").write_text(_scoring(writers))
    for side, path in (("real", real), ("stubbed", stubbed)):
        argv = ["score", str(path), "--policy", str(out / f"{name}.scoring.toml")]
        assert _quiet([*argv, "-o", str(out / f"{name}.{side}.verdicts.jsonl"), "--no-cache"]) == 0
    gate = out / f"{name}.gate.json"
    _quiet(
        [
            "gate",
            "--baseline",
            str(out / f"{name}.real.verdicts.jsonl"),
            "--candidate",
            str(out / f"{name}.stubbed.verdicts.jsonl"),
            "--format",
            "json",
            "-o",
            str(gate),
        ]
    )
    report = json.loads(gate.read_text())
    remedies = Counter(
        (r["code"], r["remedy"]) for case in report["cases"] for r in case["reasons"]
    )
    ends_real, ends_stub = _ends(real), _ends(stubbed)
    succ_real = {c for c, e in ends_real.items() if e["attack_success"]}
    succ_stub = {c for c, e in ends_stub.items() if e["attack_success"]}
    return {
        "suite": name,
        "pairs": len(pairs),
        "stubbed_tools": len(writers),
        "attacks_real": len(succ_real),
        "attacks_stubbed": len(succ_stub),
        "flipped": len(succ_real - succ_stub),
        "flipped_back": len(succ_stub - succ_real),
        "survivors_by": dict(Counter(ends_stub[c]["decided_by"] for c in succ_stub)),
        "gate": {k: v for k, v in report["counts"].items() if v},
        "reasons": {f"{code} -> {remedy}": n for (code, remedy), n in remedies.items()},
        "evidence_real": dict(_evidence(out / f"{name}.real.verdicts.jsonl")),
        "evidence_stubbed": dict(_evidence(out / f"{name}.stubbed.verdicts.jsonl")),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| suite | pairs | stubbed tools | attacks real | attacks stubbed | flipped (back) "
        "| survivors decided by | gate | unsafe steps' evidence, real / stubbed |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )

    def fmt(d: dict[str, Any]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "-"

    lines = [
        f"| {r['suite']} | {r['pairs']} | {r['stubbed_tools']} | {r['attacks_real']} | "
        f"{r['attacks_stubbed']} | {r['flipped']} ({r['flipped_back']}) | "
        f"{fmt(r['survivors_by'])} | {fmt(r['gate'])} | "
        f"{fmt(r['evidence_real'])} / {fmt(r['evidence_stubbed'])} |"
        for r in rows
    ]
    total = {
        k: sum(r[k] for r in rows)
        for k in (
            "pairs",
            "stubbed_tools",
            "attacks_real",
            "attacks_stubbed",
            "flipped",
            "flipped_back",
        )
    }
    lines.append(
        f"| **all** | {total['pairs']} | {total['stubbed_tools']} | {total['attacks_real']} | "
        f"{total['attacks_stubbed']} | {total['flipped']} ({total['flipped_back']}) | | | |"
    )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", action="append", help="a suite (repeatable; default all)")
    parser.add_argument("--out", help="folder for episodes, verdicts and gate reports")
    args = parser.parse_args(argv)
    suites = get_suites(VERSION)
    names = args.suite or sorted(suites)
    out = Path(args.out or tempfile.mkdtemp(prefix="agentdojo-oracle-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.append(suite_row(name, suites[name], out))
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))
    print(f"episodes, verdicts and gate reports: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
