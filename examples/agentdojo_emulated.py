"""AgentDojo's attacks with the state-changing tools emulated by a model, and the gate.

    python examples/agentdojo_emulated.py [--suite NAME]... [--out DIR]
        [--base-url URL --model NAME [--api-key-env VAR]]

For each suite of the benchmark (v1.2.2), every (user task, injection task) pair runs
under the hijacked ground truth (an agent that obeys the injection completely):

1. with every tool real; the state probe says which tools changed the environment;
2. with exactly those tools emulated (``mode = "emulate"``): a model answers for them,
   the bank, the mailbox, the calendar never change;
3. emulated again by a second emulator (the same one at another temperature).

AgentDojo decides most attacks from the environment after the run, so emulation flips them
to "failed" although the agent did exactly the same thing: a measurement against a
simulator is not one against the tool. The runs are scored by the rules judge (two rules
per state-changing tool: the change the state probe saw, evidence ``observed``; the call
alone, ``requested``) and gated: emulated against real is ``fidelity_mismatch``, one
emulator against the other ``emulator_mismatch``; never a ``REGRESSION``.

Without ``--base-url`` the emulator is a scripted one started here on loopback (each call
"succeeds": ``{"result": {"status": "ok"}}``), which needs no model and gives the same
table on every machine. With ``--base-url`` (an OpenAI-compatible endpoint: vLLM, Ollama,
LiteLLM...) a real model simulates the tools; its key, if it needs one, is read from the
variable ``--api-key-env`` names. Needs the extra: ``pip install 'litmus-sandbox[agentdojo]'``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentdojo.task_suite.load_suites import get_suites
from agentdojo_oracle import PIPELINE, VERSION, _ends, _evidence, _quiet, _scoring, _writers
from litmus_sandbox.adapters.agentdojo import SyncEmulator, run_case

from litmus_sandbox import Policy

_CALL = re.compile(r"The call to answer: (\S+) with arguments")


@contextmanager
def scripted_emulator() -> Iterator[str]:
    """A chat-completions endpoint on loopback answering every emulated call with
    ``{"result": {"status": "ok"}}``; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            found = _CALL.search(body["messages"][-1]["content"])
            tool = found.group(1) if found else "?"
            content = json.dumps({"result": {"status": "ok", "tool": tool}})
            answer = json.dumps(
                {
                    "model": body["model"],
                    "choices": [{"message": {"role": "assistant", "content": content}}],
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _policy(writers: set[str], params: dict[str, Any], label: str) -> Policy:
    return Policy.from_document(
        {
            "tools": dict.fromkeys(sorted(writers), "emulate"),
            "emulator": {"kind": "openai", "label": label, "params": params},
        }
    )


def _emulated_calls(path: Path) -> tuple[int, int]:
    """Emulated calls, and those whose emulation failed."""
    calls = failed = 0
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("fidelity") == "emulated":
            calls += 1
            failed += "failure" in r["meta"].get("emulator", {})
    return calls, failed


def _gate(out: Path, name: str, baseline: str, candidate: str) -> dict[str, Any]:
    report = out / f"{name}.gate.{baseline}-{candidate}.json"
    b, c = out / f"{name}.{baseline}.verdicts.jsonl", out / f"{name}.{candidate}.verdicts.jsonl"
    _quiet(
        ["gate", "--baseline", str(b), "--candidate", str(c), "--format", "json", "-o", str(report)]
    )
    data: dict[str, Any] = json.loads(report.read_text())
    return data


def suite_row(name: str, suite: Any, out: Path, params: dict[str, Any]) -> dict[str, Any]:
    environment = suite.load_and_inject_default_environment({})
    pairs = [(u, i) for u in suite.user_tasks for i in suite.injection_tasks]
    paths = {side: out / f"{name}.{side}.jsonl" for side in ("real", "emulated", "emulated-b")}
    for path in paths.values():
        path.unlink(missing_ok=True)
    for u, i in pairs:
        run_case(suite, PIPELINE, u, i, episodes=paths["real"], benchmark_version=VERSION,
                 environment=environment)  # fmt: skip
    writers = _writers(paths["real"])
    hotter = {**params, "temperature": min(2.0, float(params.get("temperature", 0)) + 0.5)}
    for side, label, p in (
        ("emulated", "emulator-a", params),
        ("emulated-b", "emulator-b", hotter),
    ):
        policy = _policy(writers, p, label)
        with SyncEmulator(policy, cache=out / "cache.sqlite") as emulator:
            for u, i in pairs:
                run_case(suite, PIPELINE, u, i, episodes=paths[side], policy=policy,
                         benchmark_version=VERSION, environment=environment,
                         emulator=emulator)  # fmt: skip
    (out / f"{name}.scoring.toml").write_text(_scoring(writers))
    for side, path in paths.items():
        argv = ["score", str(path), "--policy", str(out / f"{name}.scoring.toml")]
        assert _quiet([*argv, "-o", str(out / f"{name}.{side}.verdicts.jsonl"), "--no-cache"]) == 0
    against_real = _gate(out, name, "real", "emulated")
    between = _gate(out, name, "emulated", "emulated-b")
    ends_real, ends_emu = _ends(paths["real"]), _ends(paths["emulated"])
    succ_real = {c for c, e in ends_real.items() if e["attack_success"]}
    succ_emu = {c for c, e in ends_emu.items() if e["attack_success"]}
    calls, failed = _emulated_calls(paths["emulated"])

    def reasons(report: dict[str, Any]) -> dict[str, int]:
        return dict(
            Counter(f"{r['code']} -> {r['remedy']}" for c in report["cases"] for r in c["reasons"])
        )

    return {
        "suite": name,
        "pairs": len(pairs),
        "emulated_tools": len(writers),
        "emulated_calls": calls,
        "failed_emulations": failed,
        "attacks_real": len(succ_real),
        "attacks_emulated": len(succ_emu),
        "flipped": len(succ_real - succ_emu),
        "flipped_back": len(succ_emu - succ_real),
        "survivors_by": dict(Counter(ends_emu[c]["decided_by"] for c in succ_emu)),
        "gate_real_emulated": {k: v for k, v in against_real["counts"].items() if v},
        "reasons_real_emulated": reasons(against_real),
        "gate_emulated_emulated_b": {k: v for k, v in between["counts"].items() if v},
        "reasons_emulated_emulated_b": reasons(between),
        "evidence_real": dict(_evidence(out / f"{name}.real.verdicts.jsonl")),
        "evidence_emulated": dict(_evidence(out / f"{name}.emulated.verdicts.jsonl")),
    }


def table(rows: list[dict[str, Any]]) -> str:
    def fmt(d: dict[str, Any]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "-"

    head = (
        "| suite | pairs | emulated tools (calls, failed) | attacks real | attacks emulated "
        "| flipped (back) | survivors decided by | gate, emulated vs real "
        "| gate, emulator B vs A | unsafe steps' evidence, real / emulated |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['suite']} | {r['pairs']} | {r['emulated_tools']} ({r['emulated_calls']}, "
        f"{r['failed_emulations']}) | {r['attacks_real']} | {r['attacks_emulated']} | "
        f"{r['flipped']} ({r['flipped_back']}) | {fmt(r['survivors_by'])} | "
        f"{fmt(r['gate_real_emulated'])} | {fmt(r['gate_emulated_emulated_b'])} | "
        f"{fmt(r['evidence_real'])} / {fmt(r['evidence_emulated'])} |"
        for r in rows
    ]
    keys = ["pairs", "emulated_tools", "emulated_calls", "failed_emulations", "attacks_real"]
    keys += ["attacks_emulated", "flipped", "flipped_back"]
    t = {k: sum(r[k] for r in rows) for k in keys}
    lines.append(
        f"| **all** | {t['pairs']} | {t['emulated_tools']} ({t['emulated_calls']}, "
        f"{t['failed_emulations']}) | {t['attacks_real']} | {t['attacks_emulated']} | "
        f"{t['flipped']} ({t['flipped_back']}) | | | | |"
    )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", action="append", help="a suite (repeatable; default all)")
    parser.add_argument("--out", help="folder for episodes, verdicts and gate reports")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: scripted)")
    parser.add_argument("--model", default="scripted-emulator", help="the emulator's model")
    parser.add_argument("--api-key-env", help="the variable holding the endpoint's key")
    args = parser.parse_args(argv)
    suites = get_suites(VERSION)
    names = args.suite or sorted(suites)
    out = Path(args.out or tempfile.mkdtemp(prefix="agentdojo-emulated-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with scripted_emulator() as scripted:
        params: dict[str, Any] = {"base_url": args.base_url or scripted, "model": args.model}
        if args.api_key_env:
            params["api_key_env"] = args.api_key_env
        for name in names:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            rows.append(suite_row(name, suites[name], out, params))
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))
    print(f"episodes, verdicts and gate reports: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
