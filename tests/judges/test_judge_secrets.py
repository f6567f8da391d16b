"""A judge's secrets come from the environment (``[judge.secrets]``): the function gets
them, only the variables' names are written, and no file and no output holds a value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from factories import call, end, header, msg

from litmus_sandbox import ConfigError, JsonlWriter, load_policy, read_verdicts

CANARY = "canary-9e4b1f0d77a2c3"

JUDGE = """
def judge(step, context, params, secrets):
    text = getattr(step, "text", "")
    if "explode" in text:
        raise RuntimeError("the judge API said: bad key " + secrets["api"])
    return {"safe": "evil" not in text, "reason": "checked with " + secrets["api"]}
"""

POLICY = """
[judge]
kind = "python"
entry = "secretjudge:judge"
path = "secretjudge.py"
label = "with-secrets"
[judge.params]
word = "evil"
[judge.secrets]
api = "LITMUS_TEST_JUDGE_SECRET"
"""


def _episodes(path: Path) -> None:
    with JsonlWriter(path) as w:
        for case, text in (("c1", "fine"), ("c2", "evil plan"), ("c3", "explode now")):
            eid = f"ep-{case}"
            steps = [msg(0, "user", "task", eid=eid), call(1, "search", eid=eid)]
            steps.append(msg(2, "assistant", text, eid=eid))
            w.write(header(eid, case))
            for s in steps:
                w.write(s)
            w.write(end(eid, len(steps)))


def _score(folder: Path, secret: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder)}
    if secret is not None:
        env["LITMUS_TEST_JUDGE_SECRET"] = secret
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "litmus_sandbox._cli.main",
            "score",
            "eps.jsonl",
            "--policy",
            "p.toml",
            "-o",
            "v.jsonl",
            "--cache",
            "c.db",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_judge_secrets_come_from_the_environment_and_go_nowhere(tmp_path: Path) -> None:
    """The function gets its secret; the verdict stream names only the variable; a judge
    error quoting the secret is shown scrubbed; a rotated secret keeps the judge (and its
    cache); no file and no output holds the secret."""
    (tmp_path / "secretjudge.py").write_text(JUDGE)
    (tmp_path / "p.toml").write_text(POLICY)
    _episodes(tmp_path / "eps.jsonl")
    first = _score(tmp_path, CANARY)
    verdicts = {v.case_id: v for v in read_verdicts(tmp_path / "v.jsonl").verdicts}
    assert verdicts["c1"].safe
    assert not verdicts["c2"].safe
    assert "c3" not in verdicts  # the judge failed there: no verdict, nothing cached
    assert "LITMUS_TEST_JUDGE_SECRET" in (tmp_path / "v.jsonl").read_text()
    assert "<redacted>" in first.stdout + first.stderr  # the judge error, scrubbed
    rotated = _score(tmp_path, CANARY[::-1])  # the same judge: its fingerprint holds
    for text in (first.stdout, first.stderr, rotated.stdout, rotated.stderr):
        assert CANARY not in text
        assert CANARY[::-1] not in text
    for f in tmp_path.rglob("*"):
        if f.is_file() and f.name != "secretjudge.py":
            data = f.read_bytes()
            assert CANARY.encode() not in data, f
            assert CANARY[::-1].encode() not in data, f


def test_a_missing_secret_variable_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "secretjudge.py").write_text(JUDGE)
    (tmp_path / "p.toml").write_text(POLICY)
    _episodes(tmp_path / "eps.jsonl")
    done = _score(tmp_path, None)
    assert done.returncode != 0
    assert "LITMUS_TEST_JUDGE_SECRET" in done.stderr
    assert "secret 'api'" in done.stderr


def test_judge_secrets_name_environment_variables(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(POLICY.replace('"LITMUS_TEST_JUDGE_SECRET"', '"not a var"'))
    with pytest.raises(ConfigError, match="not an environment variable name"):
        load_policy(tmp_path / "p.toml")
