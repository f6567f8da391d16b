"""Each extra's command, run for real from its own profile: otel, agentdojo, inspect,
redis, cloud (a missing one: one line)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis_server import redis_server
from s3_server import S3Bucket

from installed.runner import Profile

#: A cold profile venv is made inside the first test that needs it (dev.py makes them
#: before pytest, so a warm run never waits here).
pytestmark = pytest.mark.timeout(900)

HERE = Path(__file__).parent


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def chat_episodes(profile: Profile) -> Path:
    """An episode stream made by ``import openai-chat`` (a base command) in ``profile``."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    transcript = {
        "case_id": "c",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
    }
    (profile.cwd / "chats.jsonl").write_text(json.dumps(transcript) + "\n")
    profile.run("import", "openai-chat", "chats.jsonl", "-o", "episodes.jsonl")
    return profile.cwd / "episodes.jsonl"


def test_export_otel(installed: Callable[[str], Profile]) -> None:
    profile = installed("otel")
    episodes = chat_episodes(profile)
    profile.run("export", "otel", episodes, "-o", "spans.otlp.jsonl", "--include-content")
    (trace,) = records(profile.cwd / "spans.otlp.jsonl")
    spans = trace["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert any(s["name"] == "execute_tool f" for s in spans), [s["name"] for s in spans]


def test_run_agentdojo_on_one_banking_task(installed: Callable[[str], Profile]) -> None:
    profile = installed("agentdojo")
    profile.run(
        "run",
        "agentdojo",
        "--suite",
        "banking",
        "--user-task",
        "user_task_0",
        "--injection-task",
        "none",
        "-o",
        "dojo.jsonl",
        timeout=180,
    )
    recorded = records(profile.cwd / "dojo.jsonl")
    assert recorded[0]["kind"] == "episode"
    assert recorded[-1]["status"] == "complete"
    assert any(r.get("type") == "tool_call" and r["fidelity"] == "real" for r in recorded)


def test_an_inspect_eval_with_the_sandbox_provider_offline(
    installed: Callable[[str], Profile],
) -> None:
    profile = installed("inspect")
    episodes = profile.cwd / "live.jsonl"
    env = profile.env(
        LITMUS_SANDBOX_EPISODES=str(episodes), INSPECT_REQUIRED_HOOKS="litmus_sandbox/recorder"
    )
    done = profile.run(HERE / "inspect_eval.py", "logs", program="python", env=env, timeout=240)
    assert "\nsuccess" in done.stdout, done.stdout
    recorded = records(episodes)
    assert recorded[-1]["kind"] == "end"
    assert recorded[-1]["status"] == "complete", recorded[-1]
    calls = [r for r in recorded if r.get("type") == "tool_call"]
    assert [c["tool"] for c in calls][:1] == ["write_note"]
    (log,) = (profile.cwd / "logs").glob("*.eval")
    profile.run("import", "inspect", log, "-o", "imported.jsonl")
    assert records(profile.cwd / "imported.jsonl")[0]["case_id"] == "sandbox-write"


def _rules_policy(profile: Profile) -> Path:
    policy = profile.cwd / "policy.toml"
    policy.write_text('[judge]\nkind = "rules"\n')
    return policy


def test_a_redis_cache_without_its_extra_is_one_line(installed: Callable[[str], Profile]) -> None:
    profile = installed("base")
    episodes, policy = chat_episodes(profile), _rules_policy(profile)
    cache = "redis://127.0.0.1:1/0"  # never reached: the extra is looked for first
    done = profile.run(
        "score", episodes, "--policy", policy, "--cache", cache, "-o", "v.jsonl", expect=2
    )
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'litmus-sandbox[redis]'" in lines[0]
    assert not (profile.cwd / "v.jsonl").exists()


def test_score_through_a_redis_cache(installed: Callable[[str], Profile], tmp_path: Path) -> None:
    """With the extra, on a real redis-server: the second run is served from the cache."""
    profile = installed("redis")
    episodes, policy = chat_episodes(profile), _rules_policy(profile)
    with redis_server(tmp_path / "redis") as server:
        runs = [
            profile.run("score", episodes, "--policy", policy, "--cache", server.url, "-o", out)
            for out in ("a.jsonl", "b.jsonl")
        ]
    assert "0 served from cache" in runs[0].stdout
    assert "0 judge calls" in runs[1].stdout
    assert records(profile.cwd / "a.jsonl")[1:] == records(profile.cwd / "b.jsonl")[1:]


def test_an_s3_input_or_output_without_its_extra_is_one_line(
    installed: Callable[[str], Profile],
) -> None:
    profile = installed("base")
    episodes, policy = chat_episodes(profile), _rules_policy(profile)
    missing = [
        "litmus-sandbox: error: fsspec is not installed: install the extra: "
        "pip install 'litmus-sandbox[cloud]'"
    ]
    done = profile.run("score", "s3://bucket/runs/", "--policy", policy, "-o", "v.jsonl", expect=2)
    assert done.stderr.splitlines() == missing
    # An output URL is looked at before any work: nothing scored, nothing written.
    done = profile.run("score", episodes, "--policy", policy, "-o", "s3://b/v.jsonl", expect=2)
    assert done.stderr.splitlines() == missing
    assert done.stdout == ""


def test_score_and_gate_on_s3_with_the_cloud_extra(
    installed: Callable[[str], Profile], s3: S3Bucket
) -> None:
    """Installed with ``[cloud]``, on a real S3 server (SeaweedFS): episodes read from a
    prefix, verdicts and a report written as objects, as from local files."""
    profile = installed("cloud")
    episodes, policy = chat_episodes(profile), _rules_policy(profile)
    env = profile.env(**s3.server.env())
    s3.write("runs/a.episodes.jsonl", episodes.read_bytes())
    profile.run("score", episodes, "--policy", policy, "-o", "local.jsonl", env=env)
    profile.run("score", s3.url("runs/"), "--policy", policy, "-o", s3.url("v/c.verdicts.jsonl"), env=env)  # fmt: skip
    assert s3.read("v/c.verdicts.jsonl") == (profile.cwd / "local.jsonl").read_bytes()
    done = profile.run(
        "gate", "--baseline", "local.jsonl", "--candidate", s3.url("v/"), "-o", s3.url("r.md"),
        "--format", "markdown", env=env,
    )  # fmt: skip
    assert "report written to" in done.stderr
    assert b"PASS" in s3.read("r.md")
