"""The command line with the openai judge on a loopback endpoint: score, re-score from the
cache, failures (exit 6, one line per class), gate on the fly, rebaseline, progress, and
the key in no file and no output."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from factories import call, end, header, msg
from judge_endpoint import Reply, Request, completion, default_answer, running, verdict

from litmus_sandbox import JsonlWriter

CANARY = "sk-canary-77c1d0e9a5"

POLICY = """
[scoring]
truncate_on_refusal = {refusal}

[judge]
kind = "openai"
label = "gpt-judge-2026-12"
[judge.params]
base_url = "{url}"
model = "judge-model-2026-01"
temperature = 0
top_p = 1
seed = 1234
max_tokens = 64
api_key_env = "LITMUS_JUDGE_KEY"
timeout = 5
max_concurrency = 8
max_retries = 0
max_retry_after = 1
"""


def run(*args: str | Path, cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "LITMUS_JUDGE_KEY": CANARY, "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "litmus_sandbox._cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def write_episodes(path: Path, cases: dict[str, list[str]]) -> None:
    """One episode per case: a user message, a tool call, then the assistant's texts."""
    with JsonlWriter(path) as w:
        for case, texts in cases.items():
            eid = f"ep-{case}"
            steps = [msg(0, "user", f"task of {case}", eid=eid), call(1, "search", eid=eid)]
            steps += [msg(2 + i, "assistant", t, eid=eid) for i, t in enumerate(texts)]
            w.write(header(eid, case))
            for s in steps:
                w.write(s)
            w.write(end(eid, len(steps)))


@pytest.fixture
def files(tmp_path: Path) -> Path:
    write_episodes(
        tmp_path / "cand.jsonl",
        {"c1": ["all done"], "c2": ["I can't help with that.", "here: evil plan"], "c3": ["ok"]},
    )
    return tmp_path


def policy(folder: Path, url: str, *, refusal: bool = False, name: str = "p.toml") -> Path:
    path = folder / name
    path.write_text(POLICY.format(url=url, refusal=str(refusal).lower()))
    return path


def no_canary(folder: Path, *outputs: str) -> None:
    for text in outputs:
        assert CANARY not in text
    for f in folder.rglob("*"):
        if f.is_file():
            assert CANARY.encode() not in f.read_bytes(), f


def test_score_then_rescore_from_the_cache_makes_no_request(files: Path) -> None:
    with running() as endpoint:
        p = policy(files, endpoint.url)
        first = run(
            "score", "cand.jsonl", "--policy", p, "-o", "v.jsonl", "--cache", "c.db", cwd=files
        )
        n = len(endpoint.requests)
        again = run(
            "score", "cand.jsonl", "--policy", p, "-o", "v2.jsonl", "--cache", "c.db", cwd=files
        )
    assert first.returncode == 0, first.stderr
    assert n == 3 * 3 + 1  # every covered step of the three episodes
    assert len(endpoint.requests) == n
    assert "0 judge calls, 10 served from cache" in again.stdout
    assert first.stderr == again.stderr == ""  # not a terminal: the summary alone
    lines = [json.loads(line) for line in (files / "v.jsonl").read_text().splitlines()]
    assert lines[0]["kind"] == "policy"
    assert lines[0]["policy"]["judge"]["params"]["model"] == "judge-model-2026-01"
    by_case = {v["case_id"]: v for v in lines[1:]}
    assert by_case["c2"]["safe"] is False
    assert by_case["c2"]["steps"][3]["model"] == "judge-model-2026-01"
    assert (files / "v.jsonl").read_bytes()[1:] == (files / "v2.jsonl").read_bytes()[1:]
    no_canary(files, first.stdout, first.stderr, again.stdout)


def test_steps_without_a_verdict_exit_6_with_one_line_per_failure_class(files: Path) -> None:
    def answer(request: Request) -> Reply:
        if "evil" in request.step_text:
            return Reply(status=500, body=f"boom {request.headers['Authorization']}".encode())
        if "I can't help" in request.step_text:
            return Reply(body=completion("Sure thing!"))
        return default_answer(request)

    with running(answer) as endpoint:
        p = policy(files, endpoint.url)
        r = run("score", "cand.jsonl", "--policy", p, "-o", "v.jsonl", "--cache", "c.db", cwd=files)
        cached = len(endpoint.requests)
        again = run(
            "score", "cand.jsonl", "--policy", p, "-o", "v.jsonl", "--cache", "c.db", cwd=files
        )
    assert r.returncode == 6
    err = r.stderr.splitlines()
    assert "no verdict for 2 steps of 1 episode" in err[0]
    assert len(err) == 3
    assert any("http_status: 1 step (" in line for line in err)
    assert any("bad_answer: 1 step (" in line for line in err)
    assert "1 without a verdict" in r.stdout
    verdicts = [json.loads(line) for line in (files / "v.jsonl").read_text().splitlines()[1:]]
    assert sorted(v["case_id"] for v in verdicts) == ["c1", "c3"]  # no verdict made up for c2
    # The failed steps were not cached: asked again (only they), failing again.
    assert again.returncode == 6
    assert len(endpoint.requests) - cached == 2
    no_canary(files, r.stdout, r.stderr, again.stderr)


def test_gate_scores_the_candidate_on_the_fly_like_score_then_gate(files: Path) -> None:
    write_episodes(files / "base.jsonl", {"c1": ["all done"], "c2": ["ok"], "c3": ["ok"]})
    with running() as endpoint:
        p = policy(files, endpoint.url)
        run("score", "base.jsonl", "--policy", p, "-o", "b.jsonl", "--cache", "c.db", cwd=files)
        run("score", "cand.jsonl", "--policy", p, "-o", "v.jsonl", "--cache", "c.db", cwd=files)
        before = len(endpoint.requests)
        gate = ["gate", "--baseline", "b.jsonl", "--format", "json", "--cache", "c.db"]
        scored_first = run(*gate, "--candidate", "v.jsonl", cwd=files)
        on_the_fly = run(*gate, "--candidate-episodes", "cand.jsonl", "--policy", p, cwd=files)
    assert scored_first.returncode == on_the_fly.returncode == 1  # c2 regressed
    fly, first = json.loads(on_the_fly.stdout), json.loads(scored_first.stdout)
    # The same report but for what each names as the candidate's files.
    assert fly["inputs"]["candidate"].pop("files") == ["cand.jsonl"]
    assert first["inputs"]["candidate"].pop("files") == ["v.jsonl"]
    assert fly == first
    assert len(endpoint.requests) == before  # through the cache
    assert on_the_fly.stderr == ""


def test_gate_on_the_fly_with_judge_failures_exits_6(files: Path) -> None:
    write_episodes(files / "base.jsonl", {"c1": ["all done"]})
    with running(lambda r: Reply(status=503)) as endpoint:
        p = policy(files, endpoint.url)
        (files / "b.jsonl").write_text("")
        r = run(
            "gate", "--baseline", "b.jsonl", "--candidate-episodes", "cand.jsonl", "--policy", p,
            "--no-cache", "--allow-empty-input", cwd=files,
        )  # fmt: skip
    assert r.returncode == 6
    assert "http_status: 10 steps" in r.stderr
    # The report is printed all the same, as when gating after `score` (which writes the
    # verdicts it could make): here no case has a verdict on either side.
    assert "decision: EMPTY" in r.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--candidate-episodes", "cand.jsonl"], "needs --policy"),
        (["--candidate", "v.jsonl", "--policy", "p.toml"], "drop --policy"),
    ],
)
def test_gate_candidate_usage(files: Path, args: list[str], fragment: str) -> None:
    r = run("gate", "--baseline", "b.jsonl", *args, cwd=files)
    assert r.returncode == 2
    assert fragment in r.stderr


def test_rebaseline_pays_only_for_steps_never_scored(files: Path) -> None:
    """Scored first cut at the refusal, the baseline re-scored without the cut asks the
    judge only about the steps after the cut."""
    with running() as endpoint:
        old = policy(files, endpoint.url, refusal=True, name="old.toml")
        new = policy(files, endpoint.url, refusal=False, name="new.toml")
        run("score", "cand.jsonl", "--policy", old, "-o", "old.jsonl", "--cache", "c.db", cwd=files)
        before = len(endpoint.requests)
        r = run(
            "rebaseline", "--episodes", "cand.jsonl", "--policy", new, "-o", "b2.jsonl",
            "--cache", "c.db", cwd=files,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # Another truncation flag is another scoring policy, but the same judge: c2's step 3
    # (after the refusal) is the only step the cut left unjudged.
    assert len(endpoint.requests) - before == 1
    assert "1 judge call made, 9 served from cache" in r.stdout


def _run_on_a_terminal(*args: str | Path, cwd: Path) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; its exit code and what it drew."""
    master, slave = pty.openpty()
    env = {"PATH": "/usr/bin:/bin", "LITMUS_JUDGE_KEY": CANARY, "HOME": str(cwd), "COLUMNS": "160"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "litmus_sandbox._cli.main", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the other side closed (EIO)
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_a_terminal_shows_progress_and_quiet_does_not(files: Path) -> None:
    with running(delay=0.05) as endpoint:
        p = policy(files, endpoint.url)
        score: list[str | Path] = [
            "score",
            "cand.jsonl",
            "--policy",
            p,
            "-o",
            "v.jsonl",
            "--no-cache",
        ]
        code, drawn = _run_on_a_terminal(*score, cwd=files)
        quiet_code, quiet = _run_on_a_terminal(*score, "--quiet", cwd=files)
    assert code == quiet_code == 0
    assert "scoring" in drawn
    assert "calls" in drawn
    assert "cached" in drawn
    assert quiet == ""
    assert CANARY not in drawn


def test_a_key_echoed_in_an_answer_is_never_written(files: Path) -> None:
    """The answer's reason, model and system fingerprint are written: an endpoint echoing
    the key there must not put it in the verdicts or the cache."""

    def echo(request: Request) -> Reply:
        return verdict(True, f"your key {CANARY} is fine", model=f"m-{CANARY}", fingerprint=CANARY)

    with running(echo) as endpoint:
        p = policy(files, endpoint.url)
        r = run("score", "cand.jsonl", "--policy", p, "-o", "v.jsonl", cwd=files)
    assert r.returncode == 0, r.stderr
    assert "<redacted>" in (files / "v.jsonl").read_text()
    no_canary(files, r.stdout, r.stderr)


def test_a_base_url_with_a_query_is_refused_without_echoing_it(files: Path) -> None:
    secret = "sk-QUERYSECRET-0123456789abcdef"
    (files / "q.toml").write_text(
        POLICY.format(url=f"http://127.0.0.1:9/v1?api_key={secret}", refusal="false")
    )
    r = run("score", "cand.jsonl", "--policy", "q.toml", "-o", "v.jsonl", cwd=files)
    assert r.returncode == 2
    assert "must not have a query or fragment" in r.stderr
    assert secret not in r.stderr + r.stdout
